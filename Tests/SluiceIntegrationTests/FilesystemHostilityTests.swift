import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// The real binary against a hostile file system: links at every name it writes, FIFOs,
/// devices and sockets, aliases of its own files, concurrent runs inside a race window
/// held open by a `RaceGate`, and permanent failures that must leave nothing behind.
/// Every refusal is exit 2 with the directory exactly as it was.
final class FilesystemHostilityTests: XCTestCase {

    // MARK: fixtures

    /// A directory holding `in.bin` (300 KB of test data); returns it and the data.
    private func workspace() throws -> (dir: String, data: Data) {
        let dir = try makeTemporaryDirectory(self)
        let data = Data(makeTestData(count: 300_000, seed: 8))
        try data.write(to: URL(fileURLWithPath: dir + "/in.bin"))
        return (dir, data)
    }

    private func contents(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    private func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    /// Expects exit 2, one `sluice:` line mentioning every word of `mentions` and none of
    /// `never`, and the directory exactly as before.
    @discardableResult
    private func assertRefused(
        _ arguments: [String], in dir: String, mentions: [String], never: [String] = [],
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> String {
        let before = try DirectorySnapshot(dir)
        let outcome = try runSluiceBounded(arguments, in: dir, file: file, line: line)
        XCTAssertEqual(outcome.status, 2, "\(arguments): \(outcome.stderr)", file: file, line: line)
        XCTAssertEqual(outcome.messages.count, 1, "expected one message line, got:\n\(outcome.stderr)", file: file, line: line)
        let message = outcome.messages.last ?? ""
        for word in mentions {
            XCTAssertTrue(message.contains(word), "\(arguments): the message does not mention '\(word)': \(message)", file: file, line: line)
        }
        for word in never {
            XCTAssertFalse(message.contains(word), "\(arguments): the message mentions '\(word)': \(message)", file: file, line: line)
        }
        let after = try DirectorySnapshot(dir)
        XCTAssertTrue(after == before, "\(arguments) changed the directory: \(after.differences(from: before))", file: file, line: line)
        return message
    }

    /// Runs sluice with stdout appending to `stdoutPath` (as `>> stdoutPath` would), bounded.
    private func runAppending(
        to stdoutPath: String, _ arguments: [String], in dir: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> (status: Int32, stderr: String) {
        let fd = open(stdoutPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw FileSystemFixtureError("cannot open \(stdoutPath)") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: SluiceBinary.path)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        process.standardOutput = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        process.standardInput = FileHandle.nullDevice
        let err = Pipe()
        process.standardError = err
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        if exited.wait(timeout: .now() + 20) == .timedOut {
            process.terminate()
            XCTFail("sluice \(arguments) did not exit within 20 s", file: file, line: line)
            exited.wait()
        }
        return (process.terminationStatus, String(decoding: stderr, as: UTF8.self))
    }

    // MARK: 3 — locks without a check-then-act window

    /// Run A stops before it takes the lock; B takes it and holds it; A, released, loses:
    /// it must leave B's lock file alone, so a third run C is refused too and B finishes
    /// alone. (Before, A removed B's lock file and C ran beside B.)
    func testRunThatLosesTheLockRemovesNothingAndAThirdRunIsRefused() throws {
        let (dir, data) = try workspace()
        let spec = "read in.bin | file out"
        let beforeLock = try RaceGate("LOCK_OPEN", in: dir)
        let holding = try RaceGate("LOCKED", in: dir)
        let a = try SluiceChild([spec], in: dir, environment: beforeLock.environment)
        XCTAssertTrue(beforeLock.waitUntilReached(timeout: 20), "run A never reached the lock (no test gate in this build?)")
        let b = try SluiceChild([spec], in: dir, environment: holding.environment)
        XCTAssertTrue(holding.waitUntilReached(timeout: 20), "run B never took the lock")
        var held = stat()
        XCTAssertEqual(lstat(dir + "/out.sluice.lock", &held), 0, "B holds no lock file")

        beforeLock.release()
        let lost = a.waitForExit(timeout: 20)
        XCTAssertEqual(lost.status, 2, lost.stderr)
        XCTAssertTrue(lost.stderr.contains("another sluice run holds"), lost.stderr)
        var after = stat()
        XCTAssertEqual(lstat(dir + "/out.sluice.lock", &after), 0, "the losing run removed the winner's lock file")
        XCTAssertEqual(after.st_ino, held.st_ino, "the lock file is no longer the one B holds")

        let third = try runSluiceBounded([spec], in: dir)
        XCTAssertEqual(third.status, 2, "a third run ran beside the lock holder: \(third.stderr)")

        holding.release()
        let won = b.waitForExit(timeout: 20)
        XCTAssertEqual(won.status, 0, won.stderr)
        XCTAssertEqual(contents(dir + "/out"), data)
        XCTAssertEqual(try DirectorySnapshot(dir).names.filter { !$0.hasPrefix("gate-") }, ["in.bin", "out"])
    }

    /// Run A opens the lock file and stops before `flock`; B runs to the end (and removes
    /// that file); C creates a new lock file and holds it. A then locks the removed file:
    /// it must notice the name leads elsewhere, retry, and be refused by C's lock.
    func testLockOnAFileRemovedBeforeFlockIsNotTrusted() throws {
        let (dir, data) = try workspace()
        let spec = "read in.bin | file out"
        let beforeFlock = try RaceGate("LOCK_FLOCK", in: dir)
        let holding = try RaceGate("LOCKED", in: dir)
        let a = try SluiceChild([spec], in: dir, environment: beforeFlock.environment)
        XCTAssertTrue(beforeFlock.waitUntilReached(timeout: 20), "run A never opened the lock file (no test gate in this build?)")

        let b = try runSluiceBounded([spec], in: dir)
        XCTAssertEqual(b.status, 0, b.stderr)
        XCTAssertFalse(exists(dir + "/out.sluice.lock"), "B left its lock file")
        let c = try SluiceChild([spec], in: dir, environment: holding.environment)
        XCTAssertTrue(holding.waitUntilReached(timeout: 20), "run C never took the lock")

        beforeFlock.release()
        let lost = a.waitForExit(timeout: 20)
        XCTAssertEqual(lost.status, 2, "A ran beside C: \(lost.stderr)")
        holding.release()
        let won = c.waitForExit(timeout: 20)
        XCTAssertEqual(won.status, 0, won.stderr)
        XCTAssertEqual(contents(dir + "/out"), data)
        XCTAssertFalse(exists(dir + "/out.sluice.lock"))
    }

    // MARK: 19 — a crash leaves no lock that blocks

    /// kill -9 while holding the lock: the lock file stays, the lock does not; the next
    /// run goes ahead and cleans up.
    func testLockFileLeftByACrashDoesNotBlockTheNextRun() throws {
        let (dir, data) = try workspace()
        let spec = "read in.bin | file out"
        let holding = try RaceGate("LOCKED", in: dir)
        let crashed = try SluiceChild([spec], in: dir, environment: holding.environment)
        XCTAssertTrue(holding.waitUntilReached(timeout: 20), "the run never took the lock")
        crashed.send(SIGKILL)
        XCTAssertTrue(crashed.waitForExit(timeout: 20).signalled)
        holding.release()
        XCTAssertTrue(exists(dir + "/out.sluice.lock"), "expected the crash to leave its lock file")
        // Even one nobody may write to.
        chmod(dir + "/out.sluice.lock", 0o400)

        let next = try runSluiceBounded([spec], in: dir)
        XCTAssertEqual(next.status, 0, next.stderr)
        XCTAssertEqual(contents(dir + "/out"), data)
        XCTAssertEqual(try DirectorySnapshot(dir).names.filter { !$0.hasPrefix("gate-") }, ["in.bin", "out"])
    }

    // MARK: 5 — a checkpoint that is one of the run's own files, under any name

    /// The default checkpoint under another spelling shares the output's lock: one lock,
    /// not a run refused by itself.
    func testDefaultCheckpointUnderAnotherSpellingIsOneLock() throws {
        let (dir, data) = try workspace()
        try FileManager.default.createDirectory(atPath: dir + "/sub", withIntermediateDirectories: false)
        for checkpoint in ["./out.sluice", "sub/../out.sluice", dir + "/out.sluice"] {
            let outcome = try runSluiceBounded(["--checkpoint", checkpoint, "read in.bin | file out"], in: dir)
            XCTAssertEqual(outcome.status, 0, "\(checkpoint): \(outcome.stderr)")
            XCTAssertEqual(contents(dir + "/out"), data)
            XCTAssertEqual(try DirectorySnapshot(dir).names, ["in.bin", "out", "sub"])
            unlink(dir + "/out")
        }
    }

    func testCheckpointThatAliasesAnotherOfTheRunsFilesIsRefused() throws {
        let (dir, _) = try workspace()
        try FileManager.default.createDirectory(atPath: dir + "/sub", withIntermediateDirectories: false)
        try HostileFile.symlink(at: dir + "/here", to: ".")
        let spec = "read in.bin | file out"
        for checkpoint in [
            "out", "./out", "sub/../out", "here/out", dir + "/out",
            "out.sluice-part", "./out.sluice-part", "here/out.sluice-part",
            "out.sluice.lock", "sub/../out.sluice.lock", "in.bin", "./in.bin",
        ] {
            try assertRefused(["--checkpoint", checkpoint, spec], in: dir, mentions: ["refusing", "same file"], never: ["--restart"])
        }
        // The checkpoint's temporary file would be the output.
        try assertRefused(["--checkpoint", "c", "read in.bin | file c.tmp"], in: dir, mentions: ["same file"])
        // …or its lock file.
        try assertRefused(["--checkpoint", "c", "read in.bin | file c.lock"], in: dir, mentions: ["same file"])

        // Aliases by device and inode: a hard link to the existing output.
        try Data("an older output\n".utf8).write(to: URL(fileURLWithPath: dir + "/out"))
        XCTAssertEqual(link(dir + "/out", dir + "/hardlink"), 0)
        try assertRefused(["--checkpoint", "hardlink", spec], in: dir, mentions: ["same file"])
    }

    /// `stdout >> c` with `--checkpoint c`: the checkpoint would be written into the output.
    func testStdoutThatIsTheCheckpointIsRefused() throws {
        let (dir, _) = try workspace()
        let result = try runAppending(to: dir + "/c", ["--checkpoint", "c", "read in.bin | stdout"], in: dir)
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("stdout"), result.stderr)
        XCTAssertEqual(contents(dir + "/c"), Data(), "the refused run wrote into stdout")
    }

    // MARK: 7 — never through a link at a name sluice writes

    func testLinkAtEveryNameSluiceWritesIsRefusedAndNeverFollowed() throws {
        let (dir, _) = try workspace()
        let victim = dir + "/victim"
        let original = Data("someone else's file\n".utf8)
        let cases: [(names: [String], arguments: [String])] = [
            (["out.sluice-part", "out.sluice.tmp", "out.sluice.lock", "out.sluice"], ["read in.bin | file out"]),
            (["c.tmp", "c.lock", "c"], ["--checkpoint", "c", "read in.bin | file out"]),
            (["c.tmp", "c.lock"], ["--checkpoint", "c", "read in.bin | stdout"]),
        ]
        for (names, arguments) in cases {
            for name in names {
                for target in [victim, dir + "/not-there-yet"] {
                    try original.write(to: URL(fileURLWithPath: victim))
                    chmod(victim, 0o644)
                    try HostileFile.symlink(at: dir + "/" + name, to: target)
                    try assertRefused(arguments, in: dir, mentions: ["refusing", name, "link"], never: ["--restart"])
                    XCTAssertEqual(contents(victim), original, "\(name) → \(target): the link was followed")
                    var st = stat()
                    XCTAssertEqual(stat(victim, &st), 0)
                    XCTAssertEqual(st.st_mode & 0o777, 0o644, "\(name) → \(target): the link target was chmod'ed")
                    XCTAssertFalse(exists(dir + "/not-there-yet"), "\(name) → \(target): a file was created through the link")
                    unlink(dir + "/" + name)
                }
            }
        }
    }

    // MARK: 8 — an output that exists and is not a regular file

    /// README: sluice "never deletes a file that is not its own". A checkpoint reaches
    /// `C.tmp` only whole (written nameless, linked there once fsync'd), so an empty file or
    /// a few bytes there are someone's: refused and left, like any other foreign file.
    func testAnEmptyOrCutShortFileAtTheCheckpointTemporaryIsLeftAlone() throws {
        let (dir, _) = try workspace()
        for (name, arguments) in [
            ("out.sluice.tmp", ["read in.bin | file out"]), ("c.tmp", ["--checkpoint", "c", "read in.bin | file out"]),
        ] {
            for content in [Data(), Data("{\"mac\":\"hm".utf8)] {
                try content.write(to: URL(fileURLWithPath: dir + "/" + name))
                try assertRefused(arguments, in: dir, mentions: ["refusing", name, "sluice leaves it"], never: ["--restart"])
                XCTAssertEqual(contents(dir + "/" + name), content, "\(name) was changed")
                unlink(dir + "/" + name)
            }
        }
        // With the name free, a run's checkpoints pass through it and leave nothing there.
        let run = try runSluiceBounded(["--checkpoint-interval", "64KiB", "read in.bin | file out"], in: dir)
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertFalse(exists(dir + "/out.sluice.tmp"))
        XCTAssertFalse(exists(dir + "/out.sluice"))
    }

    func testOutputThatIsNotARegularFileIsRefused() throws {
        let (dir, _) = try workspace()
        try HostileFile.fifo(at: dir + "/fifo")
        try HostileFile.nullDevice(at: dir + "/null")
        try HostileFile.socket(at: dir + "/socket", test: self)
        try FileManager.default.createDirectory(atPath: dir + "/directory", withIntermediateDirectories: false)
        try HostileFile.symlink(at: dir + "/link-to-fifo", to: "fifo")
        try HostileFile.symlink(at: dir + "/link-to-null", to: "null")
        try HostileFile.symlink(at: dir + "/link-to-directory", to: "directory")
        for output in ["fifo", "null", "socket", "directory", "link-to-fifo", "link-to-null", "link-to-directory"] {
            for spec in ["read in.bin | file \(output)", "stdin | file \(output)"] {
                try assertRefused([spec], in: dir, mentions: ["refusing", output])
            }
        }
    }

    // MARK: 9 — --restart removes only a sluice checkpoint

    func testRestartRemovesOnlyASluiceCheckpointAndNoMessageAdvisesRemovingAnythingElse() throws {
        let (dir, data) = try workspace()
        for notACheckpoint in ["my notes\n", "", "{\"format\": \"something else\"}", "[1, 2, 3]"] {
            for (checkpoint, spec) in [("out.sluice", "read in.bin | file out"), ("notes", "read in.bin | stdout")] {
                try Data(notACheckpoint.utf8).write(to: URL(fileURLWithPath: dir + "/" + checkpoint))
                let arguments = checkpoint == "notes" ? ["--checkpoint", "notes", spec] : [spec]
                try assertRefused(arguments, in: dir, mentions: ["not a sluice checkpoint", checkpoint], never: ["--restart"])
                try assertRefused(["--restart"] + arguments, in: dir, mentions: ["not a sluice checkpoint", checkpoint], never: ["--restart"])
                XCTAssertEqual(contents(dir + "/" + checkpoint), Data(notACheckpoint.utf8))
                unlink(dir + "/" + checkpoint)
            }
        }
        // A damaged sluice checkpoint is one: refused with the --restart advice, then removed by it.
        try Data("{\"format\": \"sluice-checkpoint\", \"version\": 1, \"spec\": 42}".utf8)
            .write(to: URL(fileURLWithPath: dir + "/out.sluice"))
        try assertRefused(["read in.bin | file out"], in: dir, mentions: ["out.sluice", "--restart"])
        let restarted = try runSluiceBounded(["--restart", "read in.bin | file out"], in: dir)
        XCTAssertEqual(restarted.status, 0, restarted.stderr)
        XCTAssertEqual(contents(dir + "/out"), data)
        XCTAssertFalse(exists(dir + "/out.sluice"))
    }

    // MARK: 10 — a stdout resume or restart cuts back only the file it wrote

    func testStdoutResumeAndRestartCutBackOnlyTheRecordedFile() throws {
        let (dir, data) = try workspace()
        let server = try FaultServer(body: [UInt8](data), fault: .init(dropAfterBodyBytes: 100_000))
        let arguments = ["--retries", "0", "--checkpoint", "c", "fetch \(server.url()) | stdout"]
        let logPrefix = Data("earlier lines of the log\n".utf8)
        try logPrefix.write(to: URL(fileURLWithPath: dir + "/log"))
        let failed = try runAppending(to: dir + "/log", arguments, in: dir)
        XCTAssertEqual(failed.status, 3, failed.stderr)
        XCTAssertTrue(exists(dir + "/c"), "no checkpoint after a transfer that failed mid-way: \(failed.stderr)")
        server.setFault(.init())

        // Another file on stdout, longer than the checkpoint records: never cut back.
        let important = Data(makeTestData(count: 200_000, seed: 3))
        try important.write(to: URL(fileURLWithPath: dir + "/important"))
        for extra in [[], ["--restart"]] {
            let refused = try runAppending(to: dir + "/important", extra + arguments, in: dir)
            XCTAssertEqual(refused.status, 2, "\(extra): \(refused.stderr)")
            XCTAssertTrue(refused.stderr.contains("not the file the checkpoint recorded"), refused.stderr)
            XCTAssertEqual(contents(dir + "/important"), important, "\(extra): another file on stdout was changed")
            XCTAssertTrue(exists(dir + "/c"), "\(extra): the refusal removed the checkpoint")
        }

        // The recorded file resumes exactly.
        let resumed = try runAppending(to: dir + "/log", arguments, in: dir)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(contents(dir + "/log"), logPrefix + data)
    }

    // MARK: 13 — a FIFO at the checkpoint path does not block

    func testFIFOAtTheCheckpointPathBlocksNeitherARunNorInspect() throws {
        let (dir, _) = try workspace()
        try HostileFile.fifo(at: dir + "/out.sluice")
        try assertRefused(["read in.bin | file out"], in: dir, mentions: ["out.sluice", "FIFO"], never: ["--restart"])
        try assertRefused(["--restart", "read in.bin | file out"], in: dir, mentions: ["out.sluice", "FIFO"])
        try assertRefused(["inspect", "out.sluice"], in: dir, mentions: ["out.sluice", "FIFO"])
        try HostileFile.fifo(at: dir + "/c")
        try assertRefused(["--checkpoint", "c", "read in.bin | stdout"], in: dir, mentions: ["FIFO"])
        try HostileFile.symlink(at: dir + "/link", to: "c")
        try assertRefused(["inspect", "link"], in: dir, mentions: ["link"])
    }

    // MARK: 19 — a permanent failure before the first byte leaves nothing behind

    func testPermanentFailureBeforeTheFirstByteLeavesNothing() throws {
        let dir = try makeTemporaryDirectory(self)
        for status in [404, 401, 403] {
            let server = try FaultServer(body: [UInt8](repeating: 7, count: 1000), fault: .init(status: status))
            for arguments in [
                ["--retries", "0", "fetch \(server.url()) | file out"],
                ["--retries", "0", "--checkpoint", "c", "fetch \(server.url()) | stdout"],
            ] {
                let outcome = try runSluiceBounded(arguments, in: dir)
                XCTAssertEqual(outcome.status, 3, outcome.stderr)
                XCTAssertEqual(try DirectorySnapshot(dir).names, [], "HTTP \(status), \(arguments) left files behind")
                XCTAssertFalse(outcome.stderr.contains("resume"), "nothing to resume, yet: \(outcome.stderr)")
                XCTAssertTrue(outcome.stderr.contains("nothing was left"), outcome.stderr)
            }
        }
        // Connection refused.
        let refused = try runSluiceBounded(["--retries", "0", "fetch http://127.0.0.1:1/x | file out"], in: dir)
        XCTAssertEqual(refused.status, 3, refused.stderr)
        XCTAssertEqual(try DirectorySnapshot(dir).names, [])
        XCTAssertFalse(refused.stderr.contains("resume"), refused.stderr)
        // A lock that cannot be created (its directory is missing): the output's lock goes too.
        let noLock = try runSluiceBounded(["--checkpoint", "missing/c", "fetch http://127.0.0.1:1/x | file out"], in: dir)
        XCTAssertEqual(noLock.status, 6, noLock.stderr)
        XCTAssertTrue(noLock.stderr.contains("missing/c.lock"), noLock.stderr)
        XCTAssertFalse(noLock.stderr.contains("resume"), noLock.stderr)
        XCTAssertEqual(try DirectorySnapshot(dir).names, [])
    }

    /// A read-only directory for the output, or for the checkpoint alone: exit 6, nothing
    /// left anywhere (the output's lock, taken first, goes too), and no "rerun to resume".
    func testReadOnlyDirectoryLeavesNothingAndSaysWhatToFix() throws {
        let (dir, _) = try workspace()
        try mountReadOnlyDirectory(at: dir + "/ro", test: self)
        for arguments in [["read in.bin | file ro/out"], ["--checkpoint", "ro/c", "read in.bin | file out"]] {
            let outcome = try runSluiceBounded(arguments, in: dir)
            XCTAssertEqual(outcome.status, 6, "\(arguments): \(outcome.stderr)")
            XCTAssertTrue(outcome.stderr.contains("Read-only file system"), outcome.stderr)
            XCTAssertFalse(outcome.stderr.contains("resume"), outcome.stderr)
            XCTAssertEqual(try DirectorySnapshot(dir).names, ["in.bin", "ro"], "\(arguments) left files behind")
        }
    }

    /// A transfer that fails after bytes arrived keeps what a rerun resumes from — and
    /// no lock file.
    func testFailureAfterTheFirstByteKeepsTheCheckpointButNoLockFile() throws {
        let (dir, data) = try workspace()
        let server = try FaultServer(body: [UInt8](data), fault: .init(dropAfterBodyBytes: 100_000))
        let arguments = ["--retries", "0", "fetch \(server.url()) | file out"]
        let failed = try runSluiceBounded(arguments, in: dir)
        XCTAssertEqual(failed.status, 3, failed.stderr)
        XCTAssertTrue(failed.stderr.contains("resume"), failed.stderr)
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["in.bin", "out.sluice", "out.sluice-part"])
        server.setFault(.init())
        let resumed = try runSluiceBounded(arguments, in: dir)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(contents(dir + "/out"), data)
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["in.bin", "out"])
    }
}
