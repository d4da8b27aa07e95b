#if canImport(Glibc)
import Glibc
#endif

/// Every failure Sluice reports. Each case carries what a user needs to act, maps to
/// one exit status of the CLI contract, and renders as one line.
public enum SluiceError: Error, Sendable, Equatable {
    /// The pipeline spec is malformed (exit 2).
    case spec(SpecError)
    /// A command-line or API usage error (exit 2).
    case usage(String)
    /// A checkpoint exists but cannot be trusted for this run (exit 2).
    case checkpointRefused(path: String, reason: String)
    /// A name Sluice would read or write holds something it must not touch: a link, a
    /// FIFO, a device, a file that is not a checkpoint, or another of the run's files (exit 2).
    case unsafePath(path: String, reason: String)
    /// The checkpoint path holds a file that is not a sluice checkpoint: sluice neither
    /// uses nor removes it, `--restart` or not (exit 2).
    case notACheckpoint(path: String)
    /// Another run holds the lock on the same output or checkpoint (exit 2); names the lock file.
    case locked(checkpoint: String)
    /// The transfer failed for good, or after all retries (exit 3): `cause` says why (switch
    /// on it), `gaveUp` how the retry loop ended.
    case transfer(url: String, cause: TransferCause, gaveUp: TransferGiveUp = .atOnce)
    /// The stream's SHA-256 is not the one the spec expects (exit 4).
    case checksumMismatch(expected: String, actual: String)
    /// The input of a decoding stage is damaged (exit 5): `format` names it (gzip, xz,
    /// zstd, tar), `offset` is the stage's input byte where the damage was found.
    case corruptData(format: String, offset: UInt64, reason: String)
    /// A decoding stage would need more memory than its limit allows (exit 5, as for damaged
    /// data: this spec cannot produce the output, so the partial output goes). `what` needs
    /// `needed` bytes (an xz dictionary, a zstd window); `option` is the stage option that
    /// sets the limit (`memlimit`); `offset` is the stage's input byte where the need was read.
    case limitExceeded(format: String, offset: UInt64, what: String, needed: UInt64, limit: UInt64, option: String)
    /// A local read or write failed (exit 6).
    case io(path: String, operation: String, errno: Int32)
    /// A name sluice writes while it runs (the checkpoint, its temporary file) was taken
    /// during the run by something sluice did not make: it leaves that alone and stops, as
    /// for a failed write (exit 6), keeping the partial output and the last checkpoint.
    /// `reason` says what stands there and what to do.
    case obstructed(path: String, reason: String)
    /// The remote content changed since the checkpoint and the sink cannot start over (exit 7);
    /// `duringRun`: it changed after this run had found it as recorded, or on a run that
    /// resumed nothing.
    case remoteChanged(url: String, reason: String, duringRun: Bool = false)
    /// SIGINT/SIGTERM or `Pipeline.cancel()` (exit 130).
    case cancelled
    /// A failure Sluice has no name for (exit 1): a bug to report, never expected.
    case unexpected(String)

    /// The process exit status of the CLI contract (README, "Exit status").
    public var exitCode: Int32 {
        switch self {
        case .spec, .usage, .checkpointRefused, .unsafePath, .notACheckpoint, .locked: return 2
        case .transfer: return 3
        case .checksumMismatch: return 4
        case .corruptData, .limitExceeded: return 5
        case .io, .obstructed: return 6
        case .remoteChanged: return 7
        case .cancelled: return 130
        case .unexpected: return 1
        }
    }

    /// True when the failure proves the output wrong, so partial data and checkpoint must go.
    public var discardsPartialOutput: Bool {
        switch self {
        case .checksumMismatch, .corruptData, .limitExceeded: return true
        default: return false
        }
    }
}

extension SluiceError: CustomStringConvertible {
    /// One line of facts, without the `sluice:` prefix: what failed and where. What to do
    /// about it depends on how the run was started, so the CLI adds that (its `Advice`).
    public var description: String {
        switch self {
        case .spec(let e): return e.description
        case .usage(let m): return m
        case .checkpointRefused(let path, let reason):
            return "checkpoint \(path): \(reason)"
        case .unsafePath(let path, let reason):
            return "refusing to use \(path): \(reason)"
        case .notACheckpoint(let path):
            return "\(path) is not a sluice checkpoint"
        case .locked(let checkpoint):
            return "another sluice run holds \(checkpoint) for the same output"
        case .transfer(let url, let cause, let gaveUp):
            let ending: String
            switch gaveUp {
            case .atOnce: ending = ""
            case .afterRetries(let count): ending = " (gave up after \(Counted.text(count, "retry", plural: "retries")))"
            case .deadlineBeforeRetry: ending = " (the --max-time deadline comes before the next retry)"
            }
            return "transfer of \(url) failed: \(cause)\(ending)"
        case .checksumMismatch(let expected, let actual):
            return "checksum mismatch: expected sha256:\(expected), got sha256:\(actual)"
        case .corruptData(let format, let offset, let reason):
            return "corrupt \(format) data at byte \(offset) of the \(format) stream: \(reason)"
        case .limitExceeded(let format, let offset, let what, let needed, let limit, let option):
            return "\(format) data at byte \(offset) of the \(format) stream needs a \(what) of \(ByteSize.text(needed)),"
                + " over the limit of \(ByteSize.text(limit)) (\(option)=SIZE raises it)"
        case .io(let path, let operation, let code):
            return "cannot \(operation) \(path): \(String(cString: strerror(code)))"
        case .obstructed(let path, let reason):
            return "cannot write \(path): \(reason)"
        case .remoteChanged(let url, let reason, let duringRun):
            return "\(url) changed \(duringRun ? "during the transfer" : "since the checkpoint") (\(reason))"
        case .cancelled:
            return "interrupted"
        case .unexpected(let what):
            return "unexpected failure: \(what)"
        }
    }
}

/// Thrown where a decoder reads a need over its limit; the stage adds the format and where
/// (`SluiceError.limitExceeded`), or refuses a checkpoint that records such a need.
struct DecoderLimitExceeded: Error, Equatable {
    let what: String
    let needed: UInt64
    let limit: UInt64
    let option: String

    func error(format: String, offset: UInt64) -> SluiceError {
        .limitExceeded(format: format, offset: offset, what: what, needed: needed, limit: limit, option: option)
    }

    /// For a checkpoint whose recorded state needs more than the limit.
    var refusal: String {
        "it records a \(what) of \(ByteSize.text(needed)), over the limit of \(ByteSize.text(limit)) (\(option)=SIZE)"
    }
}
