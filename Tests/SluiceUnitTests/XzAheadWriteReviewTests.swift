import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice
@testable import SluiceTestSupport

/// A reviewer's attacks on unxz writing ahead into the file: the CRC-64 combination at
/// lengths no test can write out, more decoders than the machine's cores, and a partial
/// file changed where workers wrote ahead before a resume.
final class XzAheadWriteReviewTests: XCTestCase {
    private static func combined(_ a: UInt64, _ b: UInt64, _ count: UInt64) -> UInt64 {
        var c = OutputChecksum(a)
        c.append(crc64: b, count: count)
        return c.value
    }

    /// crc(A B C) both ways round, and shifting by n + m as by n then m, for lengths up to
    /// 2^64 − 1 (every bit of the length is a squaring step): only the algebra can say.
    func testCRC64CombinationHoldsForZeroAndHugeLengths() {
        var random = SeededRandom(seed: 301)
        XCTAssertEqual(Self.combined(0x1234_5678_9ABC_DEF0, 0, 0), 0x1234_5678_9ABC_DEF0, "nothing appended")
        XCTAssertEqual(Self.combined(0, 0, UInt64.max), 0, "zero register shifted stays zero")
        for n in 0..<200 {
            let a = random.next(), b = random.next(), c = random.next()
            let nb = n % 3 == 0 ? random.next() >> 1 : random.next() % 1_000_000
            let nc = n % 4 == 0 ? (UInt64.max >> 1) - random.next() % 1000 : random.next() % 1_000_000
            XCTAssertEqual(
                Self.combined(Self.combined(a, b, nb), c, nc), Self.combined(a, Self.combined(b, c, nc), nb + nc), "lengths \(nb), \(nc)")
            XCTAssertEqual(Self.combined(Self.combined(a, 0, nb), 0, nc), Self.combined(a, 0, nb + nc), "shift \(nb) + \(nc)")
        }
        // A real concatenation with a one-byte and an empty second part.
        let data = makeTestData(count: 1000, seed: 302)
        for split in [0, 1, 999, 1000] {
            var c = XzAheadWriteTests.checksum(data[..<split])
            c.append(crc64: XzAheadWriteTests.checksum(data[split...]).value, count: UInt64(data.count - split))
            XCTAssertEqual(c, XzAheadWriteTests.checksum(data[...]), "split at \(split)")
        }
    }

