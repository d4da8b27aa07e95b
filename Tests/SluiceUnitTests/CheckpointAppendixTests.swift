import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Format 3: a checkpoint is its JSON, a newline, and a binary appendix holding the
/// decoders' windows. The MAC covers the appendix; a reference into it is range-checked
/// before anything else reads it.
final class CheckpointAppendixTests: XCTestCase {
    /// A checkpoint with blobs: unxz's and unzstd's windows (and pending bytes), each
    /// mid-stream. Made once: compressing takes a few seconds.
    private static let shared: Result<Checkpoint, any Error> = Result { try makeSample() }

    private func sample() throws -> Checkpoint { try Self.shared.get() }

    private static func makeSample() throws -> Checkpoint {
        let dir = NSTemporaryDirectory() + "/sluice-appendix-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plain = makeTestData(count: 1_500_000, seed: 31)
        let xz = try XzTool.compress(plain, options: "-6", dir: dir)
        let xzDecoder = try XzDecoder(next: MemorySink())
        try xzDecoder.write(Array(xz[..<(xz.count * 2 / 3)]))
        let zst = try zstdCompress(plain, "-9", in: dir)
        let zstdDecoder = try ZstdDecoder(next: MemorySink())
        try zstdDecoder.write(Array(zst[..<(zst.count * 2 / 3)]))
        // Through a barrier, as a run takes them: unzstd executes the blocks it planned ahead first.
        let xzState = try XCTUnwrap(takeCut(xzDecoder, offset: 0, spec: "read x | unxz | stdout").stages[0].as(XzState.self))
        let zstdState = try XCTUnwrap(
            takeCut(zstdDecoder, offset: 0, spec: "read x | unzstd | stdout").stages[0].as(ZstdState.self))
        XCTAssertGreaterThan(xzState.block?.lzma.window.count ?? 0, 50_000, "the xz window is under way")
        XCTAssertGreaterThan(zstdState.frame?.window.count ?? 0, 50_000, "the zstd window is under way")
        return Checkpoint(
            spec: "read x | unxz | file out", writtenAt: Date(timeIntervalSince1970: 0),
            source: SourceState(kind: "read", location: "x", offset: 3),
            stages: [StageState(xzState), StageState(zstdState)])
    }

