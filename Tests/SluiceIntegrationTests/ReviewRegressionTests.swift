import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// What an adversarial review of the release binary broke, one test per finding: each
/// failed (a trap, or a file deleted) before its fix.
final class ReviewRegressionTests: XCTestCase {

    // MARK: -f SPECFILE is read as hostile input

    func testSpecFileThatIsADirectoryIsAUsageError() throws {
        let dir = try makeTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/specs", withIntermediateDirectories: false)
        let outcome = try runSluiceBounded(["-f", "specs"], in: dir)
        XCTAssertFalse(outcome.signalled, "sluice -f DIRECTORY crashed: \(outcome.stderr)")
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("directory"), outcome.stderr)
    }

    func testEndlessSpecFileIsRefusedWithoutReadingItAll() throws {
        // /dev/zero never ends: reading it whole ran the process out of memory (a trap).
        let dir = try makeTemporaryDirectory(self)
        let outcome = try runSluiceBounded(["-f", "/dev/zero"], in: dir)
        XCTAssertFalse(outcome.signalled, "sluice -f /dev/zero crashed: \(outcome.stderr)")
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("larger than"), outcome.stderr)
    }

    func testSpecFileThatIsNotUTF8IsAUsageError() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data([0xff, 0xfe, 0x41]).write(to: URL(fileURLWithPath: dir + "/spec"))
        let outcome = try runSluiceBounded(["-f", "spec"], in: dir)
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("UTF-8"), outcome.stderr)
    }

    func testSpecFileFromAPipeStillWorks() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: dir + "/in"))
        let outcome = try runSluiceBounded(["-f", "/dev/stdin"], in: dir, stdin: Data("read in # a comment\n| file out\n".utf8))
        XCTAssertEqual(outcome.status, 0, outcome.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/out"), Data("hello\n".utf8))
    }

    func testSpecFromStandardInputWithAStdinSourceIsAUsageError() throws {
        // `printf 'stdin | file out' | sluice -f /dev/stdin` read the spec from standard input,
        // then ran 'stdin' on what was left (nothing): exit 0 and an empty `out`.
        let dir = try makeTemporaryDirectory(self)
        let outcome = try runSluiceBounded(["-f", "/dev/stdin"], in: dir, stdin: Data("stdin | file out\n".utf8))
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("'stdin' would read nothing"), outcome.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
    }

    // MARK: messages state facts

    /// A stream refused at its header (over memlimit) wrote nothing to stdout: the message
    /// said "the bytes already written to stdout are not valid" all the same.
    func testAStreamRefusedBeforeItsFirstByteSaysNothingWasWritten() throws {
        let dir = try makeTemporaryDirectory(self)
        let xz = try XzTool.compress(makeTestData(count: 100_000, seed: 5), options: "-6", dir: dir)
        try Data(xz).write(to: URL(fileURLWithPath: dir + "/in.xz"))
        let outcome = try runSluiceBounded(["-q", "read in.xz | unxz memlimit=1MiB | stdout"], in: dir)
        XCTAssertEqual(outcome.status, 5, outcome.stderr)
        XCTAssertEqual(outcome.stdout, Data())
        XCTAssertTrue(outcome.stderr.contains("nothing was written"), outcome.stderr)
        XCTAssertFalse(outcome.stderr.contains("already written"), outcome.stderr)
    }

    // MARK: --checkpoint '' names files nobody gave

    func testEmptyCheckpointPathIsRefusedAndDeletesNothing() throws {
        // `--checkpoint ''` made the temporary and lock files `.tmp` and `.lock` in the working
        // directory, and a run deleted a user's files of those names.
        let dir = try makeTemporaryDirectory(self)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: dir + "/in"))
        try Data("precious\n".utf8).write(to: URL(fileURLWithPath: dir + "/.tmp"))
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: dir + "/.lock"))
        let before = try DirectorySnapshot(dir)
        let outcome = try runSluiceBounded(["--checkpoint", "", "read in | file out"], in: dir)
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("--checkpoint"), outcome.stderr)
        let after = try DirectorySnapshot(dir)
        XCTAssertTrue(after == before, "a refused run changed the directory: \(after.differences(from: before))")
    }

    // MARK: stderr whose reader went away

    /// Runs sluice with stderr on a pipe nobody reads any more (`sluice … 2>&1 | head -1`
    /// after head exited): every write to it fails with EPIPE.
    private func runWithDeadStderr(_ arguments: [String], in dir: String) throws -> Process {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        close(fds[0])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: SluiceBinary.path)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle(fileDescriptor: fds[1], closeOnDealloc: true)
        try process.run()
        close(fds[1])
        process.waitUntilExit()
        return process
    }

    func testErrorLineToAClosedStderrPipeDoesNotCrash() throws {
        let dir = try makeTemporaryDirectory(self)
        let process = try runWithDeadStderr(["read in | bogus | file out"], in: dir)
        XCTAssertEqual(process.terminationReason, .exit, "sluice died of signal \(process.terminationStatus)")
        XCTAssertEqual(process.terminationStatus, 2)
    }

    func testRetryNoticeToAClosedStderrPipeDoesNotCrashOrLeaveALock() throws {
        // Port 1 on loopback refuses at once: one retry notice (the progress renderer's
        // path), then the final error line (the runner's).
        let dir = try makeTemporaryDirectory(self)
        let process = try runWithDeadStderr(["--retries", "1", "fetch http://127.0.0.1:1/x | file out"], in: dir)
        XCTAssertEqual(process.terminationReason, .exit, "sluice died of signal \(process.terminationStatus)")
        XCTAssertEqual(process.terminationStatus, 3)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [], "a failed run before its first byte left files")
    }
}

