/// Thrown by a stage handed a saved state it cannot continue from: malformed, inconsistent
/// with itself or with what is on disk, or over a limit. The stage does not know where the
/// state came from; the pipeline, which read it from a checkpoint, reports it as
/// `SluiceError.checkpointRefused` with that checkpoint's path.
public struct StateRejected: Error, Sendable, Equatable, CustomStringConvertible {
    /// Why, phrased about the checkpoint ("its unxz state is malformed: …").
    public var reason: String

    public init(_ reason: String) { self.reason = reason }

    public var description: String { reason }
}
