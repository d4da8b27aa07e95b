import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A checkpoint is input: damaged, edited or inconsistent ones are refused (exit 2),
/// never fed to an inflater or trusted to cut a file.
final class CheckpointTrustTests: XCTestCase {
    static let sample = CLIFeatureTests.repository + "/Fixtures/sample.tar.gz"

    /// Interrupts `fetch data.gz | gunzip | file out` after a checkpoint past the start.
    /// The server sends at 2 MB/s, so the run is surely still going when the signal lands.
    private func interruptedRun(in dir: String, engine: String) throws -> (arguments: [String], server: FaultServer) {
        let plain = dir + "/plain", gz = dir + "/data.gz"
        try Data(makeTestData(count: 12 << 20, seed: 12)).write(to: URL(fileURLWithPath: plain))
        XCTAssertEqual(try shell("gzip -6 -c '\(plain)' > '\(gz)'").status, 0)
        var fault = FaultServer.Fault()
        fault.bytesPerSecond = 2_000_000
        let server = try FaultServer(body: try [UInt8](Data(contentsOf: URL(fileURLWithPath: gz))), fault: fault)
        addTeardownBlock { server.stop() }
        let args = [
            "--engine", engine, "--progress", "json", "--checkpoint-interval", "64KiB",
            "fetch \(server.url()) | gunzip | file \(dir)/out",
        ]
        let process = try StreamingProcess(SluiceBinary.path, args)
        XCTAssertTrue(process.waitForLine(where: isLaterCheckpoint))
        process.signal(SIGTERM)
        XCTAssertEqual(process.wait().status, 130)
        return (args, server)
    }

    func testEditedCheckpointIsNotTrustedAndStartsOver() throws {
        let dir = try makeTemporaryDirectory(self)
        let (args, _) = try interruptedRun(in: dir, engine: "isal")
        let path = dir + "/out.sluice"
        guard FileManager.default.fileExists(atPath: path) else { return XCTFail("no checkpoint was left") }
        var text = try String(contentsOfFile: path, encoding: .utf8)
        // Flip one character of the ISA-L state blob (base64) — same length, different bytes.
        let range = try XCTUnwrap(text.range(of: "\"blob\":\""))
        let at = text.index(range.upperBound, offsetBy: 200)
        text.replaceSubrange(at...at, with: text[at] == "A" ? "B" : "A")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try SluiceBinary.run(args)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("cannot trust checkpoint"), result.stderr)
        XCTAssertEqual(try shell("cmp -s '\(dir)/plain' '\(dir)/out'").status, 0, "started over and finished")
    }

    func testInconsistentPositionsAreRefusedEvenWithAValidMAC() throws {
        let dir = try makeTemporaryDirectory(self)
        let (args, _) = try interruptedRun(in: dir, engine: "zlib")
        let path = dir + "/out.sluice"
        var checkpoint = try XCTUnwrap(try CheckpointStore(path: path).load())
        for (i, state) in checkpoint.stages.enumerated() {
            if var s = state.as(FileSinkState.self), s.bytesWritten >= 1000 {
                s.bytesWritten -= 1000
                checkpoint.stages[i] = StageState(s)
            }
        }
        try CheckpointStore(path: path).save(checkpoint)  // re-sealed with the user's key
        let result = try SluiceBinary.run(args)
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("do not fit together"), result.stderr)
    }

    func testCheckpointingOftenDoesNotLeakDescriptors() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = dir + "/plain", gz = dir + "/data.gz"
        try Data(makeTestData(count: 60 << 20, seed: 3)).write(to: URL(fileURLWithPath: plain))
        XCTAssertEqual(try shell("gzip -1 -c '\(plain)' > '\(gz)'").status, 0)
        let run = try shell("ulimit -n 32 && '\(SluiceBinary.path)' -q --checkpoint-interval 4KiB 'read \(gz) | gunzip | file \(dir)/out'")
        XCTAssertEqual(run.status, 0, "a checkpoint every 4 KiB must not run out of 32 descriptors")
        XCTAssertEqual(try shell("cmp -s '\(plain)' '\(dir)/out'").status, 0)
    }

    func testSpecFileWithCRLFLineEndings() throws {
        let dir = try makeTemporaryDirectory(self)
        let specFile = dir + "/crlf.spec"
        try "# windows\r\nread \(Self.sample)\r\n  | gunzip\r\n  | file \(dir)/out\r\n".write(toFile: specFile, atomically: true, encoding: .utf8)
        let result = try SluiceBinary.run(["-q", "-f", specFile])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out"), "the output name carries no \\r")
    }

    func testOutputThatIsADirectoryIsRefusedBeforeAnythingMoves() throws {
        let dir = try makeTemporaryDirectory(self)
        let result = try SluiceBinary.run(["read \(Self.sample) | gunzip | file \(dir)"])
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("is a directory"), result.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [])
        let empty = try SluiceBinary.run(["read \(Self.sample) | file ''"])
        XCTAssertEqual(empty.status, 2, empty.stderr)
    }
}

