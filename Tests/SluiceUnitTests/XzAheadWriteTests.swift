import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice
@testable import SluiceTestSupport

/// unxz's workers write their blocks straight into the file behind (`AheadWriter`), and the
/// stage announces them in order (`advance`): the CRC-64 combination that lets the file sink
/// keep its checksum without seeing the bytes, the file sink's side, and the whole path —
/// output, cuts with bytes ahead in the file, a block that lies about its size.
final class XzAheadWriteTests: XCTestCase {
    /// The checksum `OutputChecksum` keeps for `bytes` written in order.
    static func checksum(_ bytes: ArraySlice<UInt8>) -> OutputChecksum {
        var c = OutputChecksum()
        Array(bytes).withUnsafeBytes { c.update($0) }
        return c
    }

    private func fileBytes(_ path: String, count: UInt64) throws -> [UInt8] {
        Array(try [UInt8](Data(contentsOf: URL(fileURLWithPath: FileSink.partialPath(for: path)))).prefix(Int(count)))
    }

    func testCRC64CombinationIsTheChecksumOfTheConcatenation() {
        var random = SeededRandom(seed: 91)
        let data = makeTestData(count: 300_000, seed: 92)
        for n in 0..<300 {
            let a = Int(random.next() % UInt64(data.count + 1))
            let b = n % 5 == 0 ? a : a + Int(random.next() % UInt64(data.count - a + 1))
            var combined = Self.checksum(data[..<a])
            let second = Self.checksum(data[a..<b])
            combined.append(crc64: second.value, count: UInt64(b - a))
            XCTAssertEqual(combined, Self.checksum(data[..<b]), "split at \(a) of \(b)")
        }
        // The empty first part, and long runs of zeros (x^(8n) for large n).
        let zeros = [UInt8](repeating: 0, count: 5_000_000)
        var c = OutputChecksum()
        c.append(crc64: Self.checksum(zeros[...]).value, count: UInt64(zeros.count))
        XCTAssertEqual(c, Self.checksum(zeros[...]))
        var d = Self.checksum(data[..<7])
        d.append(crc64: Self.checksum(zeros[...]).value, count: UInt64(zeros.count))
        XCTAssertEqual(d, Self.checksum(data[..<7] + zeros[...]))
        // A wrong length gives another value (the combination depends on it).
        var e = Self.checksum(data[..<7])
        e.append(crc64: Self.checksum(data[7..<100]).value, count: 94)
        XCTAssertNotEqual(e, Self.checksum(data[..<100]))
    }

