/// How many source bytes lie between checkpoints: `--checkpoint-interval`, stretched when
/// the last checkpoint's appendix (a decoder's window: 8 MiB for `zstd -19`, up to 128 MiB
/// for `--long=27`) would otherwise cost more than `budget` of the run's work. Copying,
/// hashing and writing a window costs the same whatever decoded it, but a fast decoder
/// does less work between two checkpoints, so its checkpoints must be further apart.
struct CheckpointPacing: Sendable, Equatable {
    /// Storing one appendix byte: the write into the cut's spill file, reading it back for
    /// the HMAC, the copy into the checkpoint (measured on the development machine with
    /// `Benchmarks/zstd.sh` and `Benchmarks/xz.sh` when the cut copied it in memory instead;
    /// the spill adds one read from the page cache).
    static let nsPerStateByte = 1.5
    /// The share of the run's work that checkpoints may take (the target is 5%).
    static let budget = 0.03

    /// The interval the user asked for (0: no checkpoints).
    let base: UInt64
    /// What the whole chain costs per source byte (`ThreadPlan.costs`, nanoseconds).
    let chainNsPerSourceByte: Double

    /// The interval after a checkpoint whose appendix held `stateBytes` bytes.
    func interval(stateBytes: UInt64) -> UInt64 {
        guard base > 0, stateBytes > 0, chainNsPerSourceByte > 0 else { return base }
        let needed = Double(stateBytes) * Self.nsPerStateByte / (Self.budget * chainNsPerSourceByte)
        guard needed < Double(UInt64(1) << 62) else { return UInt64(1) << 62 }
        return max(base, UInt64(needed))
    }
}
