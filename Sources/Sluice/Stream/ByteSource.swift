/// The start of a pipeline: pushes its bytes into a sink.
///
/// A source is created already positioned (at zero, or at a checkpoint's offset after
/// checking that the data there is still the same) and pushes bytes from there to the
/// end of the stream. Retrying a transient failure happens inside `run`, continuing at
/// the current offset, so the stages downstream never notice.
public protocol ByteSource: AnyObject {
    /// Pushes the stream into `sink` until its end. Does not call `sink.finish()`.
    func run(into sink: ByteSink) throws

    /// The source's identity and validators, as a checkpoint records them; the caller
    /// fills in the offset it counted.
    func state(at offset: UInt64) -> SourceState

    /// Things the user should know that are not failures (a skipped header, --insecure).
    var notices: [String] { get }
}

extension ByteSource {
    public var notices: [String] { [] }
}

/// A resumed source found that the data behind it is no longer what the checkpoint
/// recorded: a file sink starts over from zero, a stdout sink gives up (exit 7).
public struct SourceChanged: Error, Sendable {
    public let location: String
    public let reason: String
    /// The change showed after this run had found the source as the checkpoint recorded
    /// it (a later request, an extra connection, a file shrinking as it is read): it
    /// happened during this run, not between the runs.
    public let duringRun: Bool
    public init(location: String, reason: String, duringRun: Bool = false) {
        self.location = location
        self.reason = reason
        self.duringRun = duringRun
    }
}
