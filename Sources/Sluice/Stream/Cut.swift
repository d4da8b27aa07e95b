/// One consistent cut across all stages: the checkpoint barrier's payload.
///
/// The head of the pipeline creates a cut with the source's state; each stage appends
/// its own state as the barrier passes it (in pipeline order); the terminal sink seals
/// the cut once the bytes it covers are durable. A cut is handed from thread to thread
/// through the engine's queues and is only ever touched by the stage that holds it.
public final class Cut: @unchecked Sendable {
    public let source: SourceState
    public private(set) var stages: [StageState] = []
    /// Runs before the checkpoint is written: makes the sink's bytes durable (fsync).
    public private(set) var makeDurable: (@Sendable () throws -> Void)?
    /// Where the stages put their large blobs (windows) until the cut is stored, instead of
    /// memory; nil (no checkpoint file, tests): in memory.
    let spill: CheckpointSpill?
    private let onSeal: @Sendable (Cut) throws -> Void

    init(source: SourceState, spill: CheckpointSpill? = nil, onSeal: @escaping @Sendable (Cut) throws -> Void) {
        self.source = source
        self.spill = spill
        self.onSeal = onSeal
    }

    public func record(_ state: some StageStateValue) {
        stages.append(StageState(state))
    }

    /// Records the state `take` makes with this cut's spill (where a decoder's window goes
    /// instead of memory); throws the spill's failure, so no state missing its bytes is
    /// recorded and the barrier stops there.
    func record(spilling take: (CheckpointSpill?) -> some StageStateValue) throws {
        let state = take(spill)
        try spill?.check()
        record(state)
    }

    /// Called by the terminal sink (see `TerminalSink`): the cut is complete. `makeDurable`
    /// is run by the checkpoint writer (possibly on another thread) before the checkpoint is stored.
    /// Throws when the sink must not go on without this checkpoint stored (see `Pipeline`).
    func seal(makeDurable: (@Sendable () throws -> Void)?) throws {
        self.makeDurable = makeDurable
        try onSeal(self)
    }
}
