#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// What a run reports while it works: to a progress bar, JSON lines, or a library caller.
public enum ProgressEvent: Sendable, Equatable {
    /// The run begins; `resumedAt` is the source offset when it continues a checkpoint.
    case start(spec: String, total: UInt64?, resumedAt: UInt64?)
    /// Bytes moved so far. `sourceOffset` counts source bytes; `outputBytes` what the sink wrote.
    case progress(sourceOffset: UInt64, total: UInt64?, outputBytes: UInt64)
    /// A transient transfer failure; the next attempt starts after `delay` seconds.
    case retry(attempt: Int, delay: Double, reason: String)
    /// A checkpoint was written at this source offset.
    case checkpoint(sourceOffset: UInt64, stages: [StageOffset])
    /// The run continues from a checkpoint.
    case resume(sourceOffset: UInt64)
    /// The run starts over from zero, and why.
    case restart(reason: String)
    /// `fetch` now uses this many connections (sent when it opens several, and when one closes).
    case connections(Int)
    /// Something the user should know that is not a failure (a warning, what a resume did).
    /// Printed as a `sluice:` line; not part of the JSON lines.
    case notice(String)
    /// The whole pipeline succeeded.
    case done(sourceBytes: UInt64, outputBytes: UInt64, seconds: Double)
    /// The run failed or was interrupted.
    case error(SluiceError)
}

/// One stage's position at a checkpoint, for progress and `inspect`.
public struct StageOffset: Sendable, Equatable, Codable {
    public var stage: String
    /// Bytes the stage has taken in, and bytes it has passed on.
    public var input: UInt64
    public var output: UInt64
}

/// Receives progress events; called from the run's threads, so it must be thread-safe.
public typealias ProgressHandler = @Sendable (ProgressEvent) -> Void

/// Hands events to the caller's handler, if any.
struct ProgressReporter: Sendable {
    let handler: ProgressHandler?
    /// The pipeline's `events` sequence.
    var stream: AsyncStream<ProgressEvent>.Continuation?

    func emit(_ event: ProgressEvent) {
        handler?(event)
        stream?.yield(event)
    }

    /// The run is over: the `events` sequence ends.
    func finish() {
        stream?.finish()
    }
}
