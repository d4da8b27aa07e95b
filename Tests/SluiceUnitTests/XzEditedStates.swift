import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The edited-state loop of the unxz tests: cut `xz` at a random byte in its middle, edit
/// the saved state, restore it and decode the rest. A restore must be refused, or decode to
/// a corrupt-data error or the right output (when the edit left the output offset alone) —
/// never a crash, never wrong output accepted. Returns how often each happened.
struct XzEditedStates {
    let xz: [UInt8]
    let plain: [UInt8]
    /// Cuts fall in `from ..< from + span`.
    let from: Int
    let span: Int
    var decoders = 1

    func outcomes(
        rounds: Int, random: inout SeededRandom, usable: (XzState) -> Bool = { _ in true },
        edit: (inout XzState, Int, inout SeededRandom) -> Void
    ) throws -> [String: Int] {
        var outcomes = [String: Int]()
        var round = 0
        while round < rounds {
            let cut = from + Int(random.next() % UInt64(span))
            let first = MemorySink()
            let decoder = try XzDecoder(next: first, decoders: decoders)
            try decoder.write(Array(xz[..<cut]))
            var state = decoder.snapshot()
            guard usable(state) else { continue }
            edit(&state, round, &random)
            round += 1
            let outcome: String
            do {
                let second = MemorySink()
                let restored = try XzDecoder(next: second, decoders: decoders, restoring: state)
                try restored.write(Array(xz[cut...]))
                try restored.finish()
                XCTAssertTrue(
                    first.bytes + second.bytes == plain || state.outputOffset != UInt64(first.bytes.count),
                    "round \(round): wrong output accepted")
                outcome = "decoded"
            } catch is StateRejected {
                outcome = "refused"
            } catch SluiceError.corruptData {
                outcome = "corrupt"
            }
            outcomes[outcome, default: 0] += 1
        }
        return outcomes
    }
}