extension ReviewRegressionTests {
    // MARK: a huge word is not echoed back whole

    func testSpecErrorShortensAHugeWord() throws {
        // A 1 MB word in a spec file came back as a 1 MB error line.
        let dir = try makeTemporaryDirectory(self)
        let huge = String(repeating: "z", count: 500_000)
        for spec in ["read in | \(huge) | stdout", "read in | verify sha256:\(huge) | stdout", "read in \(huge) | stdout"] {
            try Data(spec.utf8).write(to: URL(fileURLWithPath: dir + "/spec"))
            let outcome = try runSluiceBounded(["-f", "spec"], in: dir)
            XCTAssertEqual(outcome.status, 2, outcome.stderr)
            XCTAssertLessThan(outcome.stderr.utf8.count, 1000, "the error line echoes the word whole")
            XCTAssertTrue(outcome.stderr.contains("zzzz…"), outcome.stderr)
        }
    }
}

extension ReviewRegressionTests {
    // MARK: a NUL cuts a URL short in libcurl

    func testURLWithANulByteIsASpecError() throws {
        // libcurl read the URL up to the NUL: `fetch "file:///…/in\0.x"` fetched `in` and exited 0.
        let dir = try makeTemporaryDirectory(self)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: dir + "/in"))
        try Data("fetch \"file://\(dir)/in\0.other\" | file out".utf8).write(to: URL(fileURLWithPath: dir + "/spec"))
        let outcome = try runSluiceBounded(["-f", "spec"], in: dir)
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("NUL"), outcome.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
    }
}

extension ReviewRegressionTests {
    // MARK: a fresh run never writes into a partial file it finds

    func testFreshRunDoesNotWriteIntoAPlantedPartialFile() throws {
        // A co-user who plants PATH.sluice-part (mode 0666 in a shared directory) and keeps it
        // open could read the stream and change it after verification: the fresh run used
        // that very file and renamed it to PATH (owned by them), exit 0.
        let dir = try makeTemporaryDirectory(self)
        try Data(makeTestData(count: 100_000, seed: 3)).write(to: URL(fileURLWithPath: dir + "/in"))
        let planted = open(dir + "/out.sluice-part", O_CREAT | O_RDWR, 0o666)
        XCTAssertGreaterThanOrEqual(planted, 0)
        defer { close(planted) }
        var plantedFacts = stat()
        XCTAssertEqual(fstat(planted, &plantedFacts), 0)

        let outcome = try runSluiceBounded(["read in | file out"], in: dir)
        XCTAssertEqual(outcome.status, 0, outcome.stderr)
        var outFacts = stat()
        XCTAssertEqual(stat(dir + "/out", &outFacts), 0)
        XCTAssertNotEqual(outFacts.st_ino, plantedFacts.st_ino, "the output is the planted file")
        XCTAssertEqual(lseek(planted, 0, SEEK_END), 0, "the stream was written into the planted file")
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/out"), FileManager.default.contents(atPath: dir + "/in"))
    }
}
