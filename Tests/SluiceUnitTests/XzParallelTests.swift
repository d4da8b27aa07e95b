import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// unxz on blocks that declare their sizes (`xz -T2`), decoded on several threads: the
/// same output as `xz -dc`, in order; exact resume from any cut with blocks still queued;
/// damage reported at its block with nothing of later blocks handed on first.
final class XzParallelTests: XCTestCase {
    /// Decodes `xz` in writes of `chunk` bytes with `decoders` threads.
    static func decode(_ xz: [UInt8], chunk: Int = 65536, decoders: Int = 2, into sink: MemorySink = MemorySink()) throws -> [UInt8] {
        let decoder = try XzDecoder(next: sink, decoders: decoders)
        try write(xz, to: decoder, chunk: chunk)
        try decoder.finish()
        XCTAssertTrue(sink.finished)
        return sink.bytes
    }

    private func assertMatchesXz(_ xz: [UInt8], _ label: String, dir: String, chunks: [Int] = [7, 1 << 20], decoders: [Int] = [2, 3]) throws {
        let reference = try XCTUnwrap(try XzTool.decompress(xz, dir: dir), "xz -dc refuses \(label)")
        for chunk in chunks {
            for count in decoders {
                let output = try Self.decode(xz, chunk: chunk, decoders: count)
                XCTAssertTrue(output == reference, "\(label), \(chunk)-byte writes, \(count) threads: \(output.count) bytes, xz gives \(reference.count)")
            }
        }
    }

    /// `xz -T2 OPTIONS`: blocks with both sizes in their headers.
    static func multiBlock(_ plain: [UInt8], _ options: String, dir: String) throws -> [UInt8] {
        try XzTool.compress(plain, options: "-T2 " + options, dir: dir)
    }