/// A stdout sink appending to a file (`>> out`) resumes without duplicating or losing
/// bytes, even after a kill before its first periodic checkpoint; `> out` is refused.
final class StdoutResumeTests: XCTestCase {
    func testAppendingStdoutResumesExactlyAfterAKill() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = dir + "/plain", gz = dir + "/data.gz", out = dir + "/out", ck = dir + "/ck"
        let data = makeTestData(count: 40 << 20, seed: 31)
        try Data(data).write(to: URL(fileURLWithPath: plain))
        XCTAssertEqual(try shell("gzip -6 -c '\(plain)' > '\(gz)'").status, 0)
        let prefix = Array("lines that were there before\n".utf8)
        try Data(prefix).write(to: URL(fileURLWithPath: out))

        let args = ["--progress", "json", "--checkpoint", ck, "--checkpoint-interval", "64MiB", "read \(gz) | gunzip | stdout"]
        let fd = open(out, O_WRONLY | O_APPEND)
        XCTAssertGreaterThanOrEqual(fd, 0)
        // The run to be killed waits at the debug build's SOURCE_END gate (a FIFO nobody
        // opens) once its source is read, so however fast the machine, the kill lands first.
        let gateDir = try makeTemporaryDirectory(self)
        XCTAssertEqual(mkfifo(gateDir + "/source-end", 0o600), 0)
        let process = try StreamingProcess(
            SluiceBinary.path, args, stdout: FileHandle(fileDescriptor: fd, closeOnDealloc: true),
            environment: ["SLUICE_TEST_GATE_SOURCE_END": gateDir + "/source-end"])
        // Killed after its starting checkpoint, long before the first 64 MiB one.
        XCTAssertTrue(process.waitForLine { $0.contains("\"event\":\"checkpoint\"") })
        XCTAssertTrue(process.waitForLine { $0.contains("\"event\":\"progress\"") })
        process.signal(SIGKILL)
        _ = process.wait()

        let rerun = try shell("'\(SluiceBinary.path)' -q --checkpoint '\(ck)' 'read \(gz) | gunzip | stdout' >> '\(out)'")
        XCTAssertEqual(rerun.status, 0)
        let written = try [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))
        XCTAssertEqual(written.count, prefix.count + data.count, "no byte duplicated or lost")
        XCTAssertTrue(written == prefix + data)
    }

    func testTruncatedStdoutFileIsRefused() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = dir + "/plain", gz = dir + "/data.gz", out = dir + "/out", ck = dir + "/ck"
        try Data(makeTestData(count: 40 << 20, seed: 32)).write(to: URL(fileURLWithPath: plain))
        XCTAssertEqual(try shell("gzip -6 -c '\(plain)' > '\(gz)'").status, 0)
        let fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        let process = try StreamingProcess(
            SluiceBinary.path,
            [
                "--progress", "json", "--checkpoint", ck, "--checkpoint-interval", "1MiB",
                "read \(gz) | gunzip | stdout",
            ],
            stdout: FileHandle(fileDescriptor: fd, closeOnDealloc: true))
        XCTAssertTrue(process.waitForLine(where: isLaterCheckpoint))
        process.signal(SIGKILL)
        _ = process.wait()
        let rerun = try shell("'\(SluiceBinary.path)' --checkpoint '\(ck)' 'read \(gz) | gunzip | stdout' > '\(out)' 2> '\(dir)/err'")
        XCTAssertEqual(rerun.status, 2)
        let message = try String(contentsOfFile: dir + "/err", encoding: .utf8)
        XCTAssertTrue(message.contains(">>"), message)
    }
}
