import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The next head starts on the stage's thread while a worker still decodes the block before
/// it (`XzEarlyHead`). The worker is made to finish only once the stage's thread waits for
/// it, so the stage always runs out of early work first: no timing decides what is tested.
final class XzEarlyHeadTests: XCTestCase {
    /// Words and noise in turns: LZMA chunks of every kind, blocks of several chunks.
    private static func plain(count: Int, seed: UInt64) -> [UInt8] {
        let words = makeTestData(count: count, seed: seed)
        var random = SeededRandom(seed: seed)
        var out = [UInt8]()
        for start in stride(from: 0, to: count, by: 65536) {
            out += words[start..<min(count, start + 32768)]
            out += (0..<min(32768, max(0, count - start - 32768))).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        }
        return out
    }

    private func input(_ dir: String) throws -> (xz: [UInt8], plain: [UInt8]) {
        let plain = Self.plain(count: 4_000_000, seed: 71)
        return (try XzParallelTests.multiBlock(plain, "-0 --block-size=800000", dir: dir), plain)
    }

    func testTheNextHeadStartsWhileTheWorkerDecodes() throws {
        let dir = try makeTemporaryDirectory(self)
        let (xz, plain) = try input(dir)
        for chunk in [4096, 1 << 20] {
            let sink = MemorySink()
            let decoder = try XzDecoder(next: sink, decoders: 2)
            decoder.finishOnlyWhenAwaitedForTests = true
            try write(xz, to: decoder, chunk: chunk)
            try decoder.finish()
            XCTAssertTrue(sink.bytes == plain, "\(chunk)-byte writes")
            // Five blocks: heads 1, 3, 5; blocks 3 and 5 start while the worker has 2 and 4.
            XCTAssertEqual(decoder.headsStartedEarly, 2, "\(chunk)-byte writes")
            XCTAssertGreaterThan(decoder.outputDecodedEarly, 100_000, "\(chunk)-byte writes")
            XCTAssertEqual(decoder.blocksDecodedAhead, 2, "\(chunk)-byte writes")
        }
    }

    /// A cut while the next head has started early records it as the block being gathered
    /// (its output held back is not counted); the restored run's output joined to the first
    /// is the original.
    func testACutWhileAHeadStartedEarlyResumesExactly() throws {
        let dir = try makeTemporaryDirectory(self)
        let (xz, plain) = try input(dir)
        var cuts = 0
        var offset = 0
        while offset < xz.count {
            let first = MemorySink()
            let decoder = try XzDecoder(next: first, decoders: 2)
            decoder.finishOnlyWhenAwaitedForTests = true
            // Feed up to the next moment a head decodes early, past `offset`.
            var cut = 0
            var found = false
            while cut < xz.count {
                let end = min(xz.count, cut + 8192)
                try write(Array(xz[cut..<end]), to: decoder, chunk: 8192)
                cut = end
                if cut > offset && decoder.startingAHeadEarly && decoder.outputDecodedEarly > 0 {
                    found = true
                    break
                }
            }
            guard found else { break }
            let state = try XCTUnwrap(try roundTripped(try takeCut(decoder, offset: cut, spec: "read x | unxz | file y")).stages.first?.as(XzState.self))
            XCTAssertNil(state.head, "cut at \(cut)")
            XCTAssertNotNil(state.gathering, "cut at \(cut)")
            XCTAssertEqual(state.outputOffset, UInt64(first.bytes.count), "cut at \(cut)")
            let second = MemorySink()
            let restored = try XzDecoder(next: second, decoders: 2, restoring: state)
            try write(Array(xz[cut...]), to: restored, chunk: 65536)
            try restored.finish()
            XCTAssertTrue(first.bytes + second.bytes == plain, "cut at \(cut)")
            cuts += 1
            // The next early head: past this block.
            offset = cut + 400_000
        }
        XCTAssertGreaterThanOrEqual(cuts, 2)
    }

    /// Damage in a head started early is reported after the block before it, whose own
    /// failure (a worker's) goes first; alone, it is reported at its offset with nothing of
    /// it handed on.
    func testDamageInAnEarlyHeadComesAfterTheBlockBefore() throws {
        let dir = try makeTemporaryDirectory(self)
        let (xz, plain) = try input(dir)
        let blocks = try XzParallelTests.blockOffsets(xz, dir: dir)
        XCTAssertEqual(blocks.count, 5)
        // The first byte of a block's first LZMA chunk must be zero (the range coder's start):
        // after the block header and the chunk's 6-byte header.
        func breakFirstChunk(_ bytes: inout [UInt8], block n: Int) {
            let start = Int(blocks[n].compressed)
            bytes[start + (Int(bytes[start]) + 1) * 4 + 6] = 0x80
        }
        // Block 3 (the early head) damaged in its first chunk; block 2 (the worker's) as well, or not.
        for damageBlock2 in [true, false] {
            var bad = xz
            breakFirstChunk(&bad, block: 2)
            if damageBlock2 { breakFirstChunk(&bad, block: 1) }
            let sink = MemorySink()
            let decoder = try XzDecoder(next: sink, decoders: 2)
            decoder.finishOnlyWhenAwaitedForTests = true
            let failure = failureWriting(bad, to: decoder, chunk: 4096)
            guard case SluiceError.corruptData("xz", let offset, _)? = failure else { return XCTFail("\(String(describing: failure))") }
            let at = damageBlock2 ? 1 : 2
            XCTAssertGreaterThanOrEqual(offset, blocks[at].compressed, "damage in block 2: \(damageBlock2)")
            XCTAssertLessThan(offset, blocks[at + 1].compressed, "damage in block 2: \(damageBlock2)")
            XCTAssertLessThanOrEqual(UInt64(sink.bytes.count), blocks[at].uncompressed)
            XCTAssertTrue(plain.starts(with: sink.bytes))
            XCTAssertEqual(decoder.workersRunning, 0)
        }
    }
}