    private func assertRefused(_ data: Data, mentions: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try Checkpoint.decode(data, path: "c", key: .test), file: file, line: line) { error in
            guard case SluiceError.checkpointRefused(_, let reason) = error else {
                return XCTFail("not refused but \(error)", file: file, line: line)
            }
            XCTAssertTrue(reason.contains(mentions), reason, file: file, line: line)
        }
    }

    private func assertUntrusted(_ data: Data, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try Checkpoint.decode(data, path: "c", key: .test), file: file, line: line) { error in
            XCTAssertTrue(error is CheckpointDistrust, "\(error)", file: file, line: line)
        }
    }

    func testWindowsTravelRawInTheAppendixAndComeBackWhole() throws {
        let checkpoint = try sample()
        let data = try checkpoint.encoded(key: .test)
        let stored = StoredCheckpointFile(data)
        let windows = [
            try XCTUnwrap(checkpoint.stages[0].as(XzState.self)?.block?.lzma.window),
            try XCTUnwrap(checkpoint.stages[1].as(ZstdState.self)?.frame?.window),
        ]
        XCTAssertNotNil(stored.appendix.range(of: windows[0]), "the windows, raw")
        XCTAssertNotNil(stored.appendix.range(of: windows[1]), "the windows, raw")
        XCTAssertGreaterThanOrEqual(stored.blobReferences.count, 4, "windows, probabilities, pending bytes")
        XCTAssertLessThan(stored.json.utf8.count, 20_000, "no window inside the JSON")
        XCTAssertFalse(stored.json.contains(windows[0].prefix(300).base64EncodedString().prefix(40)))
        let decoded = try Checkpoint.decode(data, path: "c", key: .test)
        XCTAssertEqual(decoded.stages, checkpoint.stages)
        XCTAssertTrue(CheckpointStore.isSluiceCheckpoint(data))
    }

    func testTheAppendixIsAuthenticated() throws {
        let data = try sample().encoded(key: .test)
        let stored = StoredCheckpointFile(data)
        var rng = SeededRandom(seed: 7)
        for _ in 0..<20 {
            var changed = stored
            let at = Int.random(in: 0..<changed.appendix.count, using: &rng)
            changed.appendix[at] ^= UInt8.random(in: 1...255, using: &rng)
            assertUntrusted(changed.data)
        }
        var longer = stored
        longer.appendix.append(0)
        assertUntrusted(longer.data)
        // Two blobs swapped through their references: each range is fine and the bytes are
        // genuine, but they are not what was sealed where.
        var swapped = stored
        let references = stored.blobReferences.filter { !$0.hasPrefix("{\"length\":0,") }
        swapped.json = swapped.json
            .replacingOccurrences(of: references[0], with: "@")
            .replacingOccurrences(of: references[1], with: references[0])
            .replacingOccurrences(of: "@", with: references[1])
        XCTAssertNotEqual(swapped.json, stored.json)
        assertUntrusted(swapped.data)
    }

    func testReferencesOutsideTheAppendixAreRefusedNeverATrap() throws {
        let stored = StoredCheckpointFile(try sample().encoded(key: .test))
        let reference = try XCTUnwrap(stored.blobReferences.last)
        let size = stored.appendix.count
        let hostile = [
            "{\"length\":1,\"offset\":\(size)}",
            "{\"length\":2,\"offset\":\(size - 1)}",
            "{\"length\":\(size + 1),\"offset\":0}",
            "{\"length\":\(UInt64.max),\"offset\":1}",
            "{\"length\":1,\"offset\":\(UInt64.max)}",
            "{\"length\":\(UInt64.max),\"offset\":\(UInt64.max)}",
        ]
        for text in hostile {
            var edited = stored
            edited.json = edited.json.replacingOccurrences(of: reference, with: text)
            assertRefused(edited.data, mentions: "appendix")
        }
        for text in [
            "{\"length\":-1,\"offset\":0}", "{\"length\":1,\"offset\":-5}", "{\"length\":1e30,\"offset\":0}",
            "{\"offset\":0}", "\"AAAA\"", "null", "[0,1]",
        ] {
            var edited = stored
            edited.json = edited.json.replacingOccurrences(of: reference, with: text)
            assertRefused(edited.data, mentions: "damaged")
        }
    }

    func testATruncatedCheckpointIsRefused() throws {
        let data = try sample().encoded(key: .test)
        let jsonEnd = try XCTUnwrap(data.firstIndex(of: 0x0A))
        for cut in [data.count - 1, data.count - 40_000, jsonEnd + 1] {
            assertRefused(data.prefix(cut), mentions: "appendix")
        }
        assertRefused(data.prefix(jsonEnd), mentions: "before the appendix")
        assertRefused(data.prefix(jsonEnd / 2), mentions: "not a sluice checkpoint")
    }

    /// A file over the read limit is judged by its first line alone (a sparse file here, so
    /// nothing large is written): a checkpoint's is "too large", anything else is not ours.
    func testAFileOverTheLimitIsJudgedByItsFirstLine() throws {
        let dir = try makeTemporaryDirectory(self)
        let path = dir + "/c"
        let beginnings = [
            (try sample().encoded(key: .test).prefix(4096), true),
            (Data("{\"format\":\"sluice-checkpoint\",\"version\":3}\n".utf8), true),
            (Data("not a checkpoint\n{\"format\":\"sluice-checkpoint\"}".utf8), false),
            (Data(), false),
        ]
        for (start, ours) in beginnings {
            try start.write(to: URL(fileURLWithPath: path))
            XCTAssertEqual(truncate(path, off_t(CheckpointStore.sizeLimit) + 1), 0)
            switch try CheckpointStore(path: path, keyDirectory: dir).read() {
            case .damaged(let error) where ours: XCTAssertTrue("\(error)".contains("larger than"), "\(error)")
            case .foreign where !ours: break
            case let other: XCTFail("\(start.prefix(40)): \(other)")
            }
        }
    }

    /// The refusal of a file nobody authenticated quotes the value it could not use:
    /// escaped, so a planted checkpoint cannot send control sequences to the terminal.
    func testADamagedCheckpointsQuotedValueIsEscaped() throws {
        var stored = StoredCheckpointFile(try sample().encoded(key: .test))
        let phase = try XCTUnwrap(stored.json.range(of: "\"phase\":\""))
        stored.json.replaceSubrange(phase, with: "\"phase\":\"\\u001b[2J")
        XCTAssertThrowsError(try Checkpoint.decode(stored.data, path: "c", key: .test)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains("damaged"), text)
            XCTAssertFalse(text.unicodeScalars.contains { $0.value < 0x20 }, text)
        }
    }

    /// inspect's verdict restores each transform's state as a rerun would: one the run
    /// refuses (a probability out of range, sealed with the user's own key) is not "resume".
    func testInspectRefusesATransformStateTheRunWouldRefuse() throws {
        let dir = try makeTemporaryDirectory(self)
        let xz = try XzTool.compress(makeTestData(count: 400_000, seed: 9), options: "-6", dir: dir)
        let decoder = try XzDecoder(next: MemorySink())
        try decoder.write(Array(xz[..<(xz.count / 2)]))
        var state = decoder.snapshot()
        let source = SourceState(kind: "fetch", location: "http://example.invalid/x.xz", offset: state.inputOffset)
        func verdict(_ state: XzState) throws -> (action: String, reason: String) {
            let checkpoint = Checkpoint(
                spec: "fetch http://example.invalid/x.xz | unxz | file \(dir)/out", source: source,
                stages: [StageState(state), StageState(FileSinkState(path: dir + "/out", bytesWritten: state.outputOffset))])
            try CheckpointStore(path: dir + "/c", keyDirectory: dir + "/keys").save(checkpoint)
            setenv("SLUICE_STATE_DIR", dir + "/keys", 1)
            defer { unsetenv("SLUICE_STATE_DIR") }
            return try CheckpointInspector(path: dir + "/c").verdict
        }
        XCTAssertNotEqual(try verdict(state).action, "refuse")
        var probabilities = try XCTUnwrap(state.block?.lzma.probabilities)
        probabilities[0] = 0
        probabilities[1] = 0
        state.block?.lzma.probabilities = probabilities
        let refused = try verdict(state)
        XCTAssertEqual(refused.action, "refuse", refused.reason)
        XCTAssertTrue(refused.reason.contains("probability"), refused.reason)
    }

    /// What inspect prints from a checkpoint is escaped, the source's kind included (a
    /// checkpoint edited and sealed again with the user's key is still a file).
    func testInspectEscapesTheSourceKind() throws {
        let dir = try makeTemporaryDirectory(self)
        let checkpoint = Checkpoint(
            spec: "read a | file b", source: SourceState(kind: "re\u{1b}[2Jad", location: "a"),
            stages: [StageState(FileSinkState(path: "b", bytesWritten: 0))])
        try CheckpointStore(path: dir + "/c", keyDirectory: dir + "/keys").save(checkpoint)
        setenv("SLUICE_STATE_DIR", dir + "/keys", 1)
        defer { unsetenv("SLUICE_STATE_DIR") }
        let inspector = try CheckpointInspector(path: dir + "/c")
        for json in [false, true] {
            let text = inspector.render(json: json)
            XCTAssertFalse(text.unicodeScalars.contains { $0.value == 0x1b }, text)
        }
    }

    func testVersionTwoIsRefusedAsOlder() throws {
        var stored = StoredCheckpointFile(try sample().encoded(key: .test))
        stored.json = stored.json.replacingOccurrences(of: "\"version\":3", with: "\"version\":2")
        assertRefused(stored.data, mentions: "older sluice (format version 2")
        assertRefused(Data(stored.json.utf8), mentions: "older sluice (format version 2")
    }

    func testStoreAndInspectReadTheNewLayout() throws {
        let dir = try makeTemporaryDirectory(self)
        let checkpoint = try sample()
        let store = CheckpointStore(path: dir + "/out.sluice", keyDirectory: dir + "/keys")
        try store.save(checkpoint)
        XCTAssertEqual(try store.load()?.stages, checkpoint.stages)
        // inspect reads with the default key directory; seal with that one's key for it.
        setenv("SLUICE_STATE_DIR", dir + "/keys", 1)
        defer { unsetenv("SLUICE_STATE_DIR") }
        let inspector = try CheckpointInspector(path: dir + "/out.sluice")
        let json = inspector.render(json: true)
        XCTAssertNotNil(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], json)
        XCTAssertLessThan(json.utf8.count + inspector.render(json: false).utf8.count, 5_000, "no blob bytes printed")
    }
}

