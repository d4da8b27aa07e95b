#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Runs a pipeline spec: builds the stages (restored from a checkpoint when one exists),
/// connects them with relays, pushes the source through, and leaves the disk in exactly
/// the state the README's exit-status table promises for each outcome.
///
///     let pipeline = try Pipeline("read data.gz | gunzip | file data")
///     try pipeline.run()
public final class Pipeline: Sendable {
    public let spec: PipelineSpec
    public let options: PipelineOptions
    /// Shared with every thread of the run; `cancel()` goes through it.
    public let control: RunControl

    /// The run's progress events as an async sequence (besides `options.progress`), ending
    /// when the run ends. Keeps the newest 1,024 events when nobody reads it.
    public let events: AsyncStream<ProgressEvent>

    public init(spec: PipelineSpec, options: PipelineOptions = PipelineOptions()) {
        self.spec = spec
        self.options = options
        let (events, continuation) = AsyncStream.makeStream(of: ProgressEvent.self, bufferingPolicy: .bufferingNewest(1024))
        self.events = events
        self.control = RunControl(progress: ProgressReporter(handler: options.progress, stream: continuation))
    }

    /// Parses `text` (see `PipelineSpec`) and prepares a run.
    public convenience init(_ text: String, options: PipelineOptions = PipelineOptions()) throws(SpecError) {
        self.init(spec: try PipelineSpec(parsing: text), options: options)
    }

    /// Stops a running pipeline from any thread: it saves a checkpoint where it stands
    /// and `run()` throws `SluiceError.cancelled`.
    public func cancel() {
        control.cancel()
    }

    /// The checkpoint this run uses, or nil when it cannot resume (stdin, stdout without
    /// an explicit checkpoint, or checkpoints disabled).
    public var checkpointPath: String? {
        guard spec.source.kind?.resumable ?? false else { return nil }
        return options.checkpointPath ?? output?.defaultCheckpointPath
    }

    /// What the sink leaves on disk (nil for stdout).
    public var output: OutputTarget? { spec.sink.kind?.output(spec.sink) }

    /// Whether an interruption leaves something to resume from.
    public var writesCheckpoints: Bool {
        checkpointPath != nil && options.checkpointInterval > 0
    }

    /// Runs to the end. Throws `SluiceError` (or `SpecError` wrapped in it).
    @discardableResult
    public func run() throws(SluiceError) -> RunReport {
        let started = Date()
        defer { control.progress.finish() }
        do {
            let report = try runLocked(started: started)
            control.progress.emit(.done(sourceBytes: report.sourceBytes, outputBytes: control.outputBytes, seconds: report.seconds))
            return report
        } catch {
            let failure = error as? SluiceError ?? .unexpected(String(describing: error))
            control.progress.emit(.error(failure))
            throw failure
        }
    }

    /// Checks every name before touching any (the sink's `OutputTarget.preflight`, then
    /// `RunPaths`), then runs holding the locks.
    private func runLocked(started: Date) throws -> RunReport {
        // "" would make the checkpoint's temporary and lock files `.tmp` and `.lock` in
        // the working directory: names the user never gave, which the run would delete.
        if options.checkpointPath?.isEmpty == true {
            throw SluiceError.usage("--checkpoint needs a file path, not an empty string")
        }
        if !(spec.source.kind?.resumable ?? false), options.checkpointPath != nil {
            throw SluiceError.usage("\(spec.source.name) cannot be resumed, so it takes no --checkpoint; read from a file or URL to make the run resumable")
        }
        try output?.preflight(checkpoint: checkpointPath)
        if let problem = runPaths().problem() { throw problem }
        let locks = runLocks()
        do {
            for lock in locks { try lock.acquire() }
            DebugGate.pass("LOCKED")
            let report = try runHoldingLocks(started: started)
            for lock in locks { lock.release(removeFile: LockFileCleanup.removes(failure: nil, createdByThisRun: lock.createdFile)) }
            return report
        } catch {
            let failure = error as? SluiceError ?? .io(path: "(run)", operation: "run", errno: EIO)
            for lock in locks { lock.release(removeFile: LockFileCleanup.removes(failure: failure, createdByThisRun: lock.createdFile)) }
            throw error
        }
    }

