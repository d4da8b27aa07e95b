import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// Signals and the things a run can be blocked in: a read of a silent FIFO, a write to a
/// stdout nobody reads, a reader that went away, a thread that cannot start. Each test
/// asserts the outcome (exit status, message, checkpoint); the timeouts only turn a hang
/// into a failure.
final class SignalTests: XCTestCase {
    private static let hangGuard: TimeInterval = 60

    // MARK: the first signal reaches blocked reads and writes

    /// No writer ever opens the FIFO: the run waits in open or read until the signal.
    func testSIGINTStopsAReadOfAFIFONobodyWritesTo() throws {
        let dir = try makeTemporaryDirectory(self)
        XCTAssertEqual(mkfifo(dir + "/in", 0o600), 0)
        let run = try SluiceChild(["--progress", "json", "read in | file out"], in: dir)
        XCTAssertNotNil(run.waitForEvent("start", timeout: Self.hangGuard), "the run never started: \(run.stderrSoFar)")
        run.send(SIGINT)
        let outcome = run.waitForExit(timeout: Self.hangGuard)
        try expectInterrupted(outcome, checkpoint: dir + "/out.sluice")
    }

    /// A writer is connected, sent a little, and went silent: the run waits in read.
    func testSIGTERMStopsAReadOfASilentFIFO() throws {
        let dir = try makeTemporaryDirectory(self)
        XCTAssertEqual(mkfifo(dir + "/in", 0o600), 0)
        // O_RDWR does not wait for a reader, and keeps a writer on the FIFO for the whole test.
        let writer = open(dir + "/in", O_RDWR | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(writer, 0)
        defer { close(writer) }
        XCTAssertEqual(write(writer, "hello", 5), 5)
        let run = try SluiceChild(["--progress", "json", "--checkpoint-interval", "1", "read in | file out"], in: dir)
        // The five bytes went through: the run is now waiting for more.
        XCTAssertNotNil(
            run.waitForEvent("checkpoint", timeout: Self.hangGuard, where: { ($0["checkpoint_offset"] as? Int) == 5 }),
            "no checkpoint after the first bytes: \(run.stderrSoFar)")
        run.send(SIGTERM)
        let outcome = run.waitForExit(timeout: Self.hangGuard)
        try expectInterrupted(outcome, checkpoint: dir + "/out.sluice")
        XCTAssertEqual(CheckpointFacts(path: dir + "/out.sluice")?.sourceOffset, 5)
    }

    /// stdin is a pipe that stays open and silent: the run (which cannot resume) waits in
    /// read, stops on the signal and says that nothing was saved.
    func testSIGINTStopsAReadOfASilentStdin() throws {
        var input: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&input), 0)
        defer { close(input[1]) }
        let run = try StalledStdoutChild(
            ["--progress", "json", "stdin | stdout"], stdout: Self.unreadPipe(self),
            stdin: FileHandle(fileDescriptor: input[0], closeOnDealloc: true),
            hangGuard: Self.hangGuard)
        XCTAssertTrue(run.process.waitForLine(timeout: Self.hangGuard) { isEvent($0, "start") }, "the run never started")
        run.process.signal(SIGINT)
        let outcome = run.wait()
        XCTAssertFalse(outcome.timedOut, "the run did not stop: it stayed blocked in its read")
        XCTAssertEqual(outcome.status, 130)
        XCTAssertEqual(
            outcome.lines.filter { !$0.hasPrefix("{") },
            [
                "sluice: interrupted; this pipeline writes no checkpoint (stdin source, stdout without --checkpoint, or --checkpoint-interval 0), so a rerun starts from zero"
            ])
    }

    /// stdout is a pipe whose reader stopped reading (it is never read at all): the sink's
    /// write waits for room that never comes, and gunzip, on its own thread, waits for the
    /// sink's buffers.
    func testSIGINTStopsAWriteToAStdoutNobodyReads() throws {
        let dir = try makeTemporaryDirectory(self)
        try Self.makeZerosGzip(dir + "/in.gz", count: 32 << 20)
        let run = try StalledStdoutChild(
            ["--progress", "json", "--checkpoint", dir + "/ck", "read \(dir)/in.gz | gunzip | stdout"],
            stdout: Self.unreadPipe(self), hangGuard: Self.hangGuard)
        XCTAssertTrue(run.process.waitForLine(timeout: Self.hangGuard) { isEvent($0, "checkpoint") }, "no starting checkpoint")
        // 32 MiB is on its way, far more than the pipe and the relays' buffers hold.
        run.process.signal(SIGINT)
        let outcome = run.wait()
        XCTAssertFalse(outcome.timedOut, "the run did not stop: it stayed blocked in its write")
        XCTAssertEqual(outcome.status, 130, outcome.lines.joined(separator: "\n"))
        XCTAssertEqual(outcome.lines.filter { !$0.hasPrefix("{") }, ["sluice: interrupted; checkpoint saved, rerun the same command to resume"])
        XCTAssertNotNil(CheckpointFacts(path: dir + "/ck"), "the checkpoint is kept")
    }

    // MARK: a reader that went away

    /// `sluice … | head -c 100`: the run ends as cat does when its reader goes — killed by
    /// SIGPIPE, status 141 in the shell — saying nothing, with the checkpoint saved.
    func testAClosedStdoutPipeEndsQuietlyLikeSIGPIPE() throws {
        let dir = try readIntoHeadOf100Bytes(jsonProgress: false)
        XCTAssertEqual(try String(contentsOfFile: dir + "/err", encoding: .utf8), "", "nothing on stderr")
        XCTAssertNotNil(CheckpointFacts(path: dir + "/ck"), "the checkpoint is kept")
        // And the rerun resumes from it.
        let rerun = try runSluiceBounded(["--checkpoint", "ck", "read in | stdout"], in: dir, timeout: Self.hangGuard)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        XCTAssertTrue(rerun.stderr.contains("resuming"), rerun.stderr)
    }

    /// The same with `--progress json`: the last event says what really happens — exit 141,
    /// not the exit 6 an ordinary write failure would be.
    func testAClosedStdoutPipeReportsSIGPIPEInTheJSONErrorEvent() throws {
        let dir = try readIntoHeadOf100Bytes(jsonProgress: true)
        let events = try String(contentsOfFile: dir + "/err", encoding: .utf8).split(separator: "\n")
        let errors = events.filter { $0.contains("\"event\":\"error\"") }
        XCTAssertEqual(errors.count, 1, "\(events)")
        XCTAssertTrue(errors.first?.contains("\"exit_code\":141") == true, "\(errors)")
        XCTAssertEqual(events.last.map(String.init), errors.first.map(String.init), "the error event is the last line")
    }

    /// `sluice [--progress json] --checkpoint ck 'read in | stdout' 2>err | head -c 100` over
    /// 32 MiB of zeros in a new directory: checks that head got its 100 bytes and sluice died
    /// of SIGPIPE (status 141, as cat does), and returns the directory.
    private func readIntoHeadOf100Bytes(jsonProgress: Bool, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let dir = try makeTemporaryDirectory(self)
        try Self.makeZeros(dir + "/in", count: 32 << 20)
        let command =
            "cd '\(dir)' && timeout -s KILL \(Int(Self.hangGuard)) '\(SluiceBinary.path)' \(jsonProgress ? "--progress json " : "")--checkpoint ck "
            + "'read in | stdout' 2>err | head -c 100 | wc -c; echo \"status ${PIPESTATUS[0]}\""
        let result = try shell(command, capture: true)
        XCTAssertEqual(result.status, 0, file: file, line: line)
        let lines = result.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        XCTAssertEqual(lines, ["100", "status 141"], "expected death by SIGPIPE (141), got: \(result.output)", file: file, line: line)
        return dir
    }

    // MARK: the second signal

    /// Two signals before the run could act on the first (the process is stopped while
    /// they arrive): it exits at once with one line, and its lock does not block the rerun.
    func testASecondSignalExitsAtOnceWithOneLine() throws {
        let dir = try makeTemporaryDirectory(self)
        try Self.makeZeros(dir + "/in", count: 32 << 20)
        let arguments = ["--progress", "json", "--checkpoint", dir + "/ck", "read \(dir)/in | stdout"]
        let run = try StalledStdoutChild(arguments, stdout: Self.unreadPipe(self), hangGuard: Self.hangGuard)
        XCTAssertTrue(run.process.waitForLine(timeout: Self.hangGuard) { isEvent($0, "checkpoint") }, "no starting checkpoint")
        run.process.signal(SIGSTOP)
        run.process.signal(SIGINT)
        run.process.signal(SIGTERM)
        run.process.signal(SIGCONT)
        let outcome = run.wait()
        XCTAssertFalse(outcome.timedOut)
        XCTAssertEqual(outcome.status, 130)
        XCTAssertEqual(
            outcome.lines.filter { !$0.hasPrefix("{") },
            ["sluice: interrupted again: stopped at once; rerun the same command to resume from the last checkpoint saved"])
        // flock-based locks go with the process: the rerun is not refused as locked.
        let rerun = try runSluiceBounded(Array(arguments.dropFirst(2)), in: dir, timeout: Self.hangGuard)
        XCTAssertEqual(rerun.status, 0, "the rerun failed: \(rerun.stderr)")
    }

    // MARK: a thread that cannot start

    /// Under `ulimit -u 1` (as an unprivileged user when the tests run as root, since root
    /// ignores the limit) no thread can start: exit 6 with a message, not a hang.
    func testAThreadThatCannotStartIsExit6WithAMessage() throws {
        let dir = try makeTemporaryDirectory(self)
        XCTAssertEqual(chmod(dir, 0o777), 0)
        try Self.makeZeros(dir + "/in", count: 1 << 20)
        XCTAssertEqual(chmod(dir + "/in", 0o644), 0)
        let asUser = getuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : ""
        let command =
            "cd '\(dir)' && timeout -s KILL \(Int(Self.hangGuard)) \(asUser)bash -c "
            + "'ulimit -u 1; exec \"$0\" \"read in | gunzip | file out\"' '\(SluiceBinary.path)' 2>&1; echo \"status $?\""
        let result = try shell(command, capture: true)
        let lines = result.output.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.last, "status 6", result.output)
        XCTAssertTrue(lines.first?.hasPrefix("sluice: cannot start thread sluice.") ?? false, result.output)
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["in"], "nothing is left behind")
    }

    // MARK: helpers

    private func expectInterrupted(
        _ outcome: SluiceOutcome, checkpoint: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        XCTAssertFalse(outcome.timedOut, "the run did not stop: it stayed blocked", file: file, line: line)
        XCTAssertFalse(outcome.signalled, file: file, line: line)
        XCTAssertEqual(outcome.status, 130, outcome.stderr, file: file, line: line)
        XCTAssertEqual(
            outcome.messages, ["sluice: interrupted; checkpoint saved, rerun the same command to resume"],
            file: file, line: line)
        XCTAssertNotNil(CheckpointFacts(path: checkpoint), "the checkpoint is kept", file: file, line: line)
    }

    private static func makeZeros(_ path: String, count: Int) throws {
        try Data(count: count).write(to: URL(fileURLWithPath: path))
    }

    private static func makeZerosGzip(_ path: String, count: Int) throws {
        XCTAssertEqual(try shell("head -c \(count) /dev/zero | gzip -1 > '\(path)'").status, 0)
    }

    /// The write end of a pipe nobody reads; both ends close when the test ends.
    private static func unreadPipe(_ test: XCTestCase) -> Int32 {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return -1 }
        test.addTeardownBlock {
            close(fds[0])
            close(fds[1])
        }
        return fds[1]
    }

}

