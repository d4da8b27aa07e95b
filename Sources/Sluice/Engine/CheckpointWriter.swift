#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Turns sealed cuts into stored checkpoints on its own thread, so neither the sink's
/// fsync nor the checkpoint's own fsyncs stall the stream. Cuts that arrive while one
/// is being written replace each other: only the newest is worth writing.
final class CheckpointWriter: @unchecked Sendable {
    // Mutable state is guarded by `condition`.
    private let store: CheckpointStore
    private let spec: String
    private let control: RunControl
    private let condition = ThreadCondition()
    private var pending: Cut?
    private var busy = false
    private var stopping = false
    private var exited = false
    private var failure: SluiceError?
    private var lastAppendix = CheckpointAppendixSize.none

    /// Throws when its thread cannot be started (exit 6).
    init(
        store: CheckpointStore, spec: String, control: RunControl,
        startThread: EngineThread.Starter = EngineThread.start
    ) throws(SluiceError) {
        self.store = store
        self.spec = spec
        self.control = control
        try startThread("sluice.checkpoint") { [self] in loop() }
    }

    /// Called by the terminal sink, on its thread, when a cut is complete.
    func submit(_ cut: Cut) {
        condition.lock()
        pending = cut
        condition.broadcast()
        condition.unlock()
    }

    /// The appendix of the last checkpoint stored (its decoders' windows, unxz's raw
    /// blocks), which `CheckpointPacing` spaces the next ones by.
    var appendix: CheckpointAppendixSize {
        condition.lock()
        defer { condition.unlock() }
        return lastAppendix
    }

    /// Waits until every submitted cut is stored; throws if storing one failed.
    func flush() throws {
        condition.lock()
        while (pending != nil || busy) && failure == nil && !exited { condition.wait() }
        let error = failure
        condition.unlock()
        if let error { throw error }
    }

    /// Stops the thread; a cut not yet started is dropped.
    func stop() {
        condition.lock()
        stopping = true
        pending = nil
        condition.broadcast()
        while !exited { condition.wait() }
        condition.unlock()
    }

    private func loop() {
        while true {
            condition.lock()
            while pending == nil && !stopping { condition.wait() }
            guard !stopping, let cut = pending else {
                exited = true
                condition.broadcast()
                condition.unlock()
                return
            }
            pending = nil
            busy = true
            condition.unlock()

            var failed: SluiceError?
            do {
                // A stage whose window could not be spilled threw at the barrier; a cut
                // missing its bytes is never stored, whoever recorded it.
                try cut.spill?.check()
                try cut.makeDurable?()
                let checkpoint = Checkpoint(spec: spec, source: cut.source, stages: cut.stages)
                let appendix = try store.save(checkpoint)
                condition.lock()
                lastAppendix = appendix
                condition.unlock()
                control.progress.emit(.checkpoint(sourceOffset: cut.source.offset, stages: checkpoint.stageOffsets))
            } catch let error as SluiceError {
                failed = error
            } catch {
                failed = .io(path: store.path, operation: "write checkpoint", errno: EIO)
            }

            condition.lock()
            busy = false
            if let failed, failure == nil {
                failure = failed
                control.fail(failed)
            }
            condition.broadcast()
            condition.unlock()
        }
    }
}
