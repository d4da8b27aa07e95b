import Dispatch

/// The first sink of every pipeline, written to by the source: counts source bytes,
/// stops the run when asked, and injects a checkpoint barrier every `pacing.base` bytes
/// (stretched by `CheckpointPacing` when the last checkpoint carried a large window).
final class PipelineHead: ByteSink {
    private let next: ByteSink
    private let source: ByteSource
    private let control: RunControl
    private let pacing: CheckpointPacing
    /// The appendix of the last stored checkpoint (the checkpoint writer's).
    private let appendix: @Sendable () -> CheckpointAppendixSize
    private let seal: (@Sendable (Cut) throws -> Void)?
    /// The checkpoint whose directory holds each cut's spill file (nil: blobs in memory).
    private let spillBeside: String?
    private(set) var offset: UInt64
    /// False once a write into the chain failed: some stage may have taken part of the
    /// chunk, so no barrier can describe the stages any more.
    private(set) var chainIsWhole = true
    private var sinceBarrier: UInt64 = 0
    private var nextReport: UInt64 = 0
    /// Progress goes out at most this often (nanoseconds).
    private static let reportInterval: UInt64 = 100_000_000

    /// - Parameter seal: where sealed cuts go (the checkpoint writer); nil disables barriers.
    /// - Parameter spillBeside: the checkpoint path, beside which cuts spill their windows.
    init(
        source: ByteSource, next: ByteSink, startOffset: UInt64, pacing: CheckpointPacing,
        appendix: @escaping @Sendable () -> CheckpointAppendixSize = { .none }, control: RunControl, seal: (@Sendable (Cut) throws -> Void)?,
        spillBeside: String? = nil
    ) {
        self.source = source
        self.next = next
        self.offset = startOffset
        self.pacing = pacing
        self.appendix = appendix
        self.control = control
        self.seal = seal
        self.spillBeside = spillBeside
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        try control.check()
        do {
            try next.write(bytes)
        } catch {
            chainIsWhole = false
            throw error
        }
        offset &+= UInt64(bytes.count)
        sinceBarrier &+= UInt64(bytes.count)
        // Past the user's interval, ask how far this run's windows stretch it (a lock, so
        // only then).
        if pacing.base > 0 && sinceBarrier >= pacing.base && sinceBarrier >= pacing.interval(after: appendix()) {
            try injectBarrier()
        }
        let now = DispatchTime.now().uptimeNanoseconds
        if now >= nextReport {
            nextReport = now + Self.reportInterval
            control.progress.emit(
                .progress(
                    sourceOffset: offset, total: source.state(at: offset).totalLength,
                    outputBytes: control.outputBytes))
        }
    }

    func barrier(_ cut: Cut) throws {
        try next.barrier(cut)
    }

    func finish() throws {
        try control.check()
        try next.finish()
    }

    /// Sends a barrier at the current offset down the chain.
    func injectBarrier() throws {
        guard let seal, chainIsWhole else { return }
        sinceBarrier = 0
        try next.barrier(Cut(source: source.state(at: offset), spill: spillBeside.map { CheckpointSpill(beside: $0) }, onSeal: seal))
    }
}