private func isEvent(_ line: String, _ name: String) -> Bool {
    sluiceEvent(line)?["event"] as? String == name
}

/// sluice with stdout on a descriptor the test chooses (a pipe it never reads), stderr
/// read line by line, and a hang guard that kills it.
private final class StalledStdoutChild {
    let process: StreamingProcess
    private let guardTimer: DispatchSourceTimer
    private let timedOut = LockedFlag()

    init(_ arguments: [String], stdout fd: Int32, stdin: FileHandle? = nil, hangGuard: TimeInterval) throws {
        process = try StreamingProcess(
            SluiceBinary.path, arguments, stdin: stdin,
            stdout: FileHandle(fileDescriptor: fd, closeOnDealloc: false))
        guardTimer = DispatchSource.makeTimerSource()
        guardTimer.schedule(deadline: .now() + hangGuard)
        guardTimer.setEventHandler { [process, timedOut] in
            timedOut.set()
            process.signal(SIGKILL)
        }
        guardTimer.resume()
    }

    func wait() -> (status: Int32, lines: [String], timedOut: Bool) {
        let (status, lines) = process.wait()
        guardTimer.cancel()
        return (status, lines, timedOut.isSet)
    }
}

private final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var flag = false
    func set() { lock.withLock { flag = true } }
    var isSet: Bool { lock.withLock { flag } }
}
