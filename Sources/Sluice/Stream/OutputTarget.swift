/// What a sink leaves on disk: the pipeline locks it, keeps the checkpoint beside it,
/// refuses a run before touching anything, and removes the partial output when the run
/// fails for good or starts over. Stdout has none.
public struct OutputTarget: Sendable {
    /// The final output (`file PATH`'s PATH, `untar DIR`'s DIR).
    public let path: String
    /// Where the output grows until the whole pipeline succeeded.
    public let partialPath: String
    /// Takes the run's checkpoint path (nil: none), so a refusal can explain one left there.
    private let check: @Sendable (String?) throws -> Void
    private let discard: @Sendable () -> Void

    init(
        path: String, partialPath: String, preflight: @escaping @Sendable (_ checkpoint: String?) throws -> Void,
        discardPartial: @escaping @Sendable () -> Void
    ) {
        self.path = path
        self.partialPath = partialPath
        self.check = preflight
        self.discard = discardPartial
    }

    /// Refuses, before anything is touched, an output that cannot be written (exit 2);
    /// `checkpoint` is the run's (nil: the default beside the output, or none).
    public func preflight(checkpoint: String? = nil) throws { try check(checkpoint) }

    /// Removes the partial output: the run failed for good or starts over.
    public func discardPartial() { discard() }

    /// The checkpoint's default place: beside the output.
    public var defaultCheckpointPath: String { path + ".sluice" }
    /// The lock that keeps two runs off the same output, whatever their checkpoints.
    public var lockPath: String { path + ".sluice.lock" }
}