    /// Four and six decoders (the CLI caps at the machine's cores, four at most): several
    /// blocks written ahead at once into one file, each at its place, with cuts and restores.
    func testManyDecodersWriteAheadAtTheirPlacesAndResumeExactly() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 2_400_000, seed: 303)
        let xz = try XzParallelTests.multiBlock(plain, "-0 --block-size=99991 --check=crc64", dir: dir)
        var random = SeededRandom(seed: 304)
        for decoders in [4, 6] {
            for n in 0..<Thoroughness.scaled(6) {
                let out = dir + "/out-\(decoders)-\(n)"
                let control = RunControl(progress: ProgressReporter(handler: nil))
                let cut = n == 0 ? xz.count : Int(random.next() % UInt64(xz.count))
                var states: (XzState, FileSinkState)?
                var aheadBeforeCut = 0
                do {
                    // A cut seals on the sink's thread behind a relay: the cut runs go without one.
                    let file = try FileSink(path: out)
                    let relay = cut == xz.count ? try Relay(next: file, control: control, name: "t", bufferCount: 2, bufferSize: 4096) : nil
                    let decoder = try XzDecoder(next: relay ?? file, decoders: decoders)
                    try write(Array(xz[..<cut]), to: decoder, chunk: 1 + Int(random.next() % 200_000))
                    aheadBeforeCut = decoder.blocksWrittenAhead
                    if cut == xz.count {
                        try decoder.finish()
                        XCTAssertGreaterThan(decoder.blocksWrittenAhead, 5, "\(decoders) decoders")
                    } else {
                        let checkpoint = try roundTripped(try takeCut(decoder, offset: cut, spec: "read x | unxz | file y"))
                        states = (
                            try XCTUnwrap(checkpoint.stages.first?.as(XzState.self)), try XCTUnwrap(checkpoint.stages.last?.as(FileSinkState.self))
                        )
                        // More input after the cut: workers write past the prefix.
                        try write(Array(xz[cut..<min(xz.count, cut + 300_000)]), to: decoder, chunk: 65_536)
                    }
                }
                if let (xzState, fileState) = states {
                    let decoder = try XzDecoder(next: try FileSink(path: out, restoring: fileState), decoders: decoders, restoring: xzState)
                    try write(Array(xz[cut...]), to: decoder, chunk: 65_536)
                    try decoder.finish()
                    XCTAssertEqual(decoder.workersRunning, 0)
                }
                let output = try [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))
                XCTAssertTrue(output == plain, "\(decoders) decoders, cut at \(cut) (\(aheadBeforeCut) ahead before it)")
            }
        }
    }

    /// Bytes a worker wrote ahead become part of the checkpoint's prefix once announced: a
    /// byte changed there before a resume is found (the partial is not trusted), one changed
    /// past the prefix is cut off and the resume is exact.
    func testAPartialChangedWhereBlocksWereWrittenAheadIsFoundOnResume() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 1_600_000, seed: 305)
        let xz = try XzParallelTests.multiBlock(plain, "-0 --block-size=200003", dir: dir)
        let out = dir + "/out"
        let decoder = try XzDecoder(next: try FileSink(path: out), decoders: 2)
        let cut = xz.count * 3 / 4
        try write(Array(xz[..<cut]), to: decoder, chunk: 65_536)
        XCTAssertGreaterThan(decoder.blocksWrittenAhead, 0)
        let checkpoint = try roundTripped(try takeCut(decoder, offset: cut, spec: "read x | unxz | file y"))
        let xzState = try XCTUnwrap(checkpoint.stages.first?.as(XzState.self))
        let fileState = try XCTUnwrap(checkpoint.stages.last?.as(FileSinkState.self))
        let partial = FileSink.partialPath(for: out)
        let original = try [UInt8](Data(contentsOf: URL(fileURLWithPath: partial)))
        XCTAssertGreaterThan(fileState.bytesWritten, 400_006)

        // Inside the prefix, in the second block (a worker's).
        var changed = original
        changed[300_000] ^= 0x40
        try Data(changed).write(to: URL(fileURLWithPath: partial))
        XCTAssertThrowsError(try FileSink(path: out, restoring: fileState)) { error in
            XCTAssertEqual(error as? FileSinkError, .partialChanged(path: partial, bytes: fileState.bytesWritten))
        }

        // Past it: cut off.
        changed = original + [1, 2, 3]
        changed[Int(fileState.bytesWritten)] ^= 0x01
        try Data(changed).write(to: URL(fileURLWithPath: partial))
        let restored = try XzDecoder(next: try FileSink(path: out, restoring: fileState), decoders: 2, restoring: xzState)
        try write(Array(xz[cut...]), to: restored, chunk: 65_536)
        try restored.finish()
        XCTAssertTrue(try [UInt8](Data(contentsOf: URL(fileURLWithPath: out))) == plain)
    }

    /// A worker writing ahead gives back the pages of its block more than a dictionary behind
    /// the decoder: data whose every match reaches back almost the whole dictionary (a random
    /// run of a dictionary less 1000 bytes, repeated) across many 1 MiB pieces must still
    /// decode exactly — a page given back too early reads as zeros (a check mismatch at best).
    func testMatchesReachingBackNearlyTheWholeDictionaryDecodeExactlyAhead() throws {
        let dir = try makeTemporaryDirectory(self)
        let dictionary = 256 << 10
        let run = makeTestData(count: dictionary - 1000, seed: 306).map { $0 ^ 0x5A }
        var plain: [UInt8] = []
        while plain.count < 13_000_000 { plain += run }
        for check in ["crc64", "none"] {
            let xz = try XzParallelTests.multiBlock(plain, "--lzma2=preset=0,dict=256KiB --block-size=3000000 --check=\(check)", dir: dir)
            let out = dir + "/out-\(check)"
            let decoder = try XzDecoder(next: try FileSink(path: out), decoders: 2)
            try write(xz, to: decoder, chunk: 65_536)
            try decoder.finish()
            XCTAssertGreaterThan(decoder.blocksWrittenAhead, 0, check)
            XCTAssertTrue(try [UInt8](Data(contentsOf: URL(fileURLWithPath: out))) == plain, check)
        }
    }
}
