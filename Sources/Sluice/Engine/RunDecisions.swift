#if canImport(Glibc)
import Glibc
#endif

/// The decisions `Pipeline.run` makes around its attempts, as pure functions of the facts
/// (table-tested in RunDecisionTests); `Pipeline.runLocked` only gathers the facts and
/// acts on the answers.

/// How a run begins, from `--restart` and what the checkpoint path holds.
enum RunStart: Equatable {
    /// From zero, nothing to clean up.
    case fresh
    case resume(Checkpoint)
    /// `--restart`: remove the checkpoint and the partial output first, and cut a stdout
    /// file back to where the abandoned run began (when that is recorded).
    case discardThenFresh(undoStdout: StdoutSinkState?)
    /// Exit 2, nothing touched.
    case refuse(SluiceError)
    /// A checkpoint that cannot be authenticated, for a sink that can start over: remove
    /// it and the partial output, say why, and run from zero.
    case distrustThenFresh(reason: String)

    /// - Parameter mismatch: why a valid checkpoint does not belong to this pipeline, or nil.
    /// - Parameter sinkCanStartOver: the sink can take back what it wrote (a file sink can;
    ///   stdout cannot, so it refuses a checkpoint it cannot trust).
    static func decide(
        restart: Bool, stored: StoredCheckpoint, sinkCanStartOver: Bool = true,
        mismatch: (Checkpoint) -> SluiceError?
    ) -> RunStart {
        switch (restart, stored) {
        case (_, .foreign(let path)):
            // Not ours: never used, and --restart does not remove it either.
            return .refuse(CheckpointStore.notACheckpoint(path))
        case (true, .valid(let checkpoint)):
            return .discardThenFresh(undoStdout: checkpoint.stages.last?.as(StdoutSinkState.self))
        case (true, .none), (true, .damaged), (true, .untrusted):
            // An untrusted checkpoint's stdout offsets are not acted on either.
            return .discardThenFresh(undoStdout: nil)
        case (false, .untrusted(let distrust)):
            guard sinkCanStartOver else {
                return .refuse(.checkpointRefused(path: distrust.path, reason: "cannot trust it: \(distrust.reason)"))
            }
            return .distrustThenFresh(reason: "cannot trust checkpoint \(distrust.path): \(distrust.reason); starting over from zero")
        case (false, .none):
            return .fresh
        case (false, .damaged(let error)):
            return .refuse(error)
        case (false, .valid(let checkpoint)):
            if let error = mismatch(checkpoint) { return .refuse(error) }
            return .resume(checkpoint)
        }
    }
}

/// How one attempt (from the checkpoint, or from zero) ended.
enum AttemptOutcome: Equatable {
    case finished(sourceBytes: UInt64)
    /// The source is no longer what the checkpoint (or the attempt's start) recorded;
    /// `duringRun`: it was as recorded when this attempt began (`SourceChanged.duringRun`).
    case sourceChanged(location: String, reason: String, duringRun: Bool = false)
    /// The partial file is shorter than the checkpoint says is durable.
    case partialTooShort(path: String, expected: UInt64)
    /// The partial output is not what the checkpoint describes (a changed partial file, or
    /// for untar the file being written).
    case partialChanged(path: String, reason: String)
    /// Any other failure; `sourceOffset` is where the source stood when it happened.
    case failed(SluiceError, sourceOffset: UInt64)
}

/// What to do after an attempt.
enum AfterAttempt: Equatable {
    case finished(sourceBytes: UInt64)
    /// Remove the checkpoint and the partial output, notify, and run again from zero.
    case startOver(reason: String)
    /// Stop with `error`; `discard` removes the checkpoint and the partial output first.
    case fail(SluiceError, discard: Bool)

    struct Facts: Equatable {
        /// The sink can take back what it wrote (a file sink can; stdout cannot).
        var sinkCanStartOver: Bool
        /// This attempt is already a start over.
        var startedOver: Bool
        /// This attempt began from a checkpoint.
        var resumed: Bool
        /// A checkpoint is on disk after the attempt.
        var checkpointKept: Bool
    }

    static func decide(_ outcome: AttemptOutcome, _ facts: Facts) -> AfterAttempt {
        switch outcome {
        case .finished(let bytes):
            return .finished(sourceBytes: bytes)
        case .sourceChanged(let location, let reason, let duringRun):
            let sinceCheckpoint = facts.resumed && !duringRun
            guard facts.sinkCanStartOver else {
                return .fail(.remoteChanged(url: location, reason: reason, duringRun: !sinceCheckpoint), discard: false)
            }
            guard !facts.startedOver else {
                return .fail(.transfer(url: location, cause: .changedAgain(reason: reason)), discard: false)
            }
            let since = sinceCheckpoint ? "since the checkpoint" : "during the transfer"
            return .startOver(reason: "\(location) changed \(since) (\(reason)); starting over from zero")
        case .partialTooShort(let path, let expected):
            guard !facts.startedOver else { return .fail(.io(path: path, operation: "resume", errno: EIO), discard: false) }
            return .startOver(reason: "\(path) is shorter than the \(Counted.bytes(expected)) the checkpoint records; starting over from zero")
        case .partialChanged(let path, let reason):
            guard !facts.startedOver else { return .fail(.io(path: path, operation: "resume", errno: EIO), discard: false) }
            return .startOver(reason: "\(path): \(reason); starting over from zero")
        case .failed(let error, let offset):
            // Proven wrong output goes; so does output no checkpoint can ever resume, and a
            // run that failed for good before its first byte leaves nothing behind. A refusal
            // touches nothing; an interruption keeps its checkpoint. Something put at one of
            // the run's names is left as it is: at the partial output's name it is not the
            // run's output, and removing it by that name would delete someone's file.
            let refused = error.exitCode == 2
            if case .obstructed = error { return .fail(error, discard: false) }
            let nothingArrived = offset == 0 && !refused && error != .cancelled
            return .fail(error, discard: !refused && (error.discardsPartialOutput || !facts.checkpointKept || nothingArrived))
        }
    }
}

/// Whether a run removes a lock file as it lets go of the lock.
enum LockFileCleanup {
    /// Every run removes its lock files (nothing is left on disk), except that a run refused
    /// with exit 2 changes nothing: it leaves a lock file it found there, e.g. after a crash.
    static func removes(failure: SluiceError?, createdByThisRun: Bool) -> Bool {
        failure?.exitCode != 2 || createdByThisRun
    }
}

extension StoredCheckpoint {
    /// A sluice checkpoint whose contents cannot be used (damaged or not authenticated).
    var isUnreadable: Bool {
        switch self {
        case .damaged, .untrusted: return true
        case .none, .valid, .foreign: return false
        }
    }
}