    /// Decides how to begin (`RunStart`), then runs attempts until `AfterAttempt` says
    /// stop; the decisions are pure functions, this only gathers facts and acts.
    private func runHoldingLocks(started: Date) throws -> RunReport {
        let store = checkpointPath.map { CheckpointStore(path: $0) }
        var checkpoint: Checkpoint?
        var restartReason: String?
        let stored = try store?.read() ?? .none
        switch RunStart.decide(
            restart: options.restart, stored: stored, sinkCanStartOver: output != nil,
            mismatch: { self.mismatch($0, storedAt: store?.path ?? "") })
        {
        case .fresh: break
        case .resume(let saved):
            checkpoint = saved
            // Killed between publishing its output and removing its checkpoint: resume on
            // what was published rather than start over (PublishedOutput).
            if let output, let state = saved.stages.last?.as(FileSinkState.self),
                let notice = try PublishedOutput.reopen(state, output: output)
            {
                control.progress.emit(.notice(notice))
            }
        case .refuse(let error): throw error
        case .discardThenFresh(let undoStdout):
            // Appending to a file on stdout: take back what the abandoned run added.
            if let undoStdout, output == nil { try StdoutSink.undo(undoStdout) }
            if undoStdout == nil, output == nil, stored.isUnreadable, let size = POSIX.fileSize(STDOUT_FILENO), size > 0,
                POSIX.isRegularFile(STDOUT_FILENO)
            {
                control.progress.emit(
                    .notice(
                        "the checkpoint \(store?.path ?? "") could not be read, so what the abandoned run appended to the file on stdout cannot be told apart and stays in it"
                    ))
            }
            store?.remove()
            discardPartialOutput()
        case .distrustThenFresh(let reason):
            restartReason = reason
            control.progress.emit(.restart(reason: reason))
            store?.remove()
            discardPartialOutput()
        }

        let resumedAt = checkpoint?.source.offset
        var startedOver = false
        while true {
            let outcome = runOnce(resumingFrom: checkpoint, store: store)
            let facts = AfterAttempt.Facts(
                sinkCanStartOver: output != nil, startedOver: startedOver,
                resumed: checkpoint != nil, checkpointKept: store?.exists ?? false)
            switch AfterAttempt.decide(outcome, facts) {
            case .finished(let sourceBytes):
                DebugGate.pass("PUBLISHED")  // lets a test kill a run between its rename and this removal
                store?.remove()
                return RunReport(
                    resumedAt: restartReason == nil ? resumedAt : nil, restartReason: restartReason,
                    sourceBytes: sourceBytes, seconds: Date().timeIntervalSince(started))
            case .fail(let error, let discard):
                if discard {
                    store?.remove()
                    discardPartialOutput()
                }
                throw error
            case .startOver(let reason):
                restartReason = reason
                startedOver = true
                control.progress.emit(.restart(reason: reason))
                store?.remove()
                discardPartialOutput()
                checkpoint = nil
            }
        }
    }

    /// The names this run reads and writes, for the checks made before anything is touched.
    private func runPaths() -> RunPaths {
        let stdout = output == nil && spec.sink.name == "stdout" ? POSIX.fstatFacts(STDOUT_FILENO) : nil
        return RunPaths(output: output, checkpoint: checkpointPath, input: spec.source.kind?.input(spec.source), stdout: stdout)
    }

    /// One lock beside the output file (whatever the checkpoint is called) and one beside
    /// the checkpoint: two runs may share neither.
    private func runLocks() -> [RunLock] {
        var locks: [RunLock] = []
        if let output {
            locks.append(RunLock(path: output.lockPath))
        }
        // One lock file under two spellings (`--checkpoint ./out.sluice`) is one lock: taking
        // it twice would refuse the run as its own rival.
        if let checkpointPath,
            !locks.contains(where: {
                RunPaths.canonicalName($0.path) == RunPaths.canonicalName(checkpointPath + ".lock")
            })
        {
            locks.append(RunLock(path: checkpointPath + ".lock"))
        }
        return locks
    }

    /// Why a checkpoint belongs to another pipeline (or cannot be one), or nil.
    private func mismatch(_ checkpoint: Checkpoint, storedAt path: String) -> SluiceError? {
        // Checkpoints store the spec with URL secrets redacted (older ones stored it whole).
        guard checkpoint.spec == spec.checkpointIdentity else {
            let shown = (try? PipelineSpec(parsing: checkpoint.spec))?.redactedDescription ?? "an unreadable spec"
            return .checkpointRefused(path: path, reason: "it was written for a different pipeline ('\(DisplayText.escaped(shown))')")
        }
        let expected = spec.stages.dropFirst().map(\.name)
        guard checkpoint.stages.map(\.stageName) == expected, checkpoint.source.kind == spec.source.name else {
            return .checkpointRefused(path: path, reason: "its stages do not match the spec")
        }
        if let problem = checkpoint.inconsistency {
            return .checkpointRefused(path: path, reason: "its stage positions do not fit together (\(problem))")
        }
        return nil
    }

    private func discardPartialOutput() {
        output?.discardPartial()
    }

