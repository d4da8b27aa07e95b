import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// unzstd against `zstd -dc`: every level and the options that change the frame layout,
/// written in various chunk sizes; corrupt input is refused with a typed error.
final class ZstdDecoderTests: XCTestCase {
    private var thorough: Bool { ProcessInfo.processInfo.environment["SLUICE_SLOW_TESTS"] == "1" }

    static func decode(_ zst: [UInt8], chunk: Int = 65536, windowLimit: UInt64 = 128 << 20) throws -> [UInt8] {
        let sink = MemorySink()
        let decoder = try ZstdDecoder(next: sink, windowLimit: windowLimit)
        try write(zst, to: decoder, chunk: chunk)
        try decoder.finish()
        XCTAssertTrue(sink.finished)
        return sink.bytes
    }

    /// Text-like, incompressible, and long runs (zstd writes raw and RLE blocks for those).
    static func samples() -> [(String, [UInt8])] {
        var rng = SeededRandom(seed: 5)
        let random = (0..<150_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let runs = [UInt8](repeating: 0, count: 300_000) + [UInt8](repeating: 7, count: 200_000) + Array(random.prefix(1000))
        return [("text", makeTestData(count: 400_000, seed: 3)), ("random", random), ("runs", runs), ("tiny", Array("hello, zstd".utf8))]
    }

    func testEveryLevelMatchesZstd() throws {
        let dir = try makeTemporaryDirectory(self)
        for (name, plain) in Self.samples() {
            // Every level with SLUICE_SLOW_TESTS=1; a spread of them otherwise.
            let levels = (thorough ? (1...19).map { "-\($0)" } : ["-1", "-3", "-7", "-12", "-16", "-19"]) + ["--ultra -22", "--fast=3"]
            for level in levels {
                let zst = try zstdCompress(plain, level, in: dir)
                let output = try Self.decode(zst, chunk: level == "-3" ? 1 : 4096 * (level.count + 1))
                XCTAssertTrue(output == plain, "\(name) \(level)")
            }
        }
    }

    func testFrameOptionsMatchZstd() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 2_500_000, seed: 9)
        for (args, streamed) in [
            ("--long=27 -3", false), ("-T2 -5", false), ("--no-check -3", false),
            ("--no-content-size -3", false), ("-3", true), ("--content-size -3", true),
            ("-T2 -B100000 -3", true),
        ] {
            let zst = try zstdCompress(plain, args, streamed: streamed, in: dir)
            XCTAssertTrue(try Self.decode(zst, chunk: 100_003) == plain, "\(args) streamed=\(streamed)")
        }
    }

    /// What a real encoder makes at RFC 8878's edges is never refused: a two-symbol alphabet
    /// (a Huffman tree of one explicit weight), long runs (RLE blocks, FSE tables in RLE
    /// mode), repeated offsets (rep codes and the ll = 0 shift), literals only (blocks with
    /// no sequences), a 1 KiB window (blocks of 1 KiB), small blocks, and a window exactly
    /// at the limit — by its descriptor and as a single-segment frame's content size.
    func testRealEncoderEdgeCasesAreAccepted() throws {
        let dir = try makeTemporaryDirectory(self)
        var rng = SeededRandom(seed: 13)
        let twoSymbols = (0..<60_000).map { _ in UInt8.random(in: 0...7, using: &rng) == 0 ? UInt8(ascii: "b") : UInt8(ascii: "a") }
        let repeats = [UInt8]((0..<4000).flatMap { i in Array("abcdefgh abcdefgh XY\(i % 7) abcdefgh Q".utf8) })
        let literalsOnly = (0..<40_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let runs = [UInt8](repeating: 1, count: 90_000) + [UInt8](repeating: 2, count: 70_000) + twoSymbols.prefix(500)
        let text = makeTestData(count: 1_100_000, seed: 21)
        for (name, plain) in [("two symbols", twoSymbols), ("repeats", repeats), ("literals only", literalsOnly), ("runs", runs)] {
            for args in ["-1", "-19", "--fast=4", "--zstd=wlog=10 -3", "-B4096 -9"] {
                XCTAssertTrue(try Self.decode(zstdCompress(plain, args, in: dir)) == plain, "\(name) \(args)")
            }
        }
        let window = try zstdCompress(text, "--zstd=wlog=20 -12", in: dir)
        XCTAssertTrue(try Self.decode(window, windowLimit: 1 << 20) == text, "window of exactly the limit")
        let single = Array(text.prefix(1 << 20))
        XCTAssertTrue(try Self.decode(zstdCompress(single, "-19", in: dir), windowLimit: 1 << 20) == single, "single segment at the limit")
        XCTAssertThrowsError(try Self.decode(window, windowLimit: (1 << 20) - 1), "one byte under the window") { error in
            guard case SluiceError.limitExceeded("zstd", _, "window", 1 << 20, (1 << 20) - 1, _)? = error as? SluiceError else {
                return XCTFail("\(error)")
            }
        }
    }

    func testConcatenatedSkippableAndEmptyFrames() throws {
        let dir = try makeTemporaryDirectory(self)
        let a = makeTestData(count: 200_000, seed: 1), b = Array(makeTestData(count: 50_000, seed: 2))
        let empty = try zstdCompress([], "-3", in: dir)
        let streamedEmpty = try zstdCompress([], "-3", streamed: true, in: dir)
        let zst =
            try zstdSkippableFrame([1, 2, 3], nibble: 5) + zstdCompress(a, "-19", in: dir) + empty
            + zstdSkippableFrame([]) + zstdCompress(b, "--no-check -1", streamed: true, in: dir) + streamedEmpty
            + zstdSkippableFrame(Array(repeating: 9, count: 70_000), nibble: 15)
        for chunk in [1, 999, 1 << 20] {
            XCTAssertTrue(try Self.decode(zst, chunk: chunk) == a + b, "chunk \(chunk)")
        }
        // Only skippable frames: nothing out, no error (as zstd -d).
        XCTAssertEqual(try Self.decode(zstdSkippableFrame([4, 5])), [])
    }

    func testRefusals() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 300_000, seed: 4)
        let zst = try zstdCompress(plain, "-9", in: dir)
        expectCorrupt([], "no zstd data")
        expectCorrupt([0x1f, 0x8b, 8, 0, 0], "not zstd data (it starts with 1f 8b 08 00)")
        expectCorrupt(zst + [0], "trailing garbage")
        expectCorrupt(zst + Array(zst.prefix(10)), "ends inside")
        // A window over the limit is not damage: DecoderLimitTests.
        // A dictionary ID: refused as such.
        expectCorrupt([0x28, 0xb5, 0x2f, 0xfd, 0x01, 0x58, 0x2a, 0x01, 0x00, 0x00], "needs dictionary 42")
        // Bad checksum, bad content size.
        var badSum = zst
        badSum[badSum.count - 1] ^= 0x40
        expectCorrupt(badSum, "checksum mismatch")
        let withSize = try zstdCompress(Array(plain.prefix(1000)), "-1", in: dir)
        var badSize = withSize
        XCTAssertEqual(badSize[4] >> 6, 1, "2-byte content size expected")
        badSize[6] &+= 1
        expectCorrupt(badSize, "its header says")
        // A table description that does not add up: an FSE header in a compressed literals block.
        let reservedBlock: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x07, 0x00, 0x00]
        expectCorrupt(reservedBlock, "reserved")
    }

    /// A window the raised limit allows but the system cannot give (2 TiB, `memlimit=4TiB`):
    /// a typed error (exit 6), not the abort of a failed allocation (review 3: SIGABRT from a
    /// 10-byte input). Where the system does grant it lazily, the byte still decodes.
    func testWindowTheSystemRefusesIsATypedError() throws {
        let frame: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xf8, 0x09, 0x00, 0x00, 0x41]
        do {
            let output = try Self.decode(frame, windowLimit: 1 << 42)
            XCTAssertEqual(output, [0x41])
        } catch let error as SluiceError {
            XCTAssertEqual(error.exitCode, 6, "\(error)")
            XCTAssertTrue(error.description.contains("2 TiB zstd window"), error.description)
        }
    }

    /// Every prefix of a small frame is refused, never accepted as complete.
    func testEveryTruncationIsRefused() throws {
        let dir = try makeTemporaryDirectory(self)
        let zst = try zstdCompress(makeTestData(count: 20_000, seed: 8), "-19", in: dir)
        for length in stride(from: 0, to: zst.count, by: Thoroughness.full ? 1 : 7) {
            XCTAssertThrowsError(try Self.decode(Array(zst.prefix(length)), chunk: 777), "prefix \(length)") { error in
                guard case SluiceError.corruptData? = error as? SluiceError else { return XCTFail("\(error)") }
            }
        }
    }

    /// Mutants of small checksummed inputs: each either decodes to the original (the
    /// mutation was harmless) or throws corruptData — never a trap, a hang or wrong output.
    func testFuzzedInputsFailCleanly() throws {
        let dir = try makeTemporaryDirectory(self)
        var rng = SeededRandom(seed: 2026)
        var inputs: [([UInt8], [UInt8])] = []
        for (i, level) in ["-1", "-6", "-19", "--ultra -22", "-3"].enumerated() {
            let plain = makeTestData(count: 3000 + 4000 * i, seed: UInt64(i))
            inputs.append((try zstdCompress(plain, level, in: dir), plain))
        }
        let repetitive = Array(String(repeating: "abcabcabd", count: 900).utf8) + makeTestData(count: 2000, seed: 77)
        inputs.append((try zstdCompress(repetitive, "-12", in: dir), repetitive))
        var mutants = 0, refused = 0
        for round in 0..<Thoroughness.scaled(2400) {
            let (zst, plain) = inputs[round % inputs.count]
            var mutant = zst
            switch round % 4 {
            case 0, 1:
                for _ in 0..<Int.random(in: 1...3, using: &rng) {
                    let at = Int.random(in: 0..<mutant.count, using: &rng)
                    mutant[at] ^= UInt8.random(in: 1...255, using: &rng)
                }
            case 2:
                let at = Int.random(in: 4..<mutant.count, using: &rng)
                mutant[at] = [0, 0xff, 0x80, 0x7f][Int.random(in: 0...3, using: &rng)]
            default:
                let at = Int.random(in: 0..<mutant.count, using: &rng)
                mutant.removeSubrange(at..<min(mutant.count, at + Int.random(in: 1...40, using: &rng)))
            }
            mutants += 1
            do {
                let output = try Self.decode(mutant, chunk: Int.random(in: 1...5000, using: &rng))
                XCTAssertTrue(output == plain, "mutant \(round) decoded to different output without an error")
            } catch let error as SluiceError {
                guard case .corruptData(let format, _, _) = error, format == "zstd" else { return XCTFail("\(error)") }
                refused += 1
            }
        }
        XCTAssertGreaterThanOrEqual(mutants, Thoroughness.scaled(2000))
        XCTAssertGreaterThan(refused, mutants / 2)
    }

    func testChecksumMatchesReference() throws {
        // XXH64 of "" and of "abc" with seed 0, as published with the algorithm.
        XCTAssertEqual(xxh64([]), 0xEF46DB3751D8E999)
        XCTAssertEqual(xxh64(Array("abc".utf8)), 0x44BC2CF5AD770999)
        // Streaming in odd pieces agrees with one call.
        let data = makeTestData(count: 10_000, seed: 6)
        var whole = ZstdChecksum(), parts = ZstdChecksum()
        data.withUnsafeBytes { whole.update($0) }
        var i = 0
        while i < data.count {
            let end = min(data.count, i + 1 + i % 45)
            data[i..<end].withUnsafeBytes { parts.update($0) }
            i = end
        }
        XCTAssertEqual(whole.low32, parts.low32)

        // Hashing while copying agrees too, and copies every byte, from any partial stripe.
        var copying = ZstdChecksum()
        var copy = [UInt8](repeating: 0, count: data.count)
        i = 0
        while i < data.count {
            let end = min(data.count, i + 1 + (i * 7) % 97)
            copy.withUnsafeMutableBytes { out in
                data[i..<end].withUnsafeBytes { copying.update($0, copyingTo: out.baseAddress! + i) }
            }
            i = end
        }
        XCTAssertEqual(copying.digest, whole.digest)
        XCTAssertEqual(copy, data)
    }

    /// Into a sink that lends its buffers (as a relay does), the output is hashed while it is
    /// copied into them: the same bytes come out, and a wrong checksum is still refused.
    func testOutputIntoLentBuffers() throws {
        let dir = try makeTemporaryDirectory(self)
        for (name, plain) in Self.samples() {
            let zst = try zstdCompress(plain, "-19", in: dir)
            for planAhead in [false, true] {
                let sink = LendingSink(room: 20_000)
                let decoder = try ZstdDecoder(next: sink, planAhead: planAhead)
                try write(zst, to: decoder, chunk: 7000)
                try decoder.finish()
                XCTAssertTrue(sink.bytes == plain, "\(name) planAhead \(planAhead)")
                XCTAssertGreaterThan(sink.lent, 0)
            }
            var damaged = zst
            damaged[damaged.count - 1] ^= 0x40  // the stored checksum's last byte
            let decoder = try ZstdDecoder(next: LendingSink(room: 20_000))
            XCTAssertThrowsError(try write(damaged, to: decoder, chunk: 7000), name) { error in
                guard case SluiceError.corruptData(_, _, let reason)? = error as? SluiceError else { return XCTFail("\(error)") }
                XCTAssertTrue(reason.contains("checksum mismatch"), reason)
            }
        }
    }

    private func xxh64(_ bytes: [UInt8]) -> UInt64 {
        var sum = ZstdChecksum()
        bytes.withUnsafeBytes { sum.update($0) }
        return sum.digest
    }

    private func expectCorrupt(
        _ zst: [UInt8], _ words: String, windowLimit: UInt64 = 128 << 20,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertThrowsError(try Self.decode(zst, windowLimit: windowLimit), file: file, line: line) { error in
            guard case SluiceError.corruptData(let format, _, let reason)? = error as? SluiceError, format == "zstd" else {
                return XCTFail("unexpected \(error)", file: file, line: line)
            }
            XCTAssertTrue(reason.contains(words), "\(reason) — expected “\(words)”", file: file, line: line)
        }
    }
}

