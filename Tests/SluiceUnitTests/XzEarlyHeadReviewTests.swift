import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Review of the early head (`XzEarlyHead`): cases its own tests do not reach.
final class XzEarlyHeadReviewTests: XCTestCase {
    /// With three or more decoders a block may become the next head while the queue holds
    /// fewer blocks than there are workers — then it was started early even with a filter,
    /// whose output is not the window's last bytes: the LZMA output was handed on unfiltered
    /// (the check, taken over the filtered bytes, passed: exit 0 with wrong output).
    /// Deterministically reached through a restore: no head, one queued block, the next
    /// block's header to come.
    func testAFilteredBlockIsNotStartedEarly() throws {
        let dir = try makeTemporaryDirectory(self)
        // Block 3 is half noise, so that its first chunks come in before a quarter of it.
        var random = SeededRandom(seed: 83)
        var plain = makeTestData(count: 2_000_300, seed: 83)
        while plain.count < 3_000_300 {
            plain += makeTestData(count: min(32768, 3_000_300 - plain.count), seed: UInt64(plain.count))
            plain += (0..<min(32768, 3_000_300 - plain.count)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        }
        XCTAssertEqual(plain.count, 3_000_300)
        let xz = try XzTool.compress(
            plain, options: "-T2 --block-size=8MiB --block-list=300,2000000,1000000 --delta=dist=2 --lzma2=preset=0,dict=8MiB", dir: dir)
        let blocks = try XzParallelTests.blockOffsets(xz, dir: dir)
        XCTAssertEqual(blocks.count, 3)
        // Two decoders: block 1 (tiny) is the head and ends while block 2, a worker's, comes in.
        let first = MemorySink()
        let decoder = try XzDecoder(next: first, decoders: 2)
        decoder.finishOnlyWhenAwaitedForTests = true
        let cut = Int(blocks[2].compressed)
        try write(Array(xz[..<cut]), to: decoder, chunk: 65536)
        let state = try XCTUnwrap(try roundTripped(try takeCut(decoder, offset: cut, spec: "read x | unxz | file y")).stages.first?.as(XzState.self))
        XCTAssertNil(state.head)
        XCTAssertEqual(state.queued?.count, 1)
        // Three decoders: one queued block is fewer than the two workers.
        let second = MemorySink()
        let restored = try XzDecoder(next: second, decoders: 3, restoring: state)
        restored.finishOnlyWhenAwaitedForTests = true
        try write(Array(xz[cut...]), to: restored, chunk: 65536)
        try restored.finish()
        XCTAssertEqual(restored.headsStartedEarly, 0)
        XCTAssertTrue(first.bytes + second.bytes == plain)
    }
}