    func testFileSinkCountsBytesWrittenAheadOnlyWhenAdvanced() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let sink = try FileSink(path: out)
        try sink.write(Array("abc".utf8))
        let writer = try XCTUnwrap(sink.aheadWriter())
        // Offsets count from the next byte in order: "defg" at 0, "hij" written later in order.
        let later = Array("klm".utf8)
        try later.withUnsafeBytes { try writer.write($0, at: 7) }
        try Array("defg".utf8).withUnsafeBytes { try writer.write($0, at: 0) }
        XCTAssertEqual(sink.snapshot().bytesWritten, 3)
        try sink.advance(4, crc64: Self.checksum(Array("defg".utf8)[...]).value)
        try sink.write(Array("hij".utf8))
        try sink.advance(3, crc64: Self.checksum(later[...]).value)
        let state = sink.snapshot()
        XCTAssertEqual(state.bytesWritten, 13)
        XCTAssertEqual(state.crc64, Self.checksum(Array("abcdefghijklm".utf8)[...]).value)
        try sink.finish()
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "abcdefghijklm")
    }

    func testFileSinkNeverPublishesBytesWrittenAheadAndNotAdvanced() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let sink = try FileSink(path: out)
        try sink.write(Array("abc".utf8))
        let writer = try XCTUnwrap(sink.aheadWriter())
        try Array("stray".utf8).withUnsafeBytes { try writer.write($0, at: 10) }
        XCTAssertThrowsError(try sink.finish()) { error in
            guard case SluiceError.unexpected(let reason)? = error as? SluiceError else { return XCTFail("got \(error)") }
            XCTAssertTrue(reason.contains("not renamed"), reason)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
    }

    /// A relay hands out writers whose offset 0 is the next byte it accepts, whatever went
    /// through it before.
    func testRelayShiftsTheWriterToItsOwnStream() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let sink = try FileSink(path: out)
        try sink.write(Array("0123".utf8))
        let relay = try Relay(next: sink, control: RunControl(progress: ProgressReporter(handler: nil)), name: "test", bufferCount: 2, bufferSize: 4096)
        try relay.write(Array("abc".utf8))
        let writer = try XCTUnwrap(relay.aheadWriter())
        try Array("DEF".utf8).withUnsafeBytes { try writer.write($0, at: 2) }
        try relay.write(Array("de".utf8))
        try relay.advance(3, crc64: Self.checksum(Array("DEF".utf8)[...]).value)
        try relay.write(Array("g".utf8))
        try relay.finish()
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "0123abcdeDEFg")
        XCTAssertNil(try Relay(next: MemorySink(), control: RunControl(progress: ProgressReporter(handler: nil)), name: "test").aheadWriter())
    }

    /// An advance is a queue item like bytes and barriers: the sink behind sees them in the
    /// order the producer sent them, batched bytes before the advance that follows them.
    func testRelayPassesAdvancesInOrderWithBytesAndBarriers() throws {
        let sink = OrderSink()
        let relay = try Relay(next: sink, control: RunControl(progress: ProgressReporter(handler: nil)), name: "test", bufferCount: 2, bufferSize: 4096)
        try relay.write(Array("ab".utf8))
        try relay.advance(5, crc64: 1)
        try relay.barrier(Cut(source: SourceState(kind: "read", location: "x", offset: 0), spill: nil, onSeal: { _ in }))
        try relay.advance(7, crc64: 2)
        try relay.write(Array("c".utf8))
        try relay.finish()
        XCTAssertEqual(sink.events, ["write 2", "advance 5 crc 1", "barrier", "advance 7 crc 2", "write 1", "finish"])
    }

    /// Multi-block files with odd block sizes, filters in some streams (those blocks take the
    /// held path), concatenated streams with padding: unxz → relay → file is xz's output, and
    /// blocks went out ahead.
    func testMultiBlockThroughTheAheadPathMatchesXz() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = XzHandOverScrutinyTests.taggedZeros(count: 5 * Relay.handOverPiece + 4321) + makeTestData(count: 3_000_000, seed: 93)
        let third = plain.count / 3
        var xz: [UInt8] = []
        for (part, options) in zip(
            [Array(plain[..<third]), Array(plain[third..<(2 * third)]), Array(plain[(2 * third)...])],
            ["-0 --block-size=1234567", "--delta=dist=1 --lzma2=preset=0 --block-size=1100000", "-1 --block-size=2500001 --check=crc32"])
        {
            xz += try XzParallelTests.multiBlock(part, options, dir: dir) + [0, 0, 0, 0]
        }
        xz += try XzParallelTests.multiBlock(plain, "-0 --block-list=3000000,1048576,1048575,1048608,5000000,700,1,77777 --check=none", dir: dir)
        let expected = plain + plain
        for decoders in 2...3 {
            for chunk in [1 << 20, 65_537] {
                let out = dir + "/out\(decoders)-\(chunk)"
                let relay = try Relay(
                    next: try FileSink(path: out), control: RunControl(progress: ProgressReporter(handler: nil)), name: "test", bufferCount: 2, bufferSize: 4096
                )
                let decoder = try XzDecoder(next: relay, decoders: decoders)
                try write(xz, to: decoder, chunk: chunk)
                try decoder.finish()
                XCTAssertGreaterThan(decoder.blocksWrittenAhead, 4, "\(decoders) decoders, \(chunk)-byte writes")
                XCTAssertEqual(decoder.workersRunning, 0)
                let output = try [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))
                XCTAssertTrue(output == expected, "\(decoders) decoders, \(chunk)-byte writes: \(output.count) bytes of \(expected.count)")
            }
        }
    }

    /// A block written ahead at another place than its turn (a wrong offset would leave the
    /// right length with the wrong bytes, and the file's checksum counts the worker's bytes)
    /// is refused when its turn comes, before it is counted.
    func testABlockWrittenAheadAtTheWrongPlaceIsRefusedAtItsTurn() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 1_000_000, seed: 98)
        let xz = try XzTool.compress(plain, options: "-T2 -0 --block-size=150000", dir: dir)
        let out = dir + "/out"
        let relay = try Relay(next: try FileSink(path: out), control: RunControl(progress: ProgressReporter(handler: nil)), name: "test")
        let decoder = try XzDecoder(next: relay, decoders: 2)
        decoder.misplaceAheadForTests = 1
        let failure = failureWriting(xz, to: decoder, chunk: 65_536)
        guard case SluiceError.unexpected(let reason)? = failure as? SluiceError else {
            return XCTFail("expected the misplaced block to be refused, got \(String(describing: failure))")
        }
        XCTAssertTrue(reason.contains("written ahead at another place"), reason)
        XCTAssertEqual(decoder.blocksWrittenAhead, 0, "nothing written ahead was counted")
    }

    /// Cuts while workers write ahead, and the "kill" after more input went in: the partial
    /// file often holds bytes past the cut's prefix; the resume cuts them off and its output
    /// is the original.
    func testCutsWithBytesAheadInTheFileResumeExactly() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 1_500_000, seed: 94)
        let inputs: [(String, [UInt8])] = [
            ("odd blocks, crc64", try XzParallelTests.multiBlock(plain, "-0 --block-size=170001 --check=crc64", dir: dir)),
            (
                "two streams",
                try XzParallelTests.multiBlock(plain, "-1 --block-size=300000", dir: dir)
                    + XzParallelTests.multiBlock(plain, "-0 --block-size=99999 --check=sha256", dir: dir)
            ),
        ]
        var random = SeededRandom(seed: 95)
        var cuts = 0, aheadPastCut = 0
        for (label, xz) in inputs {
            let expected = label == "two streams" ? plain + plain : plain
            for n in 0..<Thoroughness.scaled(25) {
                let out = dir + "/out-\(cuts)"
                let cut = Int(random.next() % UInt64(xz.count + 1))
                let killed = min(xz.count, cut + Int(random.next() % 400_000))
                var fileState: FileSinkState?
                var xzState: XzState?
                do {
                    let first = try FileSink(path: out)
                    let decoder = try XzDecoder(next: first, decoders: 2 + n % 2)
                    try write(Array(xz[..<cut]), to: decoder, chunk: 1 + Int(random.next() % 100_000))
                    let checkpoint = try roundTripped(try takeCut(decoder, offset: cut, spec: "read x | unxz | file y"))
                    xzState = try XCTUnwrap(checkpoint.stages.first?.as(XzState.self))
                    fileState = try XCTUnwrap(checkpoint.stages.last?.as(FileSinkState.self))
                    // More input after the cut, then the run ends without finishing.
                    try write(Array(xz[cut..<killed]), to: decoder, chunk: 65_536)
                }
                let saved = try XCTUnwrap(fileState)
                let partial = FileSink.partialPath(for: out)
                if let size = try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? UInt64, size > saved.bytesWritten { aheadPastCut += 1 }
                XCTAssertNil(saved.resumeProblem(), label)
                let second = try FileSink(path: out, restoring: saved)
                let restored = try XzDecoder(next: second, decoders: 1 + Int(random.next() % 3), restoring: xzState)
                try write(Array(xz[cut...]), to: restored, chunk: 1 + Int(random.next() % 100_000))
                try restored.finish()
                let output = try [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))
                XCTAssertTrue(output == expected, "\(label): cut at \(cut), stopped at \(killed) of \(xz.count)")
                cuts += 1
            }
        }
        XCTAssertGreaterThan(aheadPastCut, cuts / 5, "cuts whose file held bytes written ahead past the prefix")
    }

    /// A block whose header declares a wrong uncompressed size, decoded by a worker writing
    /// ahead: a corrupt-data error in that block, no advance past what is true, nothing
    /// published.
    func testABlockThatLiesAboutItsSizeFailsBeforeItIsCounted() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 1_200_000, seed: 96)
        let xz = try XzTool.compress(plain, options: "-T2 -0 --block-size=150000", dir: dir)
        let starts = try XzBlockLiesTests.blockStarts(xz, dir: dir)
        XCTAssertEqual(starts.count, 8)
        for block in [2, 5] {
            for lie in [1, -1, 100_000, -149_999] {
                let bad = try XzBlockLiesTests.lying(xz, block: starts[block], compressed: 0, uncompressed: lie)
                let out = dir + "/lie-\(block)-\(lie)"
                let sink = try FileSink(path: out)
                let decoder = try XzDecoder(next: sink, decoders: 2)
                let failure = failureWriting(bad, to: decoder, chunk: 65_536)
                guard case SluiceError.corruptData(_, let offset, _)? = failure as? SluiceError else {
                    XCTFail("block \(block + 1) declares \(lie) bytes more: \(String(describing: failure))")
                    continue
                }
                XCTAssertGreaterThanOrEqual(offset, UInt64(starts[block]), "lie \(lie)")
                XCTAssertLessThan(offset, UInt64(starts[block + 1]), "lie \(lie)")
                let state = sink.snapshot()
                // The lying block may stream as the head before its end is checked; nothing after it.
                XCTAssertLessThanOrEqual(state.bytesWritten, UInt64((block + 1) * 150_000), "nothing after the lying block counted")
                XCTAssertEqual(try fileBytes(out, count: state.bytesWritten), Array(plain[..<Int(state.bytesWritten)]), "lie \(lie)")
                XCTAssertEqual(state.crc64, Self.checksum(plain[..<Int(state.bytesWritten)]).value)
                XCTAssertFalse(FileManager.default.fileExists(atPath: out))
            }
        }
    }

    /// A worker's write ahead fails (the disk is full): the file sink's own error (exit 6,
    /// the partial file's path, ENOSPC) at that block's turn, after every block before it
    /// went on and with nothing of it or after it announced.
    func testAFailedWriteAheadIsTheFileSinksWriteErrorAtItsBlock() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 1_200_000, seed: 97)
        let xz = try XzTool.compress(plain, options: "-T2 -0 --block-size=150000", dir: dir)
        var workerFailures = 0
        for failing in [1, 2, 3, 4, 6] {
            let sink = FullDiskSink(failingAt: UInt64(failing * 150_000))
            let decoder = try XzDecoder(next: sink, decoders: 2)
            let failure = failureWriting(xz, to: decoder, chunk: 65_536)
            guard case SluiceError.io(let path, let operation, let code)? = failure as? SluiceError else {
                XCTFail("block \(failing + 1): \(String(describing: failure))")
                continue
            }
            XCTAssertEqual(path, "full.sluice-part")
            XCTAssertEqual(operation, "write to")
            XCTAssertEqual(code, ENOSPC)
            XCTAssertEqual(failure.map { ($0 as? SluiceError)?.exitCode }, 6)
            // The block may be the head, written in order: the same error either way.
            workerFailures += sink.aheadFailures > 0 ? 1 : 0
            // Everything before the failing block went on, in order; nothing from it on.
            XCTAssertLessThanOrEqual(sink.counted, UInt64(failing * 150_000), "block \(failing + 1)")
            XCTAssertEqual(decoder.workersRunning, 0)
        }
        XCTAssertGreaterThan(workerFailures, 0, "a worker's write ahead failed in some run")
    }
}

