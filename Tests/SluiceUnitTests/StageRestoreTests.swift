import CCrypto
import CZlib
import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The central property: snapshot at any byte → encode as a checkpoint → decode →
/// restore into fresh stages → continue gives byte-identical output and digest.
final class StageRestoreTests: XCTestCase {
    private static let spec = "read x | verify | gunzip | verify | stdout"

    /// Inputs that exercise every corner of the decoder.
    static func corpus() -> [(name: String, gzip: [UInt8], plain: [UInt8])] {
        let text = makeTestData(count: 300_000, seed: 1)
        let random = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let members: [(String, [GzipMember])] = [
            ("one member, level 6", [GzipMember(data: text)]),
            (
                "multi-member with an empty member",
                [
                    GzipMember(data: Array(text.prefix(50_000)), name: "a.txt"),
                    GzipMember(data: []),
                    GzipMember(data: Array(text.suffix(80_000)), level: 9),
                ]
            ),
            (
                "all header fields",
                [
                    GzipMember(
                        data: Array(text.prefix(120_000)), name: "name.bin", comment: "a comment",
                        extra: Array(repeating: 0xAB, count: 300), headerCRC: true)
                ]
            ),
            (
                "stored blocks and random data",
                [
                    GzipMember(data: random, level: 0),
                    GzipMember(data: Array(text.prefix(10_000)), level: 1),
                ]
            ),
        ]
        return members.map { name, parts in
            (name, parts.flatMap { $0.encoded() }, parts.flatMap(\.data))
        }
    }
    nonisolated(unsafe) static var rng = SeededRandom(seed: 42)

    /// A decoder chain verify → gunzip → verify → memory, restored from `checkpoint`.
    struct Chain {
        let head: ByteSink
        let sink: MemorySink
        init(
            sourceDigest: String, outputDigest: String, engine: InflateEngineKind,
            checkpoint: Checkpoint? = nil, previousOutput: [UInt8] = []
        ) throws {
            var states = checkpoint?.stages ?? []
            func state() -> StageState? { states.isEmpty ? nil : states.removeLast() }
            var sinkState: StdoutSinkState?
            sinkState = state()?.as(StdoutSinkState.self)
            sink = MemorySink(restoring: sinkState, previous: previousOutput)
            var outVerify: SHA256State?, gunzip: GzipState?, inVerify: SHA256State?
            outVerify = state()?.as(SHA256State.self)
            gunzip = state()?.as(GzipState.self)
            inVerify = state()?.as(SHA256State.self)
            let v2 = try SHA256Verifier(expectedHex: outputDigest, next: sink, restoring: outVerify)
            let g = try GzipDecoder(engine: engine, next: v2, restoring: gunzip)
            head = try SHA256Verifier(expectedHex: sourceDigest, next: g, restoring: inVerify)
        }
    }

    func testRandomCutsRestoreExactly() throws {
        var rng = SeededRandom(seed: 7)
        var cuts = 0
        for (name, gzip, plain) in Self.corpus() {
            let inDigest = sha256(gzip), outDigest = sha256(plain)
            // Cut points: random ones, plus the tricky spots (header, first bytes, trailer).
            var points = (0..<Thoroughness.scaled(30)).map { _ in Int.random(in: 0...gzip.count, using: &rng) }
            points += [0, 1, 5, 10, 11, 25, gzip.count - 8, gzip.count - 3, gzip.count - 1, gzip.count]
            for engine in InflateEngineKind.allCases {
                for cut in points {
                    let oneByteWrites = cut % 5 == 0
                    try checkCut(
                        at: cut, gzip: gzip, plain: plain, inDigest: inDigest, outDigest: outDigest,
                        engine: engine, oneByteWrites: oneByteWrites, rng: &rng, label: name)
                    cuts += 1
                }
            }
        }
        XCTAssertGreaterThanOrEqual(cuts, Thoroughness.scaled(200))
    }

    /// Several cuts in one run: restore, continue, cut again, restore again.
    func testChainedCutsRestoreExactly() throws {
        var rng = SeededRandom(seed: 99)
        for (name, gzip, plain) in Self.corpus() {
            for engine in InflateEngineKind.allCases {
                let inDigest = sha256(gzip), outDigest = sha256(plain)
                var chain = try Chain(sourceDigest: inDigest, outputDigest: outDigest, engine: engine)
                var offset = 0
                var output: [UInt8] = []
                while offset < gzip.count {
                    let step = Int.random(in: 1...max(1, gzip.count / 6), using: &rng)
                    let end = min(gzip.count, offset + step)
                    try feed(gzip[offset..<end], into: chain.head, rng: &rng, oneByteWrites: false)
                    offset = end
                    let checkpoint = try roundTripped(takeCut(chain.head, offset: offset, spec: Self.spec))
                    output = chain.sink.bytes
                    chain = try Chain(
                        sourceDigest: inDigest, outputDigest: outDigest, engine: engine,
                        checkpoint: checkpoint, previousOutput: output)
                }
                try chain.head.finish()
                XCTAssertEqual(chain.sink.bytes, plain, "\(name), \(engine)")
            }
        }
    }

