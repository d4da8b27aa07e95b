import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Blocks that a worker decodes while they are still coming in (from their header on):
/// a block whose header lies about its sizes, and input cut short at any byte, give the
/// same corrupt-data error at the same offset whatever the number of decoding threads —
/// damage a worker already found is not lost when the input then ends.
final class XzBlockLiesTests: XCTestCase {
    /// The error (offset and reason) and the output handed on before it, or nil and the output.
    private static func outcome(_ xz: [UInt8], decoders: Int, chunk: Int) throws -> (error: (UInt64, String)?, output: [UInt8]) {
        let sink = MemorySink()
        do {
            let decoder = try XzDecoder(next: sink, decoders: decoders)
            try write(xz, to: decoder, chunk: chunk)
            try decoder.finish()
            return (nil, sink.bytes)
        } catch SluiceError.corruptData(format: "xz", let offset, let reason) {
            return ((offset, reason), sink.bytes)
        }
    }

    /// `xz` with block `k`'s header rewritten to declare its sizes plus the given amounts.
    static func lying(_ xz: [UInt8], block offset: Int, compressed: Int, uncompressed: Int) throws -> [UInt8] {
        var bytes = xz
        let size = (Int(bytes[offset]) + 1) * 4
        let flags = bytes[offset + 1]
        XCTAssertEqual(flags & 0xC0, 0xC0, "the block declares both sizes")
        var i = offset + 2
        func vli() -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let byte = bytes[i]
                i += 1
                value |= UInt64(byte & 0x7F) << shift
                shift += 7
                if byte & 0x80 == 0 { return value }
            }
        }
        func encode(_ value: UInt64) -> [UInt8] {
            var v = value
            var out: [UInt8] = []
            while v >= 0x80 {
                out.append(UInt8(v & 0x7F) | 0x80)
                v >>= 7
            }
            return out + [UInt8(v)]
        }
        let c = vli()
        let u = vli()
        let filtersStart = i
        for _ in 0..<(Int(flags & 3) + 1) {
            _ = vli()
            let propertiesSize = Int(vli())
            i += propertiesSize
        }
        let body = [flags] + encode(UInt64(Int(c) + compressed)) + encode(UInt64(Int(u) + uncompressed)) + Array(bytes[filtersStart..<i])
        let padded = (body.count + 1 + 3) / 4 * 4
        var header = [UInt8((padded + 4) / 4 - 1)] + body + [UInt8](repeating: 0, count: padded - 1 - body.count)
        let crc = header.withUnsafeBytes { xzCRC32($0) }
        header += [UInt8(crc & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 24)]
        bytes.replaceSubrange(offset..<(offset + size), with: header)
        return bytes
    }

    static func blockStarts(_ xz: [UInt8], dir: String) throws -> [Int] {
        let path = dir + "/list.xz"
        try Data(xz).write(to: URL(fileURLWithPath: path))
        let listing = try shell("xz --robot -lvv '\(path)'", capture: true)
        return listing.output.split(separator: "\n").filter { $0.hasPrefix("block\t") }.compactMap { line in
            let fields = line.split(separator: "\t")
            return fields.count > 4 ? Int(fields[4]) : nil
        }
    }

    /// Block 3 of 8 declares a million compressed bytes more than it has (still a size that
    /// qualifies for a worker): the worker that decodes it as it comes in finds its end too
    /// early, and that is the error — inside block 3 — not the end of the input, which the
    /// stage reaches while it still gathers the million bytes.
    func testLyingSizesAreReportedAtTheirBlock() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 160_000, seed: 71)
        let xz = try XzTool.compress(plain, options: "-T2 -0 --block-size=20000", dir: dir)
        let starts = try Self.blockStarts(xz, dir: dir)
        XCTAssertEqual(starts.count, 8)
        for (compressed, uncompressed) in [(1_000_000, 0), (4, 0), (-4, 0), (0, 1), (0, -1), (0, 3_000_000), (64, -5000)] {
            let bad = try Self.lying(xz, block: starts[2], compressed: compressed, uncompressed: uncompressed)
            let label = "block 3 declares \(compressed) compressed and \(uncompressed) uncompressed bytes more"
            let sequential = try Self.outcome(bad, decoders: 1, chunk: 4096)
            let expected = try XCTUnwrap(sequential.error, label)
            XCTAssertGreaterThanOrEqual(expected.0, UInt64(starts[2]), label)
            XCTAssertLessThan(expected.0, UInt64(starts[3]), label)
            for decoders in [2, 3] {
                for chunk in [1 << 20, 4096, 333] {
                    let parallel = try Self.outcome(bad, decoders: decoders, chunk: chunk)
                    let offset = try XCTUnwrap(parallel.error?.0, "\(label), \(decoders) threads: no error")
                    // Inside block 3 (which chunk of it is named differs by path and write size).
                    XCTAssertGreaterThanOrEqual(offset, UInt64(starts[2]), "\(label), \(decoders) threads, \(chunk)-byte writes: \(parallel.error?.1 ?? "")")
                    XCTAssertLessThan(offset, UInt64(starts[3]), "\(label), \(decoders) threads, \(chunk)-byte writes: \(parallel.error?.1 ?? "")")
                    XCTAssertTrue(plain.starts(with: parallel.output), label)
                    // Nothing of block 4 on (block 3 itself may stream before its end is checked).
                    XCTAssertLessThanOrEqual(parallel.output.count, 60_000, label)
                }
            }
        }
    }

    /// The input cut at every byte of a multi-block file (in a block header, inside a block a
    /// worker decodes as it arrives, in its check, in the index, in the footer): the error
    /// is the end of the input at the cut, as with one thread, and what went on is a prefix.
    func testTruncationAtEveryByte() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 12_000, seed: 72)
        let xz = try XzTool.compress(plain, options: "-T2 -0 --block-size=1500 --check=crc64", dir: dir)
        var random = SeededRandom(seed: 73)
        let step = Thoroughness.full ? 1 : 7
        for cut in stride(from: 0, to: xz.count, by: step) {
            let decoders = 2 + Int(random.next() % 2)
            let chunk = 1 + Int(random.next() % 2000)
            let result = try Self.outcome(Array(xz[..<cut]), decoders: decoders, chunk: chunk)
            XCTAssertEqual(result.error?.0, UInt64(cut), "cut at \(cut), \(decoders) threads: \(result.error?.1 ?? "no error")")
            XCTAssertTrue(plain.starts(with: result.output), "cut at \(cut)")
        }
    }

    /// Bit flips in a multi-block file: whatever the threads, an error inside the same block
    /// as one thread finds it (or the same output), and never more output than it.
    func testFlipsFailInTheSameBlockAsWithOneThread() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 30_000, seed: 74)
        let xz = try XzTool.compress(plain, options: "-T2 -0 --block-size=4000 --check=crc32", dir: dir)
        let starts = try Self.blockStarts(xz, dir: dir) + [xz.count]
        func block(_ offset: UInt64?) -> Int? { offset.map { o in starts.lastIndex { UInt64($0) <= o } ?? -1 } }
        var random = SeededRandom(seed: 75)
        for _ in 0..<Thoroughness.scaled(300) {
            var bad = xz
            let at = Int(random.next() % UInt64(bad.count))
            bad[at] ^= UInt8(1 << (random.next() % 8))
            let sequential = try Self.outcome(bad, decoders: 1, chunk: 4096)
            let parallel = try Self.outcome(bad, decoders: 2 + Int(random.next() % 2), chunk: 1 + Int(random.next() % 9000))
            XCTAssertEqual(block(parallel.error?.0), block(sequential.error?.0), "flip at \(at): \(parallel.error?.1 ?? "-") vs \(sequential.error?.1 ?? "-")")
            XCTAssertTrue(sequential.output.starts(with: parallel.output), "flip at \(at)")
        }
    }

    /// A checkpoint whose queue was edited to hold more decoded blocks than memlimit allows
    /// (8 blocks of 1 MiB under a 2 MiB memlimit; a real one queues at most threads − 1 blocks
    /// that fit together) is refused: the workers would hold every block's output at once.
    func testRestoredQueueIsBoundedByMemlimit() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = [UInt8](repeating: 0x61, count: 9 << 20)
        let xz = try XzTool.compress(plain, options: "-T2 -0 --block-size=1MiB", dir: dir)
        let starts = try Self.blockStarts(xz, dir: dir)
        XCTAssertEqual(starts.count, 9)
        // A state taken with one thread after eight blocks, its output then "not yet handed on".
        let reader = try XzDecoder(next: MemorySink(), memoryLimit: 2 << 20, decoders: 1)
        try write(Array(xz[..<starts[8]]), to: reader, chunk: 1 << 20)
        let after8 = reader.snapshot()
        func queuing(_ first: Int) -> XzState {
            var state = after8
            state.queued = (first..<8).map { XzRawBlock(offset: UInt64(starts[$0]), bytes: Data(xz[starts[$0]..<starts[$0 + 1]])) }
            state.streamOutput = UInt64(first << 20)
            state.outputOffset = UInt64(first << 20)
            return state
        }
        // One queued block fits: restored, and decodes to the rest.
        let sink = MemorySink()
        let one = try XzDecoder(next: sink, memoryLimit: 2 << 20, decoders: 2, restoring: queuing(7))
        try write(Array(xz[starts[8]...]), to: one, chunk: 1 << 20)
        try one.finish()
        XCTAssertEqual(sink.bytes.count, 2 << 20)
        // Eight do not.
        XCTAssertThrowsError(try XzDecoder(next: MemorySink(), memoryLimit: 2 << 20, decoders: 2, restoring: queuing(0))) { error in
            XCTAssertTrue(error is StateRejected, "\(error)")
        }
    }
}
