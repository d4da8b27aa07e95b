/// The stages of one run, built from the spec (restored from a checkpoint when given),
/// wired sink-first, with a relay — a thread boundary — in front of each stage that
/// deserves its own core.
final class StageChain {
    let source: ByteSource
    /// What the source writes into.
    let first: ByteSink
    /// Head-to-tail, so closing them in order drains each before the next.
    private let relays: [Relay]
    /// Warnings and what a resume did, for the user.
    private(set) var notes: [String] = []

    init(spec: PipelineSpec, options: PipelineOptions, control: RunControl, restoring checkpoint: Checkpoint?) throws {
        // The source first: a resume that finds the data changed must not touch the output.
        let saved = checkpoint?.source
        switch spec.source {
        case .read(let path): source = try FileSource(path: path, resumeFrom: saved, control: control)
        case .stdin: source = StdinSource()
        case .fetch(let url, let connections):
            var wire = options.http
            wire.connections = connections ?? wire.connections
            let http = try HTTPSource(url: url, options: wire, resumeFrom: saved, control: control)
            notes += http.warnings
            source = http
        default: throw SluiceError.usage("the first stage must be a source")
        }

        var states = checkpoint?.stages ?? []
        var built: [Relay] = []
        do {
            let sinkState = states.popLast()
            control.resetOutput(to: sinkState?.position.output ?? 0)
            let sink = try Self.makeSink(spec.sink, restoring: sinkState)
            if let note = (sink as? StdoutSink)?.resumeNote { notes.append(note) }
            var next: ByteSink = OutputMeter(next: sink, control: control)
            if options.threaded {
                next = Relay(next: next, control: control, name: spec.sink.name)
                built.append(next as! Relay)
            }
            let ownThread = ThreadPlan(spec: spec, engine: options.engine).ownThread
            for (index, transform) in spec.transforms.enumerated().reversed() {
                next = try Self.makeTransform(transform, next: next, options: options, restoring: states.popLast())
                if options.threaded && ownThread[index + 1] {
                    next = Relay(next: next, control: control, name: transform.name)
                    built.append(next as! Relay)
                }
            }
            first = next
        } catch {
            for relay in built.reversed() { relay.close() }
            throw error
        }
        relays = built.reversed()
    }

    private static func makeSink(_ stage: StageSpec, restoring state: StageState?) throws -> ByteSink {
        switch stage {
        case .file(let path):
            if case .file(let s)? = state { return try FileSink(path: path, restoring: s) }
            return try FileSink(path: path)
        case .stdout:
            if case .stdout(let s)? = state { return try StdoutSink(restoring: s) }
            return try StdoutSink()
        default:
            throw SluiceError.usage("the last stage must be a sink")
        }
    }

    private static func makeTransform(_ stage: StageSpec, next: ByteSink, options: PipelineOptions,
                                      restoring state: StageState?) throws -> ByteSink {
        switch stage {
        case .verify(let hex):
            if case .verify(let s)? = state { return try SHA256Verifier(expectedHex: hex, next: next, restoring: s) }
            return try SHA256Verifier(expectedHex: hex, next: next)
        case .gunzip:
            if case .gunzip(let s)? = state {
                return try GzipDecoder(engine: options.engine, next: next, resumable: true, restoring: s)
            }
            return try GzipDecoder(engine: options.engine, next: next, resumable: options.checkpointInterval > 0)
        default:
            throw SluiceError.usage("'\(stage.name)' is not a transform")
        }
    }

    /// Stops every relay thread after it has drained what it holds.
    func close() {
        for relay in relays { relay.close() }
    }

    deinit { close() }
}
