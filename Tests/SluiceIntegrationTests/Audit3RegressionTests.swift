import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Breaks found by the third audit, each run through the real binary.
final class Audit3RegressionTests: XCTestCase {
    private var dir = ""

    override func setUpWithError() throws {
        dir = try makeTemporaryDirectory(self)
        setenv("SLUICE_STATE_DIR", dir + "/state", 1)
        addTeardownBlock { unsetenv("SLUICE_STATE_DIR") }
    }

    /// A resume refused with exit 2 changes nothing — also when stdout appends to a file:
    /// the stdout sink is built (and used to cut that file back to the checkpoint's length)
    /// before a transform's state is found unusable, so the bytes after the cut were lost.
    func testRefusedResumeLeavesTheFileOnStdoutAsItWas() throws {
        let input = dir + "/input", appended = dir + "/stdout", ck = dir + "/ck"
        let data = makeTestData(count: 300_000, seed: 31)
        try Data(data).write(to: URL(fileURLWithPath: input))
        let cut = 100_000
        // What an interrupted run left: the bytes up to the cut, then some it wrote after it
        // (or that another writer appended since).
        try Data(data[..<cut] + [UInt8](repeating: 0x2A, count: 4096)).write(to: URL(fileURLWithPath: appended))
        let before = try Data(contentsOf: URL(fileURLWithPath: appended))

        let spec = try PipelineSpec(parsing: "read \(input) | verify sha256:\(String(repeating: "0", count: 64)) | stdout")
        var st = stat()
        XCTAssertEqual(stat(input, &st), 0)
        var out = stat()
        XCTAssertEqual(stat(appended, &out), 0)
        var crc = OutputChecksum()
        data[..<cut].withUnsafeBytes { crc.update($0) }
        let source = SourceState(
            kind: "read", location: input, offset: UInt64(cut), lastModified: FileSource.modificationStamp(st),
            totalLength: UInt64(data.count))
        // Eight words are a midstate; none is a state the verifier refuses (exit 2).
        let verify = SHA256State(bytesHashed: UInt64(cut), words: [], partialBlock: Array(data[(cut - cut % 64)..<cut]))
        let stdout = StdoutSinkState(
            bytesWritten: UInt64(cut), fileSize: UInt64(cut), startFileSize: 0,
            file: FileIdentity(device: UInt64(out.st_dev), inode: UInt64(out.st_ino)), crc64: crc.value)
        try CheckpointStore(path: ck).save(
            Checkpoint(spec: spec.checkpointIdentity, source: source, stages: [StageState(verify), StageState(stdout)]))

        let run = try shell("'\(SluiceBinary.path)' -q --checkpoint '\(ck)' '\(spec)' >> '\(appended)' 2>/dev/null")
        XCTAssertEqual(run.status, 2)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: appended)), before, "exit 2 changes nothing, stdout's file included")
    }

    /// stdout cannot take back what it wrote, so the checkpoint before the first byte must be
    /// stored before that byte goes out: the checkpoint writer ran behind the sink, a kill
    /// -9 before it caught up left bytes on `>> out` and no checkpoint, and the rerun
    /// appended the whole stream after them (exit 0, 31 MB of garbage in front).
    func testNoByteReachesStdoutBeforeTheFirstCheckpointIsStored() throws {
        let input = dir + "/input", ck = dir + "/ck"
        let data = makeTestData(count: 4 << 20, seed: 32)
        try Data(data).write(to: URL(fileURLWithPath: input))
        let pipe = Pipe()
        let process = try StreamingProcess(
            SluiceBinary.path, ["-q", "--checkpoint", ck, "read \(input) | stdout"], stdout: pipe.fileHandleForWriting)
        try pipe.fileHandleForWriting.close()
        // The first bytes on stdout: by now the checkpoint before them must be on disk.
        let first = try XCTUnwrap(try pipe.fileHandleForReading.read(upToCount: 1))
        let stored = CheckpointStore(path: ck).exists
        process.signal(SIGKILL)
        _ = process.wait()
        XCTAssertEqual(first.count, 1)
        XCTAssertTrue(stored, "a byte reached stdout before any checkpoint was stored")
        let checkpoint = try XCTUnwrap(try CheckpointStore(path: ck).load())
        XCTAssertEqual(checkpoint.source.offset, 0)
    }

    /// `--restart` over a checkpoint it cannot read cannot find where the abandoned run began
    /// appending to the file on stdout: those bytes stay, and the run says so.
    func testRestartOverAnUnreadableCheckpointSaysTheAppendedBytesStay() throws {
        let input = dir + "/input", appended = dir + "/stdout", ck = dir + "/ck"
        let data = makeTestData(count: 100_000, seed: 33)
        try Data(data).write(to: URL(fileURLWithPath: input))
        let earlier = Data("an earlier run's bytes\n".utf8)
        try earlier.write(to: URL(fileURLWithPath: appended))
        let spec = try PipelineSpec(parsing: "read \(input) | stdout")
        try CheckpointStore(path: ck).save(
            Checkpoint(spec: spec.checkpointIdentity, source: SourceState(kind: "read", location: input, offset: 0), stages: []))
        var stored = try Data(contentsOf: URL(fileURLWithPath: ck))
        stored[stored.count / 2] ^= 0x01
        try stored.write(to: URL(fileURLWithPath: ck))

        let run = try shell(
            "'\(SluiceBinary.path)' --restart --checkpoint '\(ck)' '\(spec)' >> '\(appended)' 2> '\(dir)/stderr'; echo $?", capture: true)
        let stderr = try String(contentsOfFile: dir + "/stderr", encoding: .utf8)
        XCTAssertEqual(run.output.trimmingCharacters(in: .whitespacesAndNewlines), "0", stderr)
        XCTAssertTrue(stderr.contains("cannot be told apart and stays"), stderr)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: appended)), earlier + Data(data))
    }
}