    func testSnapshotOfRestoredStateIsIdentical() throws {
        let (_, gzip, plain) = Self.corpus()[1]
        for engine in InflateEngineKind.allCases {
            let chain = try Chain(sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: engine)
            try feed(gzip[0..<gzip.count / 2], into: chain.head, rng: &Self.rng, oneByteWrites: false)
            let first = try roundTripped(takeCut(chain.head, offset: gzip.count / 2, spec: Self.spec))
            let restored = try Chain(
                sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: engine,
                checkpoint: first, previousOutput: chain.sink.bytes)
            let second = try takeCut(restored.head, offset: gzip.count / 2, spec: Self.spec)
            XCTAssertEqual(first.stages, second.stages, "\(engine)")
        }
    }

    func testCheckpointFromOtherEngineIsRefused() throws {
        let (_, gzip, plain) = Self.corpus()[0]
        let chain = try Chain(sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: .isal)
        try feed(gzip[0..<1000], into: chain.head, rng: &Self.rng, oneByteWrites: false)
        let checkpoint = try roundTripped(takeCut(chain.head, offset: 1000, spec: Self.spec))
        XCTAssertThrowsError(
            try Chain(
                sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: .zlib,
                checkpoint: checkpoint)
        ) { error in
            guard let rejected = error as? StateRejected else { return XCTFail("unexpected \(error)") }
            XCTAssertTrue(rejected.reason.contains("isal"), rejected.reason)
        }
    }

    func testISALStateFromAnotherLibraryVersionIsRefused() throws {
        let (_, gzip, plain) = Self.corpus()[0]
        let chain = try Chain(sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: .isal)
        try feed(gzip[0..<5000], into: chain.head, rng: &Self.rng, oneByteWrites: false)
        var checkpoint = try roundTripped(takeCut(chain.head, offset: 5000, spec: Self.spec))
        for (i, state) in checkpoint.stages.enumerated() {
            if var g = state.as(GzipState.self), case .isal(var isal)? = g.deflate {
                isal.layout = "isal-9.99.0/12345"
                g.deflate = .isal(isal)
                checkpoint.stages[i] = StageState(g)
            }
        }
        XCTAssertThrowsError(
            try Chain(
                sourceDigest: sha256(gzip), outputDigest: sha256(plain), engine: .isal,
                checkpoint: checkpoint))
    }

    // MARK: helpers

    private func checkCut(
        at cut: Int, gzip: [UInt8], plain: [UInt8], inDigest: String, outDigest: String,
        engine: InflateEngineKind, oneByteWrites: Bool, rng: inout SeededRandom, label: String
    ) throws {
        let first = try Chain(sourceDigest: inDigest, outputDigest: outDigest, engine: engine)
        try feed(gzip[0..<cut], into: first.head, rng: &rng, oneByteWrites: oneByteWrites)
        let checkpoint = try roundTripped(takeCut(first.head, offset: cut, spec: Self.spec))
        // Bytes written after the cut are lost in a crash; the restored chain must not need them.
        let second = try Chain(
            sourceDigest: inDigest, outputDigest: outDigest, engine: engine,
            checkpoint: checkpoint, previousOutput: first.sink.bytes)
        try feed(gzip[cut...], into: second.head, rng: &rng, oneByteWrites: false)
        try second.head.finish()
        XCTAssertEqual(second.sink.bytes.count, plain.count, "\(label), \(engine), cut at \(cut)")
        XCTAssertTrue(second.sink.bytes == plain, "\(label), \(engine), cut at \(cut): output differs")
    }

    private func feed(_ bytes: ArraySlice<UInt8>, into sink: ByteSink, rng: inout SeededRandom, oneByteWrites: Bool) throws {
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let n = oneByteWrites ? 1 : Int.random(in: 1...70_000, using: &rng)
            let end = min(bytes.endIndex, i + n)
            try bytes[i..<end].withUnsafeBytes { try sink.write($0) }
            i = end
        }
    }

}

final class CutBox: @unchecked Sendable {
    var cut: Cut?
}

func sha256(_ bytes: [UInt8]) -> String {
    var digest = [UInt8](repeating: 0, count: 32)
    _ = SHA256(bytes, bytes.count, &digest)
    return digest.map { String(format: "%02x", $0) }.joined()
}