    /// One pass from the checkpoint (or zero) to the end, and how it ended.
    private func runOnce(resumingFrom checkpoint: Checkpoint?, store: CheckpointStore?) -> AttemptOutcome {
        var reached = checkpoint?.source.offset ?? 0
        do {
            return .finished(sourceBytes: try attempt(resumingFrom: checkpoint, store: store, reached: &reached))
        } catch let changed as SourceChanged {
            return .sourceChanged(location: changed.location, reason: changed.reason, duringRun: changed.duringRun)
        } catch FileSinkError.partialTooShort(let path, let expected) {
            return .partialTooShort(path: path, expected: expected)
        } catch FileSinkError.partialMissing(let path, let expected) {
            return .partialChanged(path: path, reason: "it is missing, though the checkpoint records \(Counted.bytes(expected)) written to it")
        } catch FileSinkError.partialChanged(let path, let bytes) {
            return .partialChanged(path: path, reason: "its first \(Counted.bytes(bytes)) changed since the checkpoint (their CRC-64 differs)")
        } catch let changed as PartialOutputChanged {
            return .partialChanged(path: changed.path, reason: changed.reason)
        } catch let error as SluiceError {
            return .failed(error, sourceOffset: reached)
        } catch {
            // As `run()` and the relays name it: a failure sluice has no name for (exit 1).
            return .failed(.unexpected(String(describing: error)), sourceOffset: reached)
        }
    }

    /// Runs the stages; `reached` follows the source offset, so a failure says where it stood.
    private func attempt(resumingFrom checkpoint: Checkpoint?, store: CheckpointStore?, reached: inout UInt64) throws -> UInt64 {
        // Interval 0 writes no checkpoints; an existing one is still honoured and locked.
        let writer =
            options.checkpointInterval == 0
            ? nil
            : try store.map { try CheckpointWriter(store: $0, spec: spec.checkpointIdentity, control: control) }
        defer { writer?.stop() }
        let built: StageChain
        do {
            built = try StageChain(spec: spec, options: options, control: control, restoring: checkpoint)
        } catch let rejected as StateRejected {
            // The one place that knows which checkpoint the states came from.
            throw SluiceError.checkpointRefused(path: store?.path ?? "(no checkpoint)", reason: rejected.reason)
        }
        if let checkpoint { control.progress.emit(.resume(sourceOffset: checkpoint.source.offset)) }
        for note in built.notes { control.progress.emit(.notice(note)) }
        let startOffset = checkpoint?.source.offset ?? 0
        control.progress.emit(.start(spec: spec.redactedDescription, total: checkpoint?.source.totalLength, resumedAt: checkpoint?.source.offset))
        var seal: (@Sendable (Cut) throws -> Void)?
        if let writer {
            // stdout cannot take back bytes a kill leaves with no checkpoint on disk (a rerun
            // would append the whole stream after them): on a fresh run its sink waits until
            // the cut before the first byte is stored, and stops if it cannot be (a full
            // disk): no byte goes out. Later cuts are stored behind the stream.
            let firstIsStoredFirst = checkpoint == nil && output == nil
            seal = { cut in
                writer.submit(cut)
                if firstIsStoredFirst && cut.source.offset == 0 { try writer.flush() }
            }
        }
        let pacing = CheckpointPacing(
            base: options.checkpointInterval,
            chainNsPerSourceByte: ThreadPlan.costs(spec: spec, options: options).reduce(0, +))
        let head = PipelineHead(
            source: built.source, next: built.first, startOffset: startOffset, pacing: pacing,
            appendix: { writer?.appendix ?? .none }, control: control, seal: seal, spillBeside: writer == nil ? nil : store?.path)
        do {
            // A checkpoint before the first byte: a kill before the first interval then
            // resumes at the start instead of guessing (stdout appending to a file needs it).
            try head.injectBarrier()
            try built.source.run(into: head)
            DebugGate.pass("SOURCE_END")  // lets a kill loop hold a run before it can complete
            try head.finish()
        } catch {
            // A stop that came from the source side (interrupt, transfer given up) leaves
            // the stages healthy: a final barrier records exactly where they stand.
            let failure = error as? SluiceError
            if failure == .cancelled || isTransferFailure(failure) { try? head.injectBarrier() }
            built.close()
            // Cuts already sealed describe bytes the sink has: store them whatever ended the
            // run (stdout's reader going away too), as a kill at this moment would have.
            try? writer?.flush()
            reached = head.offset
            throw error
        }
        built.close()
        return head.offset
    }

    private func isTransferFailure(_ error: SluiceError?) -> Bool {
        if case .transfer = error { return true }
        return false
    }
}
