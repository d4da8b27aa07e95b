import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Snapshot at any input byte → checkpoint JSON → restore in a fresh decoder → continue:
/// the output is byte-identical. Edited states are refused or still decode correctly.
final class ZstdRestoreTests: XCTestCase {
    /// Made once per test process: zstd -19 and -22 take a while.
    nonisolated(unsafe) private static var cached: [(name: String, zst: [UInt8], plain: [UInt8])]?

    static func corpus(in dir: String) throws -> [(name: String, zst: [UInt8], plain: [UInt8])] {
        if let cached { return cached }
        let made = try makeCorpus(in: dir)
        cached = made
        return made
    }

    private static func makeCorpus(in dir: String) throws -> [(name: String, zst: [UInt8], plain: [UInt8])] {
        let text = makeTestData(count: 400_000, seed: 21)
        let runs = [UInt8](repeating: 3, count: 200_000) + Array(text.prefix(30_000))
        var rng = SeededRandom(seed: 3)
        let random = (0..<60_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let multi =
            try zstdCompress(Array(text.prefix(100_000)), "-19", in: dir) + zstdSkippableFrame([1, 2, 3, 4])
            + zstdCompress([], "-3", in: dir) + zstdCompress(runs, "--no-check -1", streamed: true, in: dir)
            + zstdCompress(random, "-3", in: dir)
        return [
            ("single frame -19", try zstdCompress(text, "-19", in: dir), text),
            ("single frame --ultra -22, streamed", try zstdCompress(text, "--ultra -22", streamed: true, in: dir), text),
            ("multi-frame", multi, Array(text.prefix(100_000)) + runs + random),
            // A 128 KiB window: the output ring wraps every few blocks, so cuts land with the
            // window split across its two segments.
            ("small window, wrapping ring", try zstdCompress(text, "-5 --zstd=wlog=17", in: dir), text),
        ]
    }

    struct Chain {
        let decoder: ZstdDecoder
        let sink: MemorySink
        init(checkpoint: Checkpoint? = nil, previousOutput: [UInt8] = []) throws {
            let states = checkpoint?.stages ?? []
            sink = MemorySink(restoring: states.last?.as(StdoutSinkState.self), previous: previousOutput)
            decoder = try ZstdDecoder(next: sink, restoring: states.first?.as(ZstdState.self))
        }
    }

    func testRandomCutsRestoreExactly() throws {
        let dir = try makeTemporaryDirectory(self)
        var rng = SeededRandom(seed: 11)
        var cuts = 0
        for (name, zst, plain) in try Self.corpus(in: dir) {
            var points = (0..<Thoroughness.scaled(70)).map { _ in Int.random(in: 0...zst.count, using: &rng) }
            points += [0, 1, 3, 4, 5, 6, 7, 8, 12, 13, 14, zst.count - 4, zst.count - 3, zst.count - 1, zst.count]
            for cut in points {
                let first = try Chain()
                try feed(zst[0..<cut], into: first.decoder, rng: &rng, oneByteWrites: cut % 4 == 0 && cut < 150_000)
                let checkpoint = try roundTripped(self.cut(first.decoder, offset: cut))
                let second = try Chain(checkpoint: checkpoint, previousOutput: first.sink.bytes)
                try feed(zst[cut...], into: second.decoder, rng: &rng, oneByteWrites: cut % 7 == 0 && zst.count - cut < 20_000)
                try second.decoder.finish()
                XCTAssertTrue(second.sink.bytes == plain, "\(name), cut at \(cut): output differs")
                cuts += 1
            }
        }
        XCTAssertGreaterThanOrEqual(cuts, Thoroughness.scaled(200))
    }

    /// Cut, restore, continue, cut again — many times in one stream.
    func testChainedCutsRestoreExactly() throws {
        let dir = try makeTemporaryDirectory(self)
        var rng = SeededRandom(seed: 12)
        for (name, zst, plain) in try Self.corpus(in: dir) {
            var chain = try Chain()
            var offset = 0
            while offset < zst.count {
                let end = min(zst.count, offset + Int.random(in: 1...max(1, zst.count / 8), using: &rng))
                try feed(zst[offset..<end], into: chain.decoder, rng: &rng, oneByteWrites: false)
                offset = end
                chain = try Chain(checkpoint: roundTripped(cut(chain.decoder, offset: offset)), previousOutput: chain.sink.bytes)
            }
            try chain.decoder.finish()
            XCTAssertTrue(chain.sink.bytes == plain, name)
        }
    }

    /// Empty skippable frames are 8 bytes each and count as frames: a checkpoint after a run
    /// of them holds more frames than compressedOffset / 9 and must still restore (review 3:
    /// the restore's bound assumed every frame takes 9 bytes and refused it).
    func testCutAfterEmptySkippableFramesRestores() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 5_000, seed: 4)
        let skippables = (0..<10).flatMap { _ in zstdSkippableFrame([]) }
        let zst = skippables + (try zstdCompress(plain, "-3", in: dir))
        var rng = SeededRandom(seed: 2)
        for cut in [8, 16, skippables.count, skippables.count + 4] {
            let first = try Chain()
            try feed(zst[0..<cut], into: first.decoder, rng: &rng, oneByteWrites: false)
            let checkpoint = try roundTripped(self.cut(first.decoder, offset: cut))
            let second = try Chain(checkpoint: checkpoint, previousOutput: first.sink.bytes)
            try feed(zst[cut...], into: second.decoder, rng: &rng, oneByteWrites: false)
            try second.decoder.finish()
            XCTAssertTrue(second.sink.bytes == plain, "cut at \(cut): output differs")
        }
    }

    func testSnapshotOfRestoredStateIsIdentical() throws {
        let dir = try makeTemporaryDirectory(self)
        let (_, zst, _) = try Self.corpus(in: dir)[0]
        let chain = try Chain()
        var rng = SeededRandom(seed: 1)
        try feed(zst[0..<(zst.count / 2)], into: chain.decoder, rng: &rng, oneByteWrites: false)
        let first = try roundTripped(cut(chain.decoder, offset: zst.count / 2))
        let restored = try Chain(checkpoint: first, previousOutput: chain.sink.bytes)
        XCTAssertEqual(first.stages, try cut(restored.decoder, offset: zst.count / 2).stages)
    }

    /// Hand-edited states: refused with checkpointRefused, or (when the edit is harmless or
    /// only caught later) the decode either fails with corruptData or still gives the right bytes.
    func testEditedStatesAreRefusedOrCorrect() throws {
        let dir = try makeTemporaryDirectory(self)
        var rng = SeededRandom(seed: 13)
        let corpus = try Self.corpus(in: dir)
        var refused = 0, tried = 0
        for (name, zst, plain) in [corpus[0], corpus[2]] {
            for cutIndex in 0..<(ProcessInfo.processInfo.environment["SLUICE_SLOW_TESTS"] == "1" ? 8 : 2) {
                let cut = Int.random(in: 0...zst.count, using: &rng)
                let first = try Chain()
                try feed(zst[0..<cut], into: first.decoder, rng: &rng, oneByteWrites: false)
                let checkpoint = try roundTripped(self.cut(first.decoder, offset: cut))
                let original = try XCTUnwrap(checkpoint.stages[0].as(ZstdState.self))
                for edit in 0..<Self.edits.count + 20 {
                    var state = original
                    if edit < Self.edits.count {
                        Self.edits[edit](&state, &rng)
                    } else {
                        for _ in 0..<3 { Self.edits[Int.random(in: 0..<Self.edits.count, using: &rng)](&state, &rng) }
                    }
                    var edited = checkpoint
                    edited.stages[0] = StageState(state)
                    tried += 1
                    let chain: Chain
                    do {
                        chain = try Chain(checkpoint: roundTripped(edited), previousOutput: first.sink.bytes)
                    } catch is StateRejected {
                        refused += 1
                        continue
                    } catch is DecodingError {
                        refused += 1
                        continue
                    }
                    do {
                        try feed(zst[cut...], into: chain.decoder, rng: &rng, oneByteWrites: false)
                        try chain.decoder.finish()
                        // Edits of the position alone shift the output; compare what was decoded after the cut.
                        let fresh = Array(chain.sink.bytes.suffix(from: min(chain.sink.bytes.count, first.sink.bytes.count)))
                        let expected = Array(plain.suffix(from: first.sink.bytes.count))
                        XCTAssertTrue(
                            fresh == expected || state.outputOffset != original.outputOffset,
                            "\(name) cut \(cut) (\(cutIndex)) edit \(edit): decoded differently without an error")
                    } catch let error as SluiceError {
                        guard case .corruptData = error else { return XCTFail("\(name) edit \(edit): \(error)") }
                    }
                }
            }
        }
        XCTAssertGreaterThan(refused, tried / 4)
    }

    /// Single-field edits of a state, each something a careless or hostile editor might write.
    nonisolated(unsafe) static let edits: [(inout ZstdState, inout SeededRandom) -> Void] = [
        { s, _ in s.version = 2 },
        { s, _ in s.phase = .block },
        { s, _ in s.phase = .checksum },
        { s, _ in s.phase = .magic },
        { s, _ in s.phase = .skippableContent },
        { s, _ in s.pending = Data(repeating: 0x41, count: 200_000) },
        { s, r in s.pending.append(UInt8.random(in: 0...255, using: &r)) },
        { s, _ in s.compressedOffset = 0 },
        { s, _ in s.framesDone = .max },  // audit 3: overflowed `framesDone + 1` (SIGILL)
        { s, _ in s.skipRemaining = .max },
        { s, _ in s.frame = nil },
        { s, _ in _ = s.frame?.window.popLast() },
        { s, _ in s.frame?.window = Data() },
        { s, r in
            // Through an array: the decoded window may be a slice whose indices do not start at 0.
            guard let window = s.frame?.window, !window.isEmpty else { return }
            var bytes = [UInt8](window)
            bytes[Int.random(in: 0..<bytes.count, using: &r)] ^= 1
            s.frame?.window = Data(bytes)
        },
        { s, _ in s.frame?.frameOutput &+= 1 },  // wrapping: edits combine, and .max may come first
        { s, _ in s.frame?.frameOutput = .max },
        { s, _ in s.frame?.repeatOffsets = [0, 4, 8] },
        { s, _ in s.frame?.repeatOffsets = [.max, .max, .max] },
        { s, _ in s.frame?.repeatOffsets = [1, 4] },
        { s, r in s.frame?.huffmanTree = Data((0..<Int.random(in: 1...140, using: &r)).map { _ in UInt8.random(in: 0...255, using: &r) }) },
        { s, _ in s.frame?.huffmanTree = Data([0x80]) },
        { s, _ in if let h = s.frame?.huffmanTree, h.count > 1 { s.frame!.huffmanTree = h.dropLast() } },
        { s, r in
            setTable(
                &s, Int.random(in: 0...2, using: &r),
                ZstdTableState(kind: .compressed, description: Data((0..<Int.random(in: 1...40, using: &r)).map { _ in UInt8.random(in: 0...255, using: &r) })))
        },
        { s, _ in setTable(&s, 1, ZstdTableState(kind: .rle, symbol: 200)) },
        { s, _ in setTable(&s, 2, ZstdTableState(kind: .rle, symbol: nil)) },
        { s, _ in setTable(&s, 0, ZstdTableState(kind: .none)) },
        { s, _ in s.frame?.sequenceTables = [] },
        { s, _ in s.frame?.checksum?.lanes = [1, 2, 3] },
        { s, _ in s.frame?.checksum?.buffered = Data(repeating: 1, count: 40) },
        { s, _ in s.frame?.checksum?.totalLength += 32 },
        { s, _ in s.frame?.checksum = nil },
        { s, _ in s.frame?.header = Data([0x00, 0xf8]) },
        { s, _ in s.frame?.header = Data([0x01, 0x58, 0x2a]) },
        { s, _ in s.frame?.header = Data() },
        { s, r in s.frame?.blockHeader = UInt32.random(in: 0...0xFFFFFF, using: &r) },
        { s, _ in s.frame?.blockHeader = nil },
    ]

    private func cut(_ head: ByteSink, offset: Int) throws -> Checkpoint {
        try takeCut(head, offset: offset, spec: "read x | unzstd | stdout")
    }

    private static func setTable(_ state: inout ZstdState, _ which: Int, _ table: ZstdTableState) {
        if state.frame?.sequenceTables.count == 3 { state.frame!.sequenceTables[which] = table }
    }

    // MARK: helpers

    private func feed(_ bytes: ArraySlice<UInt8>, into sink: ByteSink, rng: inout SeededRandom, oneByteWrites: Bool) throws {
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let end = min(bytes.endIndex, i + (oneByteWrites ? 1 : Int.random(in: 1...90_000, using: &rng)))
            try bytes[i..<end].withUnsafeBytes { try sink.write($0) }
            i = end
        }
    }
}
