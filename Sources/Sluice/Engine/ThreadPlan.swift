/// Which stages get a thread of their own, from what each costs per source byte.
///
/// On two cores the stream runs at the speed of the busiest thread, and every extra
/// thread competes for the same cores. So the heaviest stage gets a core to itself,
/// a stage at least half as heavy gets its own thread too, and lighter ones ride on the
/// thread of the stage before them. Sinks always get one: they block on I/O.
/// Costs are nanoseconds per byte measured on the development machines (NOTES.md and
/// Benchmarks/): libcurl ~0.3, SHA-256 with SHA-NI ~1.0, ISA-L inflate ~1.1 and zlib
/// ~3.0 per output byte, page-cache writes ~0.3; gzip is assumed to expand 3×.
struct ThreadPlan {
    /// Indexed like `spec.stages`.
    let ownThread: [Bool]

    init(spec: PipelineSpec, engine: InflateEngineKind) {
        var expansion = 1.0
        var costs: [Double] = []
        for stage in spec.stages {
            switch stage {
            case .fetch, .read, .stdin: costs.append(0.3)
            case .verify: costs.append(1.0 * expansion)
            case .gunzip:
                expansion *= 3
                costs.append((engine == .isal ? 1.1 : 3.0) * expansion)
            case .file: costs.append(0.3 * expansion)
            case .stdout: costs.append(0.5 * expansion)
            }
        }
        let heaviest = costs.max() ?? 0
        ownThread = spec.stages.indices.map { index in
            if index == 0 { return true }  // the source runs on the caller's thread
            if spec.stages[index].role == .sink { return true }
            return costs[index] >= heaviest / 2
        }
    }
}
