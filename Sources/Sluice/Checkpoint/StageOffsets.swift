extension Checkpoint {
    /// Each stage's input and output position at this cut, source first.
    public var stageOffsets: [StageOffset] {
        [StageOffset(stage: source.kind, input: source.offset, output: source.offset)]
            + stages.map { StageOffset(stage: $0.stageName, input: $0.position.input, output: $0.position.output) }
    }
}
