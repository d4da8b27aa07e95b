import CIsal
import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Issue 8, item 16: a damaged or hand-edited checkpoint never crashes. Mutated gzip
/// states of both engines are restored and the stream continued: each must be refused
/// (an error) or give exactly the right output — never a signal.
final class CheckpointFuzzTests: XCTestCase {
    private static let spec = "read x | verify | gunzip | verify | stdout"

    func testMutatedGzipStatesAreRefusedOrResumeCorrectly() throws {
        var rng = SeededRandom(seed: 2026)
        // Small inputs keep a thousand restores fast; they still cross block, member,
        // header and trailer boundaries.
        let text = makeTestData(count: 60_000, seed: 4)
        let corpus: [(String, [UInt8], [UInt8])] = [
            ("one member", GzipMember(data: text).encoded(), text),
            (
                "members with header fields",
                GzipMember(data: Array(text.prefix(9_000)), name: "n", headerCRC: true).encoded()
                    + GzipMember(data: Array(text.suffix(20_000)), level: 1).encoded(), Array(text.prefix(9_000)) + Array(text.suffix(20_000))
            ),
        ]
        var tried = 0, refused = 0, correct = 0
        for (name, gzip, plain) in corpus {
            let inDigest = sha256(gzip), outDigest = sha256(plain)
            for engine in InflateEngineKind.allCases {
                for _ in 0..<8 {
                    let cutAt = Int.random(in: 1..<gzip.count, using: &rng)
                    let first = try StageRestoreTests.Chain(sourceDigest: inDigest, outputDigest: outDigest, engine: engine)
                    try gzip[0..<cutAt].withUnsafeBytes { try first.head.write($0) }
                    let pristine = try roundTripped(takeCut(first.head, offset: cutAt, spec: Self.spec))
                    for _ in 0..<Thoroughness.scaled(35) {
                        var checkpoint = pristine
                        let what = CheckpointMutator.mutate(&checkpoint, rng: &rng)
                        tried += 1
                        do {
                            let chain = try StageRestoreTests.Chain(
                                sourceDigest: inDigest, outputDigest: outDigest, engine: engine,
                                checkpoint: checkpoint, previousOutput: first.sink.bytes)
                            try gzip[cutAt...].withUnsafeBytes { try chain.head.write($0) }
                            try chain.head.finish()
                            XCTAssertTrue(chain.sink.bytes == plain, "\(name), \(engine), \(what): wrong output without an error")
                            correct += 1
                        } catch is SluiceError, is StateRejected {
                            refused += 1
                        }
                    }
                }
            }
        }
        XCTAssertGreaterThanOrEqual(tried, Thoroughness.scaled(1000))
        XCTAssertGreaterThan(refused, tried / 4, "most mutants are refused")
        XCTAssertGreaterThan(correct, 0, "some mutants (e.g. a field that is not used) still resume")
    }

    /// The cases the issue names, one by one.
    func testNamedHostileFieldsAreRefused() throws {
        let (_, gzip, plain) = StageRestoreTests.corpus()[0]
        for engine in InflateEngineKind.allCases {
            let first = try StageRestoreTests.Chain(sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: engine)
            try gzip[0..<20_000].withUnsafeBytes { try first.head.write($0) }
            let pristine = try takeCut(first.head, offset: 20_000, spec: Self.spec)
            var edits: [(String, (inout GzipState) -> Void)] = [
                ("membersDone = Int.max", { $0.membersDone = Int.max }),
                ("membersDone = -1", { $0.membersDone = -1 }),
                ("outputOffset ≥ 2^63", { $0.outputOffset = 1 << 63 }),
                ("compressedOffset = UInt64.max", { $0.compressedOffset = .max }),
                ("memberLength > outputOffset", { $0.memberLength = $0.outputOffset + 1 }),
            ]
            if engine == .isal {
                edits.append(("tmp_out_valid = -1", { Self.editISAL(&$0, field: \.tmp_out_valid, Int32(-1)) }))
                edits.append(("read_in_length = 65", { Self.editISAL(&$0, field: \.read_in_length, Int32(65)) }))
                // type0_block_len sits in an anonymous union right after hist_bits.
                let type0 = MemoryLayout<inflate_state>.offset(of: \.hist_bits)! + 4
                edits.append(("type0_block_len = -5", { Self.editISAL(&$0, offset: type0, Int32(-5)) }))
                edits.append(("total_out off by one", { Self.editISAL(&$0, field: \.total_out, UInt32(1)) }))
                edits.append(
                    (
                        "long-code index past its table",
                        { Self.editISAL(&$0, offset: MemoryLayout<inflate_state>.offset(of: \.lit_huff_code)!, UInt32(1 << 25 | 0xffff | 15 << 26)) }
                    ))
            }
            for (label, edit) in edits {
                var checkpoint = pristine
                for (i, state) in checkpoint.stages.enumerated() {
                    if var g = state.as(GzipState.self) {
                        edit(&g)
                        checkpoint.stages[i] = StageState(g)
                    }
                }
                XCTAssertThrowsError(
                    try StageRestoreTests.Chain(
                        sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: engine,
                        checkpoint: checkpoint, previousOutput: first.sink.bytes),
                    "\(engine): \(label)"
                ) { error in
                    XCTAssertTrue(error is StateRejected, "\(label): \(error)")
                }
            }
        }
    }

    private static func editISAL<T>(_ state: inout GzipState, field: KeyPath<inflate_state, T>, _ value: T) {
        editISAL(&state, offset: MemoryLayout<inflate_state>.offset(of: field)!, value)
    }

    private static func editISAL<T>(_ state: inout GzipState, offset: Int, _ value: T) {
        guard case .isal(var saved)? = state.deflate else { return }
        var blob = [UInt8](saved.blob)
        withUnsafeBytes(of: value) { bytes in
            for (i, b) in bytes.enumerated() { blob[offset + i] = b }
        }
        saved.blob = Data(blob)
        state.deflate = .isal(saved)
    }

}
