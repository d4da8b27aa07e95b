#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Which stages get a thread of their own, from what each costs per source byte.
///
/// On two cores the stream runs at the speed of the busiest thread, and every extra
/// thread competes for the same cores. So the heaviest stage gets a core to itself,
/// a stage at least half as heavy gets its own thread too, and lighter ones ride on the
/// thread of the stage before them. Sinks always get one: they block on I/O.
/// Costs come from each stage's `StageKind` (nanoseconds per input byte measured on the
/// development machines, see Benchmarks/, and the stage's expected expansion).
struct ThreadPlan {
    /// Indexed like `spec.stages`.
    let ownThread: [Bool]

    /// `cores`: threads that can run at once. The source runs on the caller's thread; the
    /// plan starts at most one thread per core for transforms plus one for the sink,
    /// however many stages the spec has.
    init(spec: PipelineSpec, options: PipelineOptions, cores: Int = ProcessInfo.processInfo.activeProcessorCount) {
        let costs = Self.costs(spec: spec, options: options)
        let heaviest = costs.max() ?? 0
        // Each core may take one transform, heaviest first, if it is at least half as
        // heavy as the heaviest stage; the rest ride on the thread in front of them.
        let candidates = spec.stages.indices.dropFirst().dropLast()
            .filter { costs[$0] >= heaviest / 2 }
            .sorted { costs[$0] > costs[$1] }
            .prefix(max(1, cores))
        ownThread = spec.stages.indices.map { index in
            index == 0 || index == spec.stages.count - 1 || candidates.contains(index)
        }
    }

    /// What each stage costs per source byte (nanoseconds), indexed like `spec.stages`.
    static func costs(spec: PipelineSpec, options: PipelineOptions) -> [Double] {
        var expansion = 1.0
        var costs: [Double] = []
        for stage in spec.stages {
            let cost = stage.kind?.cost(options) ?? StageCost(nsPerByte: 0)
            costs.append(cost.nsPerByte * expansion)
            expansion *= cost.expansion
        }
        return costs
    }
}
