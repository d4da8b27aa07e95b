/// How a pipeline runs: checkpointing, transfer behaviour, engine, progress.
public struct PipelineOptions: Sendable {
    /// Where the checkpoint lives. Default: `PATH.sluice` for a file sink; none for stdout.
    public var checkpointPath: String?
    /// Source bytes between checkpoints; 0 disables checkpoints.
    public var checkpointInterval: UInt64 = 8 << 20
    /// Discard an existing checkpoint (and partial output) and start from zero.
    public var restart = false
    /// Transfer options for `fetch`.
    public var http = HTTPOptions()
    /// The inflate engine for `gunzip`.
    public var engine: InflateEngineKind = .fastest
    /// Run stages on their own threads (the default); false runs everything on the caller's.
    public var threaded = true
    /// Receives progress events, from any of the run's threads.
    public var progress: ProgressHandler?

    public init() {}
}

/// What a successful run did.
public struct RunReport: Sendable, Equatable {
    /// The source offset the run continued from (nil: it started from zero).
    public var resumedAt: UInt64?
    /// Why it started over from zero, when it had to.
    public var restartReason: String?
    public var sourceBytes: UInt64
    public var seconds: Double
}
