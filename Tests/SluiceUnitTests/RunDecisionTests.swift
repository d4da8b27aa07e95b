import Foundation
import XCTest
@testable import Sluice

/// `RunStart.decide` and `AfterAttempt.decide` by table: every row is one situation
/// `Pipeline.runLocked` can be in, and what it must do.
final class RunDecisionTests: XCTestCase {
    private static let checkpoint = Checkpoint(
        spec: "read a | file b", writtenAt: Date(timeIntervalSince1970: 0),
        source: SourceState(kind: "read", location: "a", offset: 10),
        stages: [StageState(FileSinkState(path: "b", bytesWritten: 10))])
    private static let stdoutState = StdoutSinkState(
        bytesWritten: 10, fileSize: 30, startFileSize: 20,
        file: FileIdentity(device: 1, inode: 2))
    private static let stdoutCheckpoint = Checkpoint(
        spec: "read a | stdout", writtenAt: Date(timeIntervalSince1970: 0),
        source: SourceState(kind: "read", location: "a", offset: 10),
        stages: [StageState(stdoutState)])
    private static let damaged = SluiceError.checkpointRefused(path: "c", reason: "it is damaged")
    private static let mismatch = SluiceError.checkpointRefused(path: "c", reason: "written for a different pipeline")

    func testHowARunBegins() {
        let rows: [(restart: Bool, stored: StoredCheckpoint, matches: Bool, expected: RunStart, line: UInt)] = [
            (false, .none, true, .fresh, #line),
            (false, .valid(Self.checkpoint), true, .resume(Self.checkpoint), #line),
            (false, .valid(Self.checkpoint), false, .refuse(Self.mismatch), #line),
            (false, .damaged(Self.damaged), true, .refuse(Self.damaged), #line),
            (false, .foreign(path: "c"), true, .refuse(CheckpointStore.notACheckpoint("c")), #line),
            // --restart discards what is ours, even when it does not match or is damaged…
            (true, .none, true, .discardThenFresh(undoStdout: nil), #line),
            (true, .valid(Self.checkpoint), false, .discardThenFresh(undoStdout: nil), #line),
            (true, .valid(Self.stdoutCheckpoint), true, .discardThenFresh(undoStdout: Self.stdoutState), #line),
            (true, .damaged(Self.damaged), true, .discardThenFresh(undoStdout: nil), #line),
            // …and never what is not a checkpoint.
            (true, .foreign(path: "c"), true, .refuse(CheckpointStore.notACheckpoint("c")), #line),
        ]
        for row in rows {
            let decided = RunStart.decide(restart: row.restart, stored: row.stored, mismatch: { _ in row.matches ? nil : Self.mismatch })
            XCTAssertEqual(decided, row.expected, line: row.line)
        }
    }

    /// A checkpoint that cannot be authenticated: a file sink starts over, stdout refuses,
    /// and --restart discards it without acting on anything in it.
    func testAnUntrustedCheckpoint() {
        let distrust = CheckpointDistrust(path: "c", reason: "its authentication code does not match")
        let rows: [(restart: Bool, canStartOver: Bool, expected: RunStart, line: UInt)] = [
            (false, true, .distrustThenFresh(reason: "cannot trust checkpoint c: its authentication code does not match; starting over from zero"), #line),
            (false, false, .refuse(.checkpointRefused(path: "c", reason: "cannot trust it: its authentication code does not match")), #line),
            (true, true, .discardThenFresh(undoStdout: nil), #line),
            (true, false, .discardThenFresh(undoStdout: nil), #line),
        ]
        for row in rows {
            let decided = RunStart.decide(
                restart: row.restart, stored: .untrusted(distrust), sinkCanStartOver: row.canStartOver,
                mismatch: { _ in nil })
            XCTAssertEqual(decided, row.expected, line: row.line)
        }
    }

    func testWhichLockFilesARunRemoves() {
        let rows: [(failure: SluiceError?, created: Bool, removes: Bool, line: UInt)] = [
            (nil, true, true, #line),
            (nil, false, true, #line),  // a crash's leftover goes with a good run
            (.transfer(url: "u", cause: .http(status: 404, statusText: "404 Not Found", server: "s")), false, true, #line),
            (.cancelled, false, true, #line),
            (.locked(checkpoint: "l"), true, true, #line),
            (.checkpointRefused(path: "c", reason: "r"), false, false, #line),  // a refusal changes nothing
            (.unsafePath(path: "p", reason: "r"), false, false, #line),
            (.unsafePath(path: "p", reason: "r"), true, true, #line),
        ]
        for row in rows {
            XCTAssertEqual(LockFileCleanup.removes(failure: row.failure, createdByThisRun: row.created), row.removes, line: row.line)
        }
    }

    /// A stdout run's exit 7 said "changed since the checkpoint" also for a change this run
    /// met after finding the content as recorded (an ETag changed on an extra range).
    func testAChangeDuringTheRunIsNotCalledAChangeSinceTheCheckpoint() {
        XCTAssertEqual(SluiceError.remoteChanged(url: "u", reason: "etag").description, "u changed since the checkpoint (etag)")
        XCTAssertEqual(
            SluiceError.remoteChanged(url: "u", reason: "etag", duringRun: true).description, "u changed during the transfer (etag)")
    }

    func testWhatFollowsAnAttempt() {
        typealias Facts = AfterAttempt.Facts
        let fileFresh = Facts(sinkCanStartOver: true, startedOver: false, resumed: false, checkpointKept: true)
        let fileResumed = Facts(sinkCanStartOver: true, startedOver: false, resumed: true, checkpointKept: true)
        let fileAgain = Facts(sinkCanStartOver: true, startedOver: true, resumed: false, checkpointKept: true)
        let stdout = Facts(sinkCanStartOver: false, startedOver: false, resumed: true, checkpointKept: true)
        let nothingKept = Facts(sinkCanStartOver: true, startedOver: false, resumed: false, checkpointKept: false)
        let transfer = SluiceError.transfer(url: "u", cause: .http(status: 404, statusText: "404 Not Found", server: "s"))
        let mismatch = SluiceError.checksumMismatch(expected: "a", actual: "b")
        let refused = SluiceError.checkpointRefused(path: "c", reason: "bad gzip state")
        let unsafe = SluiceError.unsafePath(path: "p", reason: "other hard links")
        let obstructed = SluiceError.obstructed(path: "p.sluice-part", reason: "it was replaced during the run")

        let rows: [(outcome: AttemptOutcome, facts: Facts, expected: AfterAttempt, line: UInt)] = [
            (.finished(sourceBytes: 5), fileFresh, .finished(sourceBytes: 5), #line),
            // The source changed: a file starts over once, stdout cannot.
            (
                .sourceChanged(location: "u", reason: "etag"), fileResumed,
                .startOver(reason: "u changed since the checkpoint (etag); starting over from zero"), #line
            ),
            (
                .sourceChanged(location: "u", reason: "etag"), fileFresh,
                .startOver(reason: "u changed during the transfer (etag); starting over from zero"), #line
            ),
            // Resumed, then changed once this run had found it as recorded (an extra range).
            (
                .sourceChanged(location: "u", reason: "etag", duringRun: true), fileResumed,
                .startOver(reason: "u changed during the transfer (etag); starting over from zero"), #line
            ),
            (
                .sourceChanged(location: "u", reason: "etag"), fileAgain,
                .fail(.transfer(url: "u", cause: .changedAgain(reason: "etag")), discard: false), #line
            ),
            (.sourceChanged(location: "u", reason: "etag"), stdout, .fail(.remoteChanged(url: "u", reason: "etag"), discard: false), #line),
            (
                .sourceChanged(location: "u", reason: "etag", duringRun: true), stdout,
                .fail(.remoteChanged(url: "u", reason: "etag", duringRun: true), discard: false), #line
            ),
            (
                .partialTooShort(path: "p", expected: 9), fileResumed,
                .startOver(reason: "p is shorter than the 9 bytes the checkpoint records; starting over from zero"), #line
            ),
            (.partialTooShort(path: "p", expected: 9), fileAgain, .fail(.io(path: "p", operation: "resume", errno: EIO), discard: false), #line),
            (
                .partialChanged(path: "p", reason: "its first 9 bytes changed"), fileResumed,
                .startOver(reason: "p: its first 9 bytes changed; starting over from zero"), #line
            ),
            (
                .partialChanged(path: "p", reason: "its first 9 bytes changed"), fileAgain,
                .fail(.io(path: "p", operation: "resume", errno: EIO), discard: false), #line
            ),
            // Failures after bytes arrived keep what a rerun resumes from…
            (.failed(transfer, sourceOffset: 100), fileFresh, .fail(transfer, discard: false), #line),
            (.failed(.cancelled, sourceOffset: 100), fileFresh, .fail(.cancelled, discard: false), #line),
            (.failed(.cancelled, sourceOffset: 0), fileFresh, .fail(.cancelled, discard: false), #line),
            // …unless the output is proven wrong, or nothing could resume it…
            (.failed(mismatch, sourceOffset: 100), fileFresh, .fail(mismatch, discard: true), #line),
            (.failed(transfer, sourceOffset: 100), nothingKept, .fail(transfer, discard: true), #line),
            // …and a failure before the first byte leaves nothing behind.
            (.failed(transfer, sourceOffset: 0), fileFresh, .fail(transfer, discard: true), #line),
            (
                .failed(.io(path: "p", operation: "write to", errno: ENOSPC), sourceOffset: 0), fileFresh,
                .fail(.io(path: "p", operation: "write to", errno: ENOSPC), discard: true), #line
            ),
            // A refusal touches nothing, whatever else holds.
            (.failed(refused, sourceOffset: 0), fileResumed, .fail(refused, discard: false), #line),
            (.failed(unsafe, sourceOffset: 0), nothingKept, .fail(unsafe, discard: false), #line),
            // Something put at a name of the run (the partial output's) is not removed by that
            // name, even when no checkpoint was written (stdin, --checkpoint-interval 0).
            (.failed(obstructed, sourceOffset: 100), nothingKept, .fail(obstructed, discard: false), #line),
            (.failed(obstructed, sourceOffset: 0), fileFresh, .fail(obstructed, discard: false), #line),
        ]
        for row in rows {
            XCTAssertEqual(AfterAttempt.decide(row.outcome, row.facts), row.expected, line: row.line)
        }
    }
}