/// Collects what it is given and lends buffers of `room` bytes, as a relay does.
private final class LendingSink: BufferLendingSink {
    private(set) var bytes: [UInt8] = []
    private(set) var lent = 0
    private let buffer: UnsafeMutableRawBufferPointer

    init(room: Int) { buffer = .allocate(byteCount: room, alignment: 64) }
    deinit { buffer.deallocate() }

    func borrowBuffer() throws -> UnsafeMutableRawBufferPointer {
        lent += 1
        return buffer
    }

    func commitBorrowed(_ count: Int) { bytes.append(contentsOf: buffer.prefix(count)) }
    func write(_ bytes: UnsafeRawBufferPointer) throws { self.bytes.append(contentsOf: bytes) }
    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}

/// Messages count with `Counted`: "1 byte", never "1 bytes".
final class CountedTextTests: XCTestCase {
    func testOneIsSingularEverythingElsePlural() {
        XCTAssertEqual(Counted.bytes(0), "0 bytes")
        XCTAssertEqual(Counted.bytes(1), "1 byte")
        XCTAssertEqual(Counted.bytes(UInt64(2)), "2 bytes")
        XCTAssertEqual(Counted.text(1, "connection"), "1 connection")
        XCTAssertEqual(Counted.text(3, "retry", plural: "retries"), "3 retries")
        XCTAssertEqual(ByteSize.text(1), "1 byte")
        XCTAssertEqual(ByteSize.text(1 << 20), "1 MiB")
    }

    /// unzstd's end-of-stream messages, with one stray byte.
    func testUnzstdSaysOneByte() throws {
        let dir = try makeTemporaryDirectory(self)
        let zst = try zstdCompress(makeTestData(count: 1000, seed: 5), "-3", in: dir)
        for (input, expected) in [
            (zst + [0], "1 byte of trailing garbage after frame 1"),
            (zst + [0, 0], "2 bytes of trailing garbage after frame 1"),
            ([0x28], "only 1 byte, too short for a zstd frame"),
        ] {
            XCTAssertThrowsError(try ZstdDecoderTests.decode(input)) { error in
                guard case SluiceError.corruptData("zstd", _, let reason)? = error as? SluiceError else {
                    return XCTFail("unexpected \(error)")
                }
                XCTAssertTrue(reason.contains(expected), "\(reason) — expected “\(expected)”")
            }
        }
    }
}