    func testMultiBlockFilesMatchXz() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 300_000, seed: 41)
        for option in [
            "--block-size=5000 -0", "--block-size=1000 --check=crc32 -1", "--block-size=64KiB --check=sha256",
            "--block-size=100000 --check=none", "--x86 --lzma2=preset=1 --block-size=70000", "--arm64 --lzma2 --block-size=50000",
            "--delta=dist=3 --lzma2=preset=0 --block-size=40000", "-6",
        ] {
            try assertMatchesXz(try Self.multiBlock(plain, option, dir: dir), option, dir: dir)
        }
    }

    /// Blocks under `workerMinimum` output bytes are decoded on the stage's thread, in turn:
    /// a hostile file of many tiny blocks paid a worker hand-off (and two mappings) each.
    func testTinyBlocksAreNotHandedToWorkers() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 40_000, seed: 45)
        let xz = try Self.multiBlock(plain, "--block-size=64 -0", dir: dir)
        let output = MemorySink()
        let decoder = try XzDecoder(next: output, decoders: 2)
        try write(xz, to: decoder, chunk: 65536)
        XCTAssertTrue(output.bytes == plain)
        XCTAssertGreaterThan(decoder.blocksStreamed, 600)
        XCTAssertEqual(decoder.blocksDecodedAhead, 0)
        // Blocks of 1,000 bytes still go to the worker.
        let larger = try XzDecoder(next: MemorySink(), decoders: 2)
        try write(try Self.multiBlock(plain, "--block-size=1000 -0", dir: dir), to: larger, chunk: 65536)
        XCTAssertGreaterThan(larger.blocksDecodedAhead, 5)
    }

    /// Blocks of several LZMA2 chunks (a chunk is at most 2 MiB of output), larger than a relay buffer.
    func testBlocksOfManyChunks() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 5_000_000, seed: 42)
        try assertMatchesXz(try Self.multiBlock(plain, "-0 --block-size=2500000", dir: dir), "2.5 MB blocks", dir: dir, chunks: [1 << 20])
    }

    /// Streams with and without sizes in their block headers, concatenated with padding.
    func testMixedStreamsAndPadding() throws {
        let dir = try makeTemporaryDirectory(self)
        let sized = try Self.multiBlock(makeTestData(count: 90_000, seed: 43), "--block-size=20000 --check=sha256", dir: dir)
        let unsized = try XzTool.compress(makeTestData(count: 70_000, seed: 44), options: "--block-size=30000 -1", dir: dir)
        let single = try XzTool.compress(makeTestData(count: 40_000, seed: 45), options: "-3 --check=crc32", dir: dir)
        let empty = try XzTool.compress([], options: "", dir: dir)
        let zeros = [UInt8](repeating: 0, count: 8)
        try assertMatchesXz(sized + unsized + sized, "sized, unsized, sized", dir: dir, chunks: [3, 4096, 1 << 20])
        try assertMatchesXz(unsized + zeros + sized + empty + zeros + single + sized + zeros, "padded streams", dir: dir, chunks: [5, 1 << 20])
    }

    // MARK: Resume

    private static func state(of checkpoint: Checkpoint) throws -> XzState {
        try XCTUnwrap(checkpoint.stages.first?.as(XzState.self))
    }

    /// Writes `bytes` in pieces whose sizes `random` picks (often small).
    private static func feed(_ sink: ByteSink, _ bytes: ArraySlice<UInt8>, _ random: inout SeededRandom) throws {
        var i = bytes.startIndex
        while i < bytes.endIndex {
            // Some pieces smaller than a block: the head keeps pace with the block after it
            // between writes, so a cut inside it needs several writes inside that block.
            let size = 1 + Int(random.next() % [64, 4096, 120_000][Int(random.next() % 3)])
            let end = min(bytes.endIndex, i + size)
            try sink.write(Array(bytes[i..<end]))
            i = end
        }
    }

    /// Random cuts through the barrier and the checkpoint's coder, restored with 1, 2 or 3
    /// threads: the two halves' output joined is the original, byte for byte.
    func testRandomCutsResumeExactly() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 400_000, seed: 46)
        let unsized = try XzTool.compress(Array(plain.prefix(50_000)), options: "--block-size=20000", dir: dir)
        var noiseSource = SeededRandom(seed: 48)
        let noise = (0..<600_000).map { _ in UInt8(truncatingIfNeeded: noiseSource.next()) }
        let inputs: [(String, [UInt8], [UInt8])] = [
            ("small blocks", try Self.multiBlock(plain, "-1 --block-size=9000 --check=crc32", dir: dir), plain),
            ("larger blocks, sha256", try Self.multiBlock(plain, "--block-size=150000 --check=sha256", dir: dir), plain),
            ("x86", try Self.multiBlock(plain, "--x86 --lzma2=preset=0 --block-size=60000", dir: dir), plain),
            ("mixed", try Self.multiBlock(plain, "-0 --block-size=70000", dir: dir) + [0, 0, 0, 0] + unsized, plain + Array(plain.prefix(50_000))),
            // Blocks of five LZMA2 chunks (stored, 64 KiB each): cuts between a head's chunks.
            ("incompressible", try Self.multiBlock(noise, "-0 --block-size=300000", dir: dir), noise),
        ]
        var random = SeededRandom(seed: 47)
        var cuts = 0, queuedCuts = 0, gatheringCuts = 0, headCuts = 0, headAndAheadCuts = 0
        for (label, xz, expected) in inputs {
            // A block decoded ahead is queued (not being gathered) only from its last byte to
            // the next block's header, which waits for it to go on: every third cut is there.
            let ends = try Self.blockOffsets(xz, dir: dir).map { Int($0.compressed) }.dropFirst()
            for n in 0..<Thoroughness.scaled(55) {
                let cut =
                    n % 3 == 0 && !ends.isEmpty ? ends[ends.startIndex + Int(random.next() % UInt64(ends.count))] : Int(random.next() % UInt64(xz.count + 1))
                let first = MemorySink()
                let decoder = try XzDecoder(next: first, decoders: 2)
                try Self.feed(decoder, xz[..<cut], &random)
                let checkpoint = try roundTripped(try takeCut(decoder, offset: cut, spec: "read x | unxz | file y"))
                let state = try Self.state(of: checkpoint)
                XCTAssertEqual(state.inputOffset, UInt64(cut))
                XCTAssertEqual(state.outputOffset, UInt64(first.bytes.count), label)
                if state.queued != nil { queuedCuts += 1 }
                if state.gathering != nil { gatheringCuts += 1 }
                if let head = state.head, head.block.compressedSize > 0 { headCuts += 1 }
                if state.head != nil && state.queued != nil { headAndAheadCuts += 1 }
                let second = MemorySink()
                let restored = try XzDecoder(next: second, decoders: 1 + Int(random.next() % 3), restoring: state)
                try Self.feed(restored, xz[cut...], &random)
                try restored.finish()
                XCTAssertTrue(first.bytes + second.bytes == expected, "\(label): cut at \(cut) of \(xz.count) in phase \(state.phase)")
                cuts += 1
            }
        }
        XCTAssertGreaterThanOrEqual(cuts, Thoroughness.scaled(200))
        XCTAssertGreaterThan(queuedCuts, Thoroughness.scaled(20), "cuts with blocks queued")
        XCTAssertGreaterThan(gatheringCuts, Thoroughness.scaled(20), "cuts inside a gathered block")
        // About half the time a new head waits at its start while the block after it is
        // gathered for the worker, so fewer cuts land inside it.
        XCTAssertGreaterThan(headCuts, Thoroughness.scaled(10), "cuts inside the streaming head block")
        XCTAssertGreaterThan(headAndAheadCuts, Thoroughness.scaled(20), "cuts while the head streams and a worker has the next block")
    }

    /// A restored state with its queued blocks edited is refused, or decodes to the right
    /// output or a corrupt-data error — never a crash, never wrong output.
    func testEditedQueuesAreRefusedOrHarmless() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 200_000, seed: 48)
        let xz = try Self.multiBlock(plain, "-0 --block-size=30000 --check=crc64", dir: dir)
        var random = SeededRandom(seed: 49)
        let outcomes = try XzEditedStates(xz: xz, plain: plain, from: xz.count / 5, span: xz.count * 3 / 5, decoders: 2)
            .outcomes(rounds: 300, random: &random, usable: { $0.head != nil || $0.queued != nil || $0.gathering != nil }) { state, round, random in
                Self.edit(&state, round: round, random: &random)
            }
        XCTAssertGreaterThan(outcomes["refused", default: 0], 60, "\(outcomes)")
    }

    private static func edit(_ s: inout XzState, round: Int, random: inout SeededRandom) {
        let big = random.next()
        func mutate(_ block: inout XzRawBlock) {
            switch big % 6 {
            case 0: block.offset = block.offset &+ 1 &+ big % 100
            case 1: block.offset = UInt64.max - big % 10
            case 2: if !block.bytes.isEmpty { block.bytes.removeLast(1 + Int(big >> 8) % block.bytes.count) }
            case 3: block.bytes.append(contentsOf: [0, 1, 2, 3])
            case 4: if !block.bytes.isEmpty { block.bytes[Int(big >> 8) % block.bytes.count] ^= 0x10 }
            default: block.bytes = Data()
            }
        }
        switch round % 10 {
        case 0: if s.queued != nil { mutate(&s.queued![Int(big >> 16) % s.queued!.count]) } else if s.gathering != nil { mutate(&s.gathering!) }
        case 1: if s.gathering != nil { mutate(&s.gathering!) } else { s.gathering = s.queued?.first }
        case 2: s.queued = (s.queued?.first ?? s.gathering).map { Array(repeating: $0, count: 1 + Int(big % 12)) }
        case 3: s.phase = XzState.Phase.allCases[Int(big % UInt64(XzState.Phase.allCases.count))]
        case 4: s.queued = s.queued.map { Array($0.reversed()) } ?? s.gathering.map { [$0] }
        // The head block streaming on the stage's thread.
        case 5...8:
            guard var head = s.head else { return }
            editHead(&head, round % 10, big)
            s.head = head
        default:
            // The head dropped: what follows it still chains up to the input's position.
            s.head = nil
        }
    }

    private static func editHead(_ head: inout XzHeadState, _ kind: Int, _ big: UInt64) {
        switch (kind, big % 3) {
        case (5, 0): if !head.rest.isEmpty { head.rest.removeLast(1 + Int(big >> 8) % head.rest.count) }
        case (5, 1): head.rest.append(contentsOf: [0, 0, 0, 0])
        case (5, _): if !head.rest.isEmpty { head.rest[head.rest.startIndex + Int(big >> 8) % head.rest.count] ^= 0x08 }
        case (6, 0): head.offset = UInt64.max - big % 10
        case (6, _): head.offset &+= 4
        case (7, 0): head.block.compressedSize &+= (big >> 8) % 5000
        case (7, 1): head.block.uncompressedSize &-= (big >> 8) % 5000
        case (7, _): head.block.check.crc ^= big
        case (8, 0):
            if !head.block.lzma.window.isEmpty { head.block.lzma.window = head.block.lzma.window.dropFirst(1 + Int(big >> 8) % head.block.lzma.window.count) }
        case (8, 1): head.block.lzma.probabilities = Data(repeating: 0, count: head.block.lzma.probabilities.count)
        default: head.block.header[head.block.header.startIndex + 4] ^= 0x01
        }
    }

    // MARK: Damage

    /// Mutants of multi-block files: a typed corrupt-data error or the right output, and
    /// what reached the sink is always a prefix of the original.
    func testFuzzedMultiBlockInputsFailCleanly() throws {
        let dir = try makeTemporaryDirectory(self)
        var random = SeededRandom(seed: 50)
        let plain = makeTestData(count: 12_000, seed: 51)
        let bases = try [
            "--check=crc32 --block-size=1500 -0", "--check=sha256 --block-size=3000 --x86 --lzma2=preset=1", "--check=none --block-size=2000",
        ].map { try Self.multiBlock(plain, $0, dir: dir) }
        var mutants = 0, rejected = 0
        for base in bases {
            for _ in 0..<Thoroughness.scaled(400) {
                var bytes = base
                switch random.next() % 4 {
                case 0: bytes[Int(random.next() % UInt64(bytes.count))] ^= UInt8(1 << (random.next() % 8))
                case 1: bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
                case 2: bytes.removeLast(1 + Int(random.next() % UInt64(bytes.count)))
                default: bytes.remove(at: Int(random.next() % UInt64(bytes.count)))
                }
                mutants += 1
                let sink = MemorySink()
                do {
                    let output = try Self.decode(bytes, chunk: 1 + Int(random.next() % 5000), decoders: 2 + Int(random.next() % 2), into: sink)
                    XCTAssertTrue(output == plain, "a mutant decoded to wrong output without an error")
                } catch SluiceError.corruptData(format: "xz", offset: let offset, reason: _) {
                    XCTAssertLessThanOrEqual(offset, UInt64(bytes.count))
                    rejected += 1
                }
                // The check runs over a block's output before any of it goes on.
                XCTAssertTrue(plain.starts(with: sink.bytes), "damaged output reached the sink")
            }
        }
        XCTAssertGreaterThanOrEqual(mutants, Thoroughness.scaled(1200))
        XCTAssertGreaterThan(rejected, mutants * 9 / 10)
    }

    /// Damage in block 4 of 8: the error names an offset inside block 4, and no byte of
    /// blocks 4…8 reached the sink first, whichever thread decoded them.
    func testCorruptBlockStopsAtItsOffset() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 80_000, seed: 52)
        let xz = try Self.multiBlock(plain, "-0 --block-size=10000", dir: dir)
        let blocks = try Self.blockOffsets(xz, dir: dir)
        XCTAssertEqual(blocks.count, 8)
        for chunk in [1 << 20, 4096, 1] {
            var bad = xz
            bad[Int(blocks[3].compressed) + 40] ^= 0x21
            let sink = MemorySink()
            XCTAssertThrowsError(try Self.decode(bad, chunk: chunk, decoders: 2, into: sink)) { error in
                guard case SluiceError.corruptData("xz", let offset, _) = error else { return XCTFail("\(error)") }
                XCTAssertGreaterThanOrEqual(offset, blocks[3].compressed)
                XCTAssertLessThan(offset, blocks[4].compressed)
            }
            XCTAssertLessThanOrEqual(UInt64(sink.bytes.count), blocks[3].uncompressed)
            XCTAssertTrue(plain.starts(with: sink.bytes))
        }
    }

    /// Damage in each block in turn — streamed by the stage's thread or decoded ahead by a
    /// worker — is a corrupt-data error at an offset inside that block, after exactly the
    /// blocks before it went on; the workers are gone afterwards (no hang, nothing left).
    func testDamageInEveryBlockIsReportedAtItsOffset() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 96_000, seed: 54)
        let xz = try Self.multiBlock(plain, "-0 --block-size=12000", dir: dir)
        let blocks = try Self.blockOffsets(xz, dir: dir) + [(compressed: UInt64(xz.count), uncompressed: UInt64(plain.count))]
        XCTAssertEqual(blocks.count, 9)
        let clean = try XzDecoder(next: MemorySink(), decoders: 2)
        try write(xz, to: clean, chunk: 4096)
        XCTAssertGreaterThanOrEqual(clean.blocksStreamed, 3, "blocks streamed as the head")
        XCTAssertGreaterThanOrEqual(clean.blocksDecodedAhead, 3, "blocks decoded ahead by a worker")
        for n in 0..<8 {
            var bad = xz
            // Past the block header, inside the LZMA2 data.
            bad[Int(blocks[n].compressed) + 30] ^= 0x44
            let sink = MemorySink()
            let decoder = try XzDecoder(next: sink, decoders: 2)
            XCTAssertThrowsError(
                try {
                    try write(bad, to: decoder, chunk: 4096)
                    try decoder.finish()
                }()
            ) { error in
                guard case SluiceError.corruptData("xz", let offset, _) = error else { return XCTFail("block \(n + 1): \(error)") }
                XCTAssertGreaterThanOrEqual(offset, blocks[n].compressed, "block \(n + 1)")
                XCTAssertLessThan(offset, blocks[n + 1].compressed, "block \(n + 1)")
            }
            XCTAssertLessThanOrEqual(UInt64(sink.bytes.count), blocks[n].uncompressed, "block \(n + 1)")
            XCTAssertGreaterThanOrEqual(UInt64(sink.bytes.count), n > 0 ? blocks[n - 1].uncompressed : 0, "block \(n + 1): earlier blocks held back")
            XCTAssertTrue(plain.starts(with: sink.bytes))
            XCTAssertEqual(decoder.workersRunning, 0, "block \(n + 1)")
        }
    }

    /// Where each block starts, in the file and in the output (from `xz --robot -lvv`).
    static func blockOffsets(_ xz: [UInt8], dir: String) throws -> [(compressed: UInt64, uncompressed: UInt64)] {
        let path = dir + "/list.xz"
        try Data(xz).write(to: URL(fileURLWithPath: path))
        let listing = try shell("xz --robot -lvv '\(path)'", capture: true)
        return listing.output.split(separator: "\n").filter { $0.hasPrefix("block\t") }.compactMap { line in
            let fields = line.split(separator: "\t")
            guard fields.count > 5, let c = UInt64(fields[4]), let u = UInt64(fields[5]) else { return nil }
            return (c, u)
        }
    }

    /// A wrong check is reported at the check, whether the block streamed as the head or a
    /// worker decoded it: the head named the start of its last LZMA2 chunk instead (14 KB
    /// early for 2 MiB blocks), since the end of the data is read in the same step.
    func testAWrongCheckIsReportedAtTheCheckInEveryBlock() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 96_000, seed: 54)
        let xz = try Self.multiBlock(plain, "-0 --block-size=12000", dir: dir)
        let blocks = try Self.blockOffsets(xz, dir: dir) + [(compressed: UInt64(xz.count), uncompressed: UInt64(plain.count))]
        // Every block ends in its CRC64, where the next block begins (the last block's is left out).
        let checks = (1..<8).map { Int(blocks[$0].compressed) - 8 }
        for n in 0..<7 {
            var bad = xz
            bad[checks[n]] ^= 0x01
            let decoder = try XzDecoder(next: MemorySink(), decoders: 2)
            XCTAssertThrowsError(
                try {
                    try write(bad, to: decoder, chunk: 4096)
                    try decoder.finish()
                }()
            ) { error in
                guard case SluiceError.corruptData("xz", let offset, let reason) = error else { return XCTFail("block \(n + 1): \(error)") }
                XCTAssertTrue(reason.contains("CRC64 mismatch in block \(n + 1)"), "block \(n + 1): \(reason)")
                XCTAssertEqual(offset, UInt64(checks[n]), "block \(n + 1): \(reason)")
            }
        }
    }

    /// Workers leave when the stage finishes, fails or is released: none is left running.
    func testWorkersStopAfterFinishAndAfterFailure() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 60_000, seed: 53)
        let xz = try Self.multiBlock(plain, "-0 --block-size=5000", dir: dir)
        let good = try XzDecoder(next: MemorySink(), decoders: 3)
        try write(xz, to: good, chunk: 4096)
        XCTAssertEqual(good.workersRunning, 2)
        try good.finish()
        XCTAssertEqual(good.workersRunning, 0)
        var bad = xz
        bad[xz.count / 2] ^= 0x40
        let failing = try XzDecoder(next: MemorySink(), decoders: 3)
        XCTAssertThrowsError(try write(bad, to: failing, chunk: 4096))
        XCTAssertEqual(failing.workersRunning, 0)
        // Released in the middle of the stream: deinit stops them (nothing to assert on a
        // released object; this must simply return).
        var abandoned: XzDecoder? = try XzDecoder(next: MemorySink(), decoders: 3)
        try write(Array(xz.prefix(xz.count / 2)), to: XCTUnwrap(abandoned), chunk: 4096)
        XCTAssertEqual(abandoned?.workersRunning, 2)
        abandoned = nil
    }

    /// Behind a relay (the next stage on its own thread) a worker's block is handed over
    /// whole instead of copied, and its buffer comes back for the next: same output, in order.
    func testBlocksAreHandedOverToARelayInOrder() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 1_500_000, seed: 57)
        for option in ["-0 --block-size=100000", "--x86 --lzma2=preset=0 --block-size=70000"] {
            let xz = try Self.multiBlock(plain, option, dir: dir)
            let sink = MemorySink()
            let relay = try Relay(next: sink, control: RunControl(progress: ProgressReporter(handler: nil)), name: "test")
            let decoder = try XzDecoder(next: relay, decoders: 3)
            try write(xz, to: decoder, chunk: 65536)
            try decoder.finish()
            XCTAssertTrue(sink.bytes == plain, option)
            XCTAssertEqual(decoder.blocksHandedOver, decoder.blocksDecodedAhead, option)
            XCTAssertGreaterThan(decoder.blocksHandedOver, 5, option)
        }
    }

    func testDecoderThreadsFollowTheCores() {
        var options = PipelineOptions()
        XCTAssertEqual(XzDecoder.decoderThreads(options, cores: 2), 2)
        XCTAssertEqual(XzDecoder.decoderThreads(options, cores: 1), 1)
        XCTAssertEqual(XzDecoder.decoderThreads(options, cores: 64), 4)
        options.threaded = false
        XCTAssertEqual(XzDecoder.decoderThreads(options, cores: 8), 1)
    }
}
