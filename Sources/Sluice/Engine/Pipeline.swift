import Foundation

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
    public func run() throws -> RunReport {
        let started = Date()
        defer { control.progress.finish() }
        do {
            let report = try runLocked(started: started)
            control.progress.emit(.done(sourceBytes: report.sourceBytes, outputBytes: control.outputBytes, seconds: report.seconds))
            return report
        } catch let error as SluiceError {
            control.progress.emit(.error(error))
            throw error
        }
    }

    private func runLocked(started: Date) throws -> RunReport {
        if !(spec.source.kind?.resumable ?? false), options.checkpointPath != nil {
            throw SluiceError.usage("\(spec.source.name) cannot be resumed, so it takes no --checkpoint; read from a file or URL to make the run resumable")
        }
        try output?.preflight()
        let store = checkpointPath.map(CheckpointStore.init(path:))
        let locks = runLocks()
        var taken: [RunLock] = []
        var refusedCheckpoint = false
        defer {
            // Lock files go when no checkpoint is left to guard — and when this run made
            // them only to refuse the checkpoint (a refused run changes nothing).
            let keep = store?.exists ?? false
            for lock in taken { lock.release(removeFile: !keep || (refusedCheckpoint && lock.createdFile)) }
        }
        for lock in locks {
            try lock.acquire()
            taken.append(lock)
        }

        var checkpoint: Checkpoint?
        if let store {
            if options.restart {
                // Appending to a file on stdout: take back what the abandoned run added.
                if let old = try? store.load(), let state = old.stages.last?.as(StdoutSinkState.self) {
                    try StdoutSink.undo(state)
                }
                store.remove()
                discardPartialOutput()
            } else {
                do {
                    checkpoint = try store.load()
                    if let checkpoint { try check(checkpoint, storedAt: store.path) }
                } catch {
                    refusedCheckpoint = true
                    throw error
                }
            }
        }

        var restartReason: String?
        let resumedAt = checkpoint?.source.offset
        while true {
            do {
                let sourceBytes = try runOnce(resumingFrom: checkpoint, store: store)
                store?.remove()
                return RunReport(resumedAt: restartReason == nil ? resumedAt : nil, restartReason: restartReason,
                                 sourceBytes: sourceBytes, seconds: Date().timeIntervalSince(started))
            } catch let changed as SourceChanged {
                guard output != nil else {
                    throw SluiceError.remoteChanged(url: changed.location, reason: changed.reason)
                }
                guard restartReason == nil else {
                    throw SluiceError.transfer(url: changed.location, reason: "it changed again while starting over (\(changed.reason))")
                }
                let since = checkpoint == nil ? "during the transfer" : "since the checkpoint"
                restartReason = "\(changed.location) changed \(since) (\(changed.reason)); starting over from zero"
            } catch FileSinkError.partialTooShort(let path, let expected) {
                guard restartReason == nil else { throw SluiceError.io(path: path, operation: "resume", errno: EIO) }
                restartReason = "\(path) is shorter than the \(expected) bytes the checkpoint records; starting over from zero"
            } catch let changed as PartialOutputChanged {
                guard restartReason == nil else { throw SluiceError.io(path: changed.path, operation: "resume", errno: EIO) }
                restartReason = "\(changed.path): \(changed.reason); starting over from zero"
            } catch let error as SluiceError {
                if case .checkpointRefused = error { refusedCheckpoint = true }
                // Without a checkpoint nothing can ever resume the partial output.
                if error.discardsPartialOutput || !(store?.exists ?? false) {
                    store?.remove()
                    discardPartialOutput()
                }
                throw error
            }
            control.progress.emit(.restart(reason: restartReason!))
            store?.remove()
            discardPartialOutput()
            checkpoint = nil
        }
    }

    /// One lock beside the output file (whatever the checkpoint is called) and one beside
    /// the checkpoint: two runs may share neither.
    private func runLocks() -> [RunLock] {
        var locks: [RunLock] = []
        if let output {
            locks.append(RunLock(path: output.lockPath))
        }
        if let checkpointPath, !locks.contains(where: { $0.path == checkpointPath + ".lock" }) {
            locks.append(RunLock(path: checkpointPath + ".lock"))
        }
        return locks
    }

    /// Refuses a checkpoint that belongs to another pipeline.
    private func check(_ checkpoint: Checkpoint, storedAt path: String) throws {
        guard checkpoint.spec == spec.description else {
            throw SluiceError.checkpointRefused(path: path, reason: "it was written for a different pipeline ('\(checkpoint.spec)')")
        }
        let expected = spec.stages.dropFirst().map(\.name)
        guard checkpoint.stages.map(\.stageName) == expected, checkpoint.source.kind == spec.source.name else {
            throw SluiceError.checkpointRefused(path: path, reason: "its stages do not match the spec")
        }
        if let problem = checkpoint.inconsistency {
            throw SluiceError.checkpointRefused(path: path, reason: "its stage positions do not fit together (\(problem))")
        }
    }

    private func discardPartialOutput() {
        output?.discardPartial()
    }

    /// One pass from the checkpoint (or zero) to the end. Returns the source bytes moved.
    private func runOnce(resumingFrom checkpoint: Checkpoint?, store: CheckpointStore?) throws -> UInt64 {
        // Interval 0 writes no checkpoints; an existing one is still honoured and locked.
        let writer = options.checkpointInterval == 0 ? nil
            : store.map { CheckpointWriter(store: $0, spec: spec.description, control: control) }
        defer { writer?.stop() }
        let built: StageChain
        do {
            built = try StageChain(spec: spec, options: options, control: control, restoring: checkpoint)
        } catch let error as SluiceError {
            if case .checkpointRefused(_, let reason) = error, let store {
                throw SluiceError.checkpointRefused(path: store.path, reason: reason)
            }
            throw error
        }
        if let checkpoint { control.progress.emit(.resume(sourceOffset: checkpoint.source.offset)) }
        for note in built.notes { control.progress.emit(.notice(note)) }
        let startOffset = checkpoint?.source.offset ?? 0
        control.progress.emit(.start(spec: spec.description, total: checkpoint?.source.totalLength, resumedAt: checkpoint?.source.offset))
        var seal: (@Sendable (Cut) -> Void)?
        if let writer { seal = { cut in writer.submit(cut) } }
        let head = PipelineHead(source: built.source, next: built.first, startOffset: startOffset,
                                interval: options.checkpointInterval, control: control, seal: seal)
        do {
            // A checkpoint before the first byte: a kill before the first interval then
            // resumes at the start instead of guessing (stdout appending to a file needs it).
            try head.injectBarrier()
            try built.source.run(into: head)
            try head.finish()
        } catch {
            // A stop that came from the source side (interrupt, transfer given up) leaves
            // the stages healthy: a final barrier records exactly where they stand.
            let failure = error as? SluiceError
            if let writer, failure == .cancelled || isTransferFailure(failure),
               (try? head.injectBarrier()) != nil {
                built.close()
                try? writer.flush()
            }
            built.close()
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
