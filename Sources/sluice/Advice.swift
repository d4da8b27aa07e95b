#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Sluice

/// What the user should do about a failure, given what this run leaves behind. The library's
/// `SluiceError` states facts only; the advice depends on the command line (was a
/// checkpoint written? is the sink stdout?), so it lives here.
struct Advice {
    /// A checkpoint is written as the run goes (a resumable source, a place for it, an interval).
    let writesCheckpoints: Bool
    /// A checkpoint is on disk now, so a rerun resumes.
    let checkpointLeft: Bool
    /// The sink is stdout and it has been written to: what it wrote cannot be taken back.
    let toStdout: Bool
    /// The source as the user named it (redacted), for failures that blame the input.
    let input: String

    /// The line to print (without `sluice: `): the facts, then what to do.
    func line(for error: SluiceError) -> String {
        let facts = error.description
        switch error {
        case .spec, .usage:
            return facts + " (see sluice --help)"
        case .checkpointRefused:
            // Only a file that is a sluice checkpoint may be discarded with --restart;
            // anything else at that path is refused as unsafePath and gets no such advice.
            return facts + "; rerun with --restart to discard it and start over"
        case .unsafePath:
            return facts
        case .notACheckpoint:
            // Not even --restart touches it: the user's file, whatever it is.
            return facts + ", so sluice will neither use nor remove it; move it away or name another --checkpoint"
        case .unexpected:
            return facts + " (a bug: please report it with the command that caused it)"
        case .locked:
            return facts + "; wait for it to finish or stop it first"
        case .checksumMismatch, .corruptData, .limitExceeded:
            return "\(input): " + facts + (toStdout ? "; the bytes already written to stdout are not valid" : "; nothing was written")
        case .remoteChanged:
            return facts + "; output already went to stdout, so it cannot start over; rerun with --restart"
        case .cancelled:
            return writesCheckpoints
                ? facts + "; checkpoint saved, rerun the same command to resume"
                : facts
                    + "; this pipeline writes no checkpoint (stdin source, stdout without --checkpoint, or --checkpoint-interval 0), so a rerun starts from zero"
        case .io(_, _, let code):
            let full = code == ENOSPC || code == EDQUOT
            return facts + "; " + rerun(fix: full ? "free some space" : "fix the problem", fixShort: full ? "free some space" : "fix that")
        case .obstructed:
            // The reason says whether the rerun resumes (the checkpoint stays) or starts over.
            return facts + "; move it away and rerun the same command"
        case .transfer(_, .certificate, _):
            let trust = "pass --cacert FILE to trust a private CA"
            return facts + "; " + rerun(fix: trust, fixShort: trust)
        case .transfer(_, .certificateName, _):
            let name = "use a host name the certificate was issued for"
            return facts + "; " + rerun(fix: name, fixShort: name)
        case .transfer:
            return facts + "; " + rerun(fix: nil, fixShort: "fix that")
        }
    }

    /// How a rerun continues, given what is on disk.
    private func rerun(fix: String?, fixShort: String) -> String {
        let first = fix.map { $0 + " and " } ?? ""
        if !writesCheckpoints { return first + "rerun the same command to start over" }
        // The run failed before its first byte and left nothing behind: only the cause to fix.
        if !checkpointLeft { return "nothing was left on disk: \(fixShort) and run the command again" }
        return first + "rerun the same command to resume"
    }
}
