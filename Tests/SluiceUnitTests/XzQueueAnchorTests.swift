import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A saved unxz state whose queue of sized blocks lost its oldest entries (an edit of a
/// checkpoint re-sealed with the user's key, or a bug that drops one) still chains up to
/// where the input stands; nothing but the output handed on anchors where the queue must
/// begin. Such a state must be refused, never resumed into output missing a block.
final class XzQueueAnchorTests: XCTestCase {
    func testDroppingTheOldestQueuedBlockIsRefused() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 240_000, seed: 61)
        let xz = try XzParallelTests.multiBlock(plain, "-0 --block-size=20000 --check=crc32", dir: dir)
        var tried = 0
        var cut = 2_000
        while cut < xz.count * 9 / 10 {
            defer { cut += 997 }
            let first = MemorySink()
            let decoder = try XzDecoder(next: first, decoders: 2)
            try decoder.write(Array(xz[..<cut]))
            var state = decoder.snapshot()
            // Drop the oldest block still queued: the rest, and the one being gathered,
            // still follow each other up to the input's position.
            // Every other time the anchor goes too, as a hand edit removing the queue would.
            guard let queued = state.queued else { continue }
            state.queued = queued.count > 1 ? Array(queued.dropFirst()) : nil
            if tried % 2 == 1 { state.streamOutput = nil }
            tried += 1
            do {
                let second = MemorySink()
                let restored = try XzDecoder(next: second, decoders: 2, restoring: state)
                try restored.write(Array(xz[cut...]))
                try restored.finish()
                XCTFail(
                    "cut at \(cut): a queue without its oldest block was resumed (\(first.bytes.count + second.bytes.count) bytes, \(plain.count) expected)")
            } catch is StateRejected {
            } catch SluiceError.corruptData {
                XCTFail("cut at \(cut): the edit was found only at the index, not on restore")
            }
        }
        XCTAssertGreaterThan(tried, 10, "cuts with a block queued")
    }
}