/// Checkpoints carrying a large window are spaced so storing it stays a small share of the work.
final class CheckpointPacingTests: XCTestCase {
    /// One-block unxz: the 8 MiB window spilled, the LZMA probabilities held.
    let xzWindow = CheckpointAppendixSize(bytes: (8 << 20) + 28_000, spilledBytes: 8 << 20)
    let xz = CheckpointPacing(base: 8 << 20, chainNsPerSourceByte: 0.3 + 40 + 0.3 * 3.5)
    let zstd = CheckpointPacing(base: 8 << 20, chainNsPerSourceByte: 0.3 + 8 + 0.3 * 4)

    /// The share of the chain's work between two checkpoints that storing `appendix` takes.
    func share(_ pacing: CheckpointPacing, _ appendix: CheckpointAppendixSize) -> Double {
        CheckpointPacing.cost(of: appendix) / (Double(pacing.interval(after: appendix)) * pacing.chainNsPerSourceByte)
    }

    func testWithoutAnAppendixTheUsersIntervalStands() {
        XCTAssertEqual(xz.interval(after: .none), 8 << 20)
        XCTAssertEqual(zstd.interval(after: .none), 8 << 20)
    }

    func testAWindowStretchesTheIntervalToTheBudget() {
        // A 4 MiB window (~11 ms of CPU) is 3% of the work over ~8.8 MB of unxz's source.
        let small = CheckpointAppendixSize(bytes: (4 << 20) + 28_000, spilledBytes: 4 << 20)
        XCTAssertGreaterThan(xz.interval(after: small), 8 << 20)
        XCTAssertEqual(share(xz, small), CheckpointPacing.budget, accuracy: 1e-4)
        // 8 MiB (~22 ms) would need ~0.73 s of work: the gap stops at the rerun's 0.7 s, just over 3%.
        let interval = xz.interval(after: xzWindow)
        XCTAssertGreaterThan(interval, 15 << 20)
        XCTAssertLessThan(interval, 19 << 20)
        XCTAssertEqual(Double(interval) * xz.chainNsPerSourceByte, CheckpointPacing.redoNs, accuracy: 100)
        XCTAssertGreaterThan(share(xz, xzWindow), CheckpointPacing.budget)
        XCTAssertLessThan(share(xz, xzWindow), 0.032)
        let zstdWindow = CheckpointAppendixSize(bytes: 8 << 20, spilledBytes: 8 << 20)
        XCTAssertGreaterThan(zstd.interval(after: zstdWindow), 65 << 20, "a fast decoder: further apart")
        XCTAssertLessThan(zstd.interval(after: zstdWindow), 80 << 20)
    }

