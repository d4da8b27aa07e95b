/// How many source bytes lie between checkpoints: `--checkpoint-interval`, stretched when
/// the last checkpoint's appendix (a decoder's window: 8 MiB for `xz -6` or `zstd -19`, up
/// to 128 MiB for `--long=27`; unxz's raw blocks) would otherwise cost more than `budget` of
/// the run's work. Storing an appendix costs the same whatever decoded it, but a fast
/// decoder does less work between two checkpoints, so its checkpoints must be further apart.
///
/// Both sides are CPU time of all threads together: the chain's declared cost is what its
/// stages spend per source byte in all (a multi-block unxz's two decoders included), and
/// nearly all of a checkpoint's cost is CPU on the writer's thread. On saturated cores
/// (multi-block unxz, a loaded machine) that is also its share of the wall; where a core
/// idles (one-block unxz) only the spill write at the cut delays the stream.
struct CheckpointPacing: Sendable, Equatable {
    /// CPU per appendix byte that waited in the cut's spill file: the stage's write into it
    /// at the cut (0.25–0.9 ns, on the stage's thread), reading it back for the HMAC (with
    /// SHA-NI 0.8 ns), the copy into the checkpoint and freeing the spill (0.9 ns) —
    /// `perf record` of `read | unxz | file`, 8 MiB windows, 2026-12-02: 22 ms per window.
    static let nsPerSpilledByte = 2.6
    /// CPU per appendix byte held in memory (unxz's raw blocks, small blobs): the HMAC and
    /// the write into the checkpoint.
    static let nsPerHeldByte = 1.3
    /// The share of the run's work that checkpoints may take (the target is 5%).
    static let budget = 0.03
    /// A rerun after a kill decodes up to one interval again, and the kill bar gives it 1 s
    /// beyond its share (startup and restore take ~0.2 s): where `budget` would space
    /// checkpoints further apart than this much work (declared CPU, ns), they come at this
    /// distance instead, as long as their share stays under `ceiling` — a multi-block unxz
    /// cut holding the head's window and ~16 MB of raw blocks costs ~34 ms.
    static let redoNs = 700_000_000.0
    /// The share checkpoints may take to keep the rerun within `redoNs` of work: the target.
    static let ceiling = 0.05

    /// The interval the user asked for (0: no checkpoints).
    let base: UInt64
    /// What the whole chain costs per source byte (`ThreadPlan.costs`, nanoseconds).
    let chainNsPerSourceByte: Double

    /// What storing `appendix` costs, in CPU nanoseconds.
    static func cost(of appendix: CheckpointAppendixSize) -> Double {
        Double(appendix.spilledBytes) * nsPerSpilledByte + Double(appendix.bytes - appendix.spilledBytes) * nsPerHeldByte
    }

    /// The interval after a checkpoint whose appendix was `appendix`: at least `base`, and
    /// enough source bytes that the chain's work over them is `cost / budget` — or less,
    /// down to `redoNs` of work, while the share stays under `ceiling`.
    func interval(after appendix: CheckpointAppendixSize) -> UInt64 {
        guard base > 0, appendix.bytes > 0, chainNsPerSourceByte > 0 else { return base }
        let cost = Self.cost(of: appendix)
        let work = min(cost / Self.budget, max(Self.redoNs, cost / Self.ceiling))
        let needed = work / chainNsPerSourceByte
        guard needed < Double(UInt64(1) << 62) else { return UInt64(1) << 62 }
        return max(base, UInt64(needed))
    }
}
