/// The stages of one run, built from the spec through the registry (restored from a
/// checkpoint when given), wired sink-first, with a relay — a thread boundary — in front
/// of each stage that deserves its own core.
final class StageChain {
    let source: ByteSource
    /// What the source writes into.
    let first: ByteSink
    /// Head-to-tail, so closing them in order drains each before the next.
    private let relays: [Relay]
    /// Warnings and what a resume did, for the user.
    private(set) var notes: [String] = []

    init(spec: PipelineSpec, options: PipelineOptions, control: RunControl, restoring checkpoint: Checkpoint?) throws {
        let context = StageContext(options: options, control: control)
        // The source first: a resume that finds the data changed must not touch the output.
        guard case .source(let makeSource, _, _)? = spec.source.kind?.factory else {
            throw SluiceError.usage("the first stage must be a source")
        }
        source = try makeSource(spec.source, context, checkpoint?.source)
        notes += source.notices

        var states = checkpoint?.stages ?? []
        var built: [Relay] = []
        do {
            let sinkState = states.popLast()
            control.resetOutput(to: sinkState?.position.output ?? 0)
            guard case .sink(let makeSink, _)? = spec.sink.kind?.factory else {
                throw SluiceError.usage("the last stage must be a sink")
            }
            let sink = try makeSink(spec.sink, context, sinkState?.value)
            let terminal = sink as? any TerminalSink
            notes += terminal?.notices ?? []
            var next: ByteSink = OutputMeter(next: sink, control: control)
            if options.threaded {
                let relay = try Relay(next: next, control: control, name: spec.sink.name, bufferCount: terminal?.queueBuffers ?? 8)
                built.append(relay)
                next = relay
            }
            let ownThread = ThreadPlan(spec: spec, options: options).ownThread
            for (index, transform) in spec.transforms.enumerated().reversed() {
                guard case .transform(let make)? = transform.kind?.factory else {
                    throw SluiceError.usage("'\(transform.name)' is not a transform")
                }
                next = try make(transform, next, context, states.popLast()?.value)
                if options.threaded && ownThread[index + 1] {
                    let relay = try Relay(next: next, control: control, name: transform.name)
                    built.append(relay)
                    next = relay
                }
            }
            first = next
        } catch {
            for relay in built.reversed() { relay.close() }
            throw error
        }
        relays = built.reversed()
    }

    /// Stops every relay thread after it has drained what it holds.
    func close() {
        for relay in relays { relay.close() }
    }

    deinit { close() }
}