/// A file sink in memory whose ahead writes fail with ENOSPC at and past `failingAt` (and
/// whose in-order writes are refused there too): which blocks went ahead and what was counted.
private final class FullDiskSink: AheadWritingSink, @unchecked Sendable {
    private let failingAt: UInt64
    private let lock = NSLock()
    private var failures = 0
    private(set) var counted: UInt64 = 0

    init(failingAt: UInt64) { self.failingAt = failingAt }

    var aheadFailures: Int { lock.withLock { failures } }

    private final class Writer: AheadWriter, @unchecked Sendable {
        let sink: FullDiskSink
        init(_ sink: FullDiskSink) { self.sink = sink }
        func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
            guard offset + UInt64(bytes.count) <= sink.failingAt else {
                sink.lock.withLock { sink.failures += 1 }
                throw SluiceError.io(path: "full.sluice-part", operation: "write to", errno: ENOSPC)
            }
        }
    }

    func aheadWriter() -> AheadWriter? { Writer(self) }

    func advance(_ count: UInt64, crc64: UInt64) throws {
        counted += count
        XCTAssertLessThanOrEqual(counted, failingAt, "an advance counted bytes whose write failed")
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard counted + UInt64(bytes.count) <= failingAt else {
            throw SluiceError.io(path: "full.sluice-part", operation: "write to", errno: ENOSPC)
        }
        counted += UInt64(bytes.count)
    }

    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}

/// Records what reaches it, in order.
private final class OrderSink: AheadWritingSink, @unchecked Sendable {
    private(set) var events: [String] = []
    func aheadWriter() -> AheadWriter? { nil }
    func advance(_ count: UInt64, crc64: UInt64) throws { events.append("advance \(count) crc \(crc64)") }
    func write(_ bytes: UnsafeRawBufferPointer) throws { events.append("write \(bytes.count)") }
    func barrier(_ cut: Cut) throws { events.append("barrier") }
    func finish() throws { events.append("finish") }
}
