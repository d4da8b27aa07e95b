import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Issue 8, items 6 and 16 with the real binary: a resume never builds on partial output
/// or a checkpoint that changed behind its back, and a hand-edited checkpoint never
/// crashes it. Each test has its own checkpoint key directory (SLUICE_STATE_DIR), shared
/// by this process and the binary it starts.
final class ResumeTrustTests: XCTestCase {
    private var dir = ""
    private var gz = "", plain = "", digest = "", out = ""

    override func setUpWithError() throws {
        dir = try makeTemporaryDirectory(self)
        setenv("SLUICE_STATE_DIR", dir + "/state", 1)
        addTeardownBlock { unsetenv("SLUICE_STATE_DIR") }
        plain = dir + "/plain"
        gz = dir + "/data.gz"
        out = dir + "/out"
        try Data(makeTestData(count: 3 << 20, seed: 77)).write(to: URL(fileURLWithPath: plain))
        XCTAssertEqual(try shell("gzip -6 -c '\(plain)' > '\(gz)'").status, 0)
        digest = try sha256Hex(ofFile: plain)
    }

    private var spec: String { "read \(gz) | gunzip | verify sha256:\(digest) | file \(out)" }

    /// Stopped in-process in the middle of the source's first write, with a checkpoint.
    private func interruptedRun(engine: InflateEngineKind = .isal) throws {
        var options = PipelineOptions()
        options.engine = engine
        let checkpoint = try runCancelledAtFirstProgress(spec, checkpoint: out + ".sluice", options: options)
        XCTAssertGreaterThan(checkpoint.source.offset, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
    }

    private func rerun(_ extra: [String] = [], environment: [String: String]? = nil) throws -> SluiceBinary.Result {
        try SluiceBinary.run(extra + [spec], environment: environment)
    }

    private func assertOutputIsComplete(_ result: SluiceBinary.Result, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        XCTAssertEqual(try sha256Hex(ofFile: out), digest, "the output is the whole stream, verified", file: file, line: line)
    }

    func testChangedPartialOutputStartsOverInsteadOfPassingVerify() throws {
        try interruptedRun()
        // The case: one byte of the partial file changed between runs.
        let fd = open(out + ".sluice-part", O_WRONLY)
        XCTAssertEqual(pwrite(fd, "\u{0}", 1, 1000), 1)
        close(fd)
        let result = try rerun()
        try assertOutputIsComplete(result)
        XCTAssertTrue(result.stderr.contains("changed since the checkpoint"), result.stderr)
        XCTAssertTrue(result.stderr.contains("starting over from zero"), result.stderr)
    }

    func testUnchangedPartialOutputResumes() throws {
        try interruptedRun(engine: .zlib)
        let result = try rerun(["--engine", "zlib"])
        try assertOutputIsComplete(result)
        XCTAssertFalse(result.stderr.contains("starting over"), result.stderr)
    }

    func testCheckpointSealedWithAnotherKeyIsNotTrusted() throws {
        try interruptedRun()
        // Someone who can write the output directory, with a key of their own: they plant
        // a partial file of their bytes and a checkpoint that records exactly those bytes.
        let store = CheckpointStore(path: out + ".sluice")
        var checkpoint = try XCTUnwrap(try store.load())
        let planted = [UInt8](repeating: 0x41, count: 5000)
        try Data(planted).write(to: URL(fileURLWithPath: out + ".sluice-part"))
        for (i, state) in checkpoint.stages.enumerated() {
            if var file = state.as(FileSinkState.self) {
                var crc = OutputChecksum()
                planted.withUnsafeBytes { crc.update($0) }
                file.bytesWritten = 5000
                file.crc64 = crc.value
                checkpoint.stages[i] = StageState(file)
            }
        }
        try CheckpointStore(path: out + ".sluice", keyDirectory: dir + "/their-key").save(checkpoint)
        let result = try rerun()
        try assertOutputIsComplete(result)
        XCTAssertTrue(result.stderr.contains("cannot trust checkpoint"), result.stderr)
    }

    func testMissingKeyStartsOverSayingWhy() throws {
        try interruptedRun()
        var environment = ProcessInfo.processInfo.environment
        environment["SLUICE_STATE_DIR"] = dir + "/new-machine"
        let result = try rerun(environment: environment)
        try assertOutputIsComplete(result)
        XCTAssertTrue(result.stderr.contains("no checkpoint key"), result.stderr)
    }

    func testStdoutCheckpointThatCannotBeTrustedIsRefused() throws {
        let ck = dir + "/ck", stdoutFile = dir + "/stdout"
        let args = ["--progress", "json", "--checkpoint", ck, "--checkpoint-interval", "64KiB", "read \(gz) | gunzip | stdout"]
        let fd = open(stdoutFile, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        // Held at the debug build's SOURCE_END gate once its source is read, so the run
        // cannot finish (and remove its checkpoint) before the kill lands.
        let gate = dir + "/source-end"
        XCTAssertEqual(mkfifo(gate, 0o600), 0)
        let process = try StreamingProcess(
            SluiceBinary.path, args, stdout: FileHandle(fileDescriptor: fd, closeOnDealloc: true),
            environment: ["SLUICE_TEST_GATE_SOURCE_END": gate])
        XCTAssertTrue(process.waitForLine { $0.contains("\"event\":\"checkpoint\"") })
        process.signal(SIGKILL)
        _ = process.wait()
        var environment = ProcessInfo.processInfo.environment
        environment["SLUICE_STATE_DIR"] = dir + "/other"
        let result = try SluiceBinary.run(["--checkpoint", ck, "read \(gz) | gunzip | stdout"], environment: environment)
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("cannot trust it"), result.stderr)
        XCTAssertTrue(result.stderr.contains("--restart"), result.stderr)
    }

    /// About a hundred mutated checkpoints, sealed with the user's key (a hand edit), run
    /// by the binary: each is refused or gives the verified output, never a signal.
    func testMutatedCheckpointsNeverCrashTheBinary() throws {
        var rng = SeededRandom(seed: 8)
        for engine in InflateEngineKind.allCases {
            for file in [out, out + ".sluice", out + ".sluice-part"] { unlink(file) }
            try interruptedRun(engine: engine)
            let pristine = try XCTUnwrap(try CheckpointStore(path: out + ".sluice").load())
            let partial = try Data(contentsOf: URL(fileURLWithPath: out + ".sluice-part"))
            for _ in 0..<50 {
                var checkpoint = pristine
                let what = CheckpointMutator.mutate(&checkpoint, rng: &rng)
                try CheckpointStore(path: out + ".sluice").save(checkpoint)
                try partial.write(to: URL(fileURLWithPath: out + ".sluice-part"))
                unlink(out)
                let result = try rerun(["-q", "--engine", engine.rawValue])
                XCTAssertFalse(result.signalled, "\(engine), \(what): killed by signal \(result.status)")
                XCTAssertTrue([0, 2, 5].contains(result.status), "\(engine), \(what): exit \(result.status): \(result.stderr)")
                if result.status == 0 {
                    XCTAssertEqual(try sha256Hex(ofFile: out), digest, "\(engine), \(what)")
                }
            }
        }
    }
}