    func testALargeAppendixRisesToTheCeilingNotFurther() {
        // unzstd --long=27: a 128 MiB window costs ~0.35 s; 3% would put ~1.2 GB of source
        // between checkpoints, the ceiling of 5% ~740 MB — never closer.
        let large = CheckpointAppendixSize(bytes: 128 << 20, spilledBytes: 128 << 20)
        XCTAssertEqual(share(zstd, large), CheckpointPacing.ceiling, accuracy: 1e-4)
        XCTAssertGreaterThan(zstd.interval(after: large), 700_000_000)
        let larger = CheckpointAppendixSize(bytes: 256 << 20, spilledBytes: 256 << 20)
        XCTAssertEqual(Double(zstd.interval(after: larger)) / Double(zstd.interval(after: large)), 2, accuracy: 0.01, "proportional")
    }

    func testBytesHeldInMemoryCostLessThanSpilledOnes() {
        // unxz's raw blocks are referred to where they lie: no write into the spill at the
        // cut, no reading back. A cut of 10 MB of them costs about as much as 5 MB spilled.
        let held = CheckpointAppendixSize(bytes: 10 << 20, spilledBytes: 0)
        let spilled = CheckpointAppendixSize(bytes: 10 << 20, spilledBytes: 10 << 20)
        XCTAssertLessThan(xz.interval(after: held), xz.interval(after: spilled))
        XCTAssertEqual(CheckpointPacing.cost(of: spilled) / CheckpointPacing.cost(of: held), 2, accuracy: 0.01)
        XCTAssertEqual(share(xz, held), CheckpointPacing.budget, accuracy: 1e-4)
        // Multi-block unxz: the head's window spilled beside the blocks' raw bytes (~35 ms):
        // the kill bar's 0.7 s of work would make it 5%, which is where it stops.
        let mixed = CheckpointAppendixSize(bytes: (8 << 20) + (10 << 20), spilledBytes: 8 << 20)
        XCTAssertEqual(
            CheckpointPacing.cost(of: mixed), CheckpointPacing.cost(of: held) + CheckpointPacing.cost(of: xzWindow) - 28_000 * 1.3,
            accuracy: 1)
        XCTAssertEqual(share(xz, mixed), CheckpointPacing.ceiling, accuracy: 1e-4)
    }

