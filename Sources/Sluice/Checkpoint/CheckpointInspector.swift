#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// `sluice inspect`: what a checkpoint says, and what a rerun would do with it.
public struct CheckpointInspector {
    public let path: String
    public let checkpoint: Checkpoint
    /// The run that holds the checkpoint's lock (`C.lock`): the job is running now. Read
    /// from /proc/locks, never by taking the lock (`LockHolder`).
    public let running: LockHolder?

    public init(path: String) throws {
        self.path = path
        let loaded: Checkpoint?
        do {
            loaded = try CheckpointStore(path: path).load()
        } catch let distrust as CheckpointDistrust {
            throw SluiceError.checkpointRefused(path: path, reason: "cannot trust it: \(distrust.reason)")
        }
        guard let checkpoint = loaded else {
            throw SluiceError.usage("no checkpoint at \(path)")
        }
        self.checkpoint = checkpoint
        running = LockHolder.of(path + ".lock")
    }

    /// The `running` line: who holds the lock and what that means for the rest.
    private var runningText: String? {
        guard let running else { return nil }
        let who = running.pid.map { "sluice (pid \($0))" } ?? "sluice run"
        return "a \(who) holds \(DisplayText.escaped(path + ".lock")): the job is running, this checkpoint may"
            + " already be behind it, and a rerun now is refused until it ends"
    }

    /// What a rerun of the same command would do, and why.
    public var verdict: (action: String, reason: String) {
        let source = checkpoint.source
        if source.kind == "read" {
            var st = stat()
            guard stat(source.location, &st) == 0 else { return ("restart", "\(source.location) is gone") }
            if UInt64(st.st_size) != source.totalLength || FileSource.modificationStamp(st) != source.lastModified {
                return ("restart", "\(source.location) changed since the checkpoint")
            }
        }
        if let problem = checkpoint.inconsistency {
            return ("refuse", "its stage positions do not fit together (\(problem)); --restart discards it")
        }
        if let problem = transformStateProblem {
            return ("refuse", "\(problem); --restart discards it")
        }
        for state in checkpoint.stages {
            if let file = state.as(FileSinkState.self), PublishedOutput.wouldReopen(file) {
                return (
                    "resume",
                    "from source byte \(source.offset) on a copy of the finished \(file.path), which begins with the bytes"
                        + " recorded (the last run was most likely stopped before it removed its checkpoint)"
                )
            }
            if let problem = state.value.resumeProblem() { return ("restart", problem) }
        }
        if source.kind == "fetch" {
            return ("resume", "from source byte \(source.offset), if the server's validators still match")
        }
        return ("resume", "from source byte \(source.offset)")
    }

    /// Why a rerun would refuse a transform's state, or nil: each one is restored as the run
    /// restores it (every field checked), into a sink that keeps nothing. Transforms only:
    /// restoring a sink or a source touches files.
    private var transformStateProblem: String? {
        guard let spec = try? PipelineSpec(parsing: checkpoint.spec), spec.transforms.count <= checkpoint.stages.count else {
            return "its spec does not parse, or does not match its stages"
        }
        var options = PipelineOptions()
        // The run's --engine is not recorded; the one each gzip state names is the one a rerun needs.
        for state in checkpoint.stages {
            if let engine = (state.as(GzipState.self) ?? state.as(DecompressState.self)?.gunzip)?.engine { options.engine = engine }
        }
        let context = StageContext(options: options, control: RunControl())
        for (transform, state) in zip(spec.transforms, checkpoint.stages) {
            guard case .transform(let make)? = transform.kind?.factory else { continue }
            do {
                _ = try make(transform, DiscardingSink(), context, state.value)
            } catch let rejected as StateRejected {
                return rejected.reason
            } catch SluiceError.checkpointRefused(_, let reason) {
                return reason
            } catch {
                return "\(error)"
            }
        }
        return nil
    }

    public func render(json: Bool) -> String {
        var verdict = self.verdict
        verdict.reason = DisplayText.escaped(verdict.reason)
        // The source's kind names the first row too: a sealed checkpoint is still a file
        // someone may edit with the user's key, so it is escaped like every other string.
        let offsets = checkpoint.stageOffsets.map { StageOffset(stage: DisplayText.escaped($0.stage), input: $0.input, output: $0.output) }
        // Older checkpoints stored URLs whole, and any checkpoint may be hand-edited: what is
        // printed has URL secrets redacted and control characters escaped (DisplayText).
        var source = checkpoint.source
        source.location = DisplayText.url(source.location)
        source.kind = DisplayText.escaped(source.kind)
        source.etag = source.etag.map(DisplayText.escaped)
        source.lastModified = source.lastModified.map(DisplayText.escaped)
        let shownSpec = DisplayText.escaped(
            (try? PipelineSpec(parsing: checkpoint.spec))?.redactedDescription
                ?? DisplayText.redactedURL(checkpoint.spec))
        if json {
            var sourceObject: [String: JSONValue] = [
                "kind": .string(source.kind), "location": .string(source.location), "offset": .integer(source.offset),
            ]
            if let etag = source.etag { sourceObject["etag"] = .string(etag) }
            if let lastModified = source.lastModified { sourceObject["last_modified"] = .string(lastModified) }
            if let total = source.totalLength { sourceObject["total_length"] = .integer(total) }
            var object: [String: JSONValue] = [
                "path": .string(path),
                "version": .integer(checkpoint.version),
                "spec": .string(shownSpec),
                "written_at": .string(checkpoint.writtenAt.formatted(.iso8601)),
                "source": .object(sourceObject),
                "stages": .array(
                    offsets.map { .object(["stage": .string($0.stage), "input": .integer($0.input), "output": .integer($0.output)]) }),
                "rerun": .object(["action": .string(verdict.action), "reason": .string(verdict.reason)]),
            ]
            if let running {
                var held: [String: JSONValue] = ["lock": .string(path + ".lock")]
                if let pid = running.pid { held["pid"] = .integer(pid) }
                object["running"] = .object(held)
            }
            return JSONValue.object(object).serialized(pretty: true) ?? ""
        }
        var lines = [
            "checkpoint  \(path) (format \(checkpoint.version))",
            "spec        \(shownSpec)",
            "written     \(checkpoint.writtenAt.formatted(.iso8601))",
            "source      \(source.kind) \(source.location)",
            "  offset    \(source.offset)" + (source.totalLength.map { " of \($0)" } ?? ""),
        ]
        if let etag = source.etag { lines.append("  etag      \(etag)") }
        if let lastModified = source.lastModified { lines.append("  modified  \(lastModified)") }
        lines.append("stages      (bytes in → bytes out)")
        // Stage words longer than 8 (`decompress`) widen the column rather than being cut.
        let width = max(8, offsets.map(\.stage.count).max() ?? 0)
        for offset in offsets {
            lines.append("  " + padded(offset.stage, to: width) + "  \(offset.input) → \(offset.output)")
        }
        lines.append("rerun       \(verdict.action): \(verdict.reason)")
        if let runningText { lines.append("running     \(runningText)") }
        return lines.joined(separator: "\n")
    }

    /// `text` cut or filled with spaces to `width` UTF-16 units, as NSString's padding did.
    private func padded(_ text: String, to width: Int) -> String {
        let units = text.utf16.count
        if units >= width { return String(decoding: Array(text.utf16.prefix(width)), as: UTF16.self) }
        return text + String(repeating: " ", count: width - units)
    }
}

/// Takes bytes and keeps none: what a restored transform writes into when only its state
/// is being checked.
private final class DiscardingSink: ByteSink {
    func write(_ bytes: UnsafeRawBufferPointer) throws {}
    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}
