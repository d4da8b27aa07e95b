import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A saved unxz state whose sized blocks lost their oldest entries (an edit of a checkpoint
/// re-sealed with the user's key, or a bug that drops one) still chains up to where the
/// input stands; nothing but the output handed on anchors where the blocks must begin.
/// Such a state must be refused, never resumed into output missing a block.
final class XzQueueAnchorTests: XCTestCase {
    /// Cuts every `step` bytes through a file of 20 kB blocks; `drop` edits each state (false:
    /// nothing to drop at this cut), which must then be refused on restore — not resumed,
    /// and not found only later at the index. Returns how many cuts were tried.
    private func refusals(seed: UInt64, step: Int, drop: (inout XzState, Int) -> Bool) throws -> Int {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 600_000, seed: seed)
        let xz = try XzParallelTests.multiBlock(plain, "-0 --block-size=20000 --check=crc32", dir: dir)
        var tried = 0
        // Every `step` bytes, and where each block ends: a block decoded ahead is queued (not
        // being gathered) only until the next block's header, which waits for it to go on.
        let ends = try XzParallelTests.blockOffsets(xz, dir: dir).map { Int($0.compressed) }
        let cuts = Set(stride(from: 2_000, to: xz.count * 9 / 10, by: step)).union(ends.filter { $0 > 2_000 && $0 < xz.count * 9 / 10 }).sorted()
        for cut in cuts {
            let first = MemorySink()
            let decoder = try XzDecoder(next: first, decoders: 2)
            try decoder.write(Array(xz[..<cut]))
            var state = decoder.snapshot()
            guard drop(&state, tried) else { continue }
            tried += 1
            do {
                let second = MemorySink()
                let restored = try XzDecoder(next: second, decoders: 2, restoring: state)
                try restored.write(Array(xz[cut...]))
                try restored.finish()
                XCTFail("cut at \(cut): resumed without a block (\(first.bytes.count + second.bytes.count) bytes, \(plain.count) expected)")
            } catch is StateRejected {
            } catch SluiceError.corruptData {
                XCTFail("cut at \(cut): the edit was found only at the index, not on restore")
            }
        }
        return tried
    }

    func testDroppingTheOldestQueuedBlockIsRefused() throws {
        let tried = try refusals(seed: 61, step: 997) { state, tried in
            // Drop the oldest block still queued: the rest, and the one being gathered,
            // still follow each other up to the input's position.
            // Every other time the anchor goes too, as a hand edit removing the queue would.
            guard let queued = state.queued else { return false }
            state.queued = queued.count > 1 ? Array(queued.dropFirst()) : nil
            if tried % 2 == 1 { state.streamOutput = nil }
            return true
        }
        XCTAssertGreaterThan(tried, 10, "cuts with a block queued")
    }

    /// The same for the head block, the oldest of all (streaming on the stage's thread).
    func testDroppingTheHeadBlockIsRefused() throws {
        let tried = try refusals(seed: 62, step: 991) { state, _ in
            guard state.head != nil else { return false }
            state.head = nil
            return true
        }
        XCTAssertGreaterThan(tried, 10, "cuts with a head block")
    }
}