    func testTheUsersIntervalBoundsAndZeroStaysOff() {
        XCTAssertEqual(xz.interval(after: CheckpointAppendixSize(bytes: 1 << 20, spilledBytes: 1 << 20)), 8 << 20, "a small blob: the user's interval")
        XCTAssertEqual(CheckpointPacing(base: 1 << 40, chainNsPerSourceByte: 9.5).interval(after: xzWindow), 1 << 40)
        XCTAssertEqual(CheckpointPacing(base: 0, chainNsPerSourceByte: 9.5).interval(after: xzWindow), 0, "0 stays off")
        XCTAssertEqual(CheckpointPacing(base: 1, chainNsPerSourceByte: 0).interval(after: xzWindow), 1)
        let huge = CheckpointAppendixSize(bytes: .max, spilledBytes: .max)
        XCTAssertEqual(CheckpointPacing(base: 1, chainNsPerSourceByte: 1e-300).interval(after: huge), 1 << 62, "bounded")
    }

    func testTheSpilledPartNeverExceedsTheWhole() {
        XCTAssertEqual(CheckpointAppendixSize(bytes: 10, spilledBytes: 20).spilledBytes, 10)
        XCTAssertEqual(CheckpointPacing.cost(of: CheckpointAppendixSize(bytes: 10, spilledBytes: 20)), 26, accuracy: 1e-9)
    }

    func testTheUnxzChainCostComesFromTheRegistry() throws {
        let spec = try PipelineSpec(parsing: "read x | unxz | file out")
        XCTAssertEqual(ThreadPlan.costs(spec: spec, options: PipelineOptions()).reduce(0, +), 0.3 + 40 + 0.3 * 3.5, accuracy: 1e-9)
    }

    func testTheChainCostComesFromTheRegistry() throws {
        let spec = try PipelineSpec(parsing: "read x | unzstd | file out")
        let costs = ThreadPlan.costs(spec: spec, options: PipelineOptions())
        XCTAssertEqual(costs.count, 3)
        XCTAssertEqual(costs.reduce(0, +), 0.3 + 8 + 0.3 * 4, accuracy: 1e-9)
    }
}
