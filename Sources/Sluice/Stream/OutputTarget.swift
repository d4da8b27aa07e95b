/// What a sink leaves on disk: the pipeline locks it, keeps the checkpoint beside it,
/// refuses a run before touching anything, and removes the partial output when the run
/// fails for good or starts over. Stdout has none.
public struct OutputTarget: Sendable {
    /// The final output (`file PATH`'s PATH, `untar DIR`'s DIR).
    public let path: String
    /// Where the output grows until the whole pipeline succeeded.
    public let partialPath: String
    private let check: @Sendable () throws -> Void
    private let discard: @Sendable () -> Void

    init(
        path: String, partialPath: String, preflight: @escaping @Sendable () throws -> Void,
        discardPartial: @escaping @Sendable () -> Void
    ) {
        self.path = path
        self.partialPath = partialPath
        self.check = preflight
        self.discard = discardPartial
    }

    /// Refuses, before anything is touched, an output that cannot be written (exit 2).
    public func preflight() throws { try check() }

    /// Removes the partial output: the run failed for good or starts over.
    public func discardPartial() { discard() }

    /// The checkpoint's default place: beside the output.
    public var defaultCheckpointPath: String { path + ".sluice" }
    /// The lock that keeps two runs off the same output, whatever their checkpoints.
    public var lockPath: String { path + ".sluice.lock" }
}
