extension Checkpoint {
    /// Each stage's input and output position at this cut, source first.
    public var stageOffsets: [StageOffset] {
        var result = [StageOffset(stage: source.kind, input: source.offset, output: source.offset)]
        var input = source.offset
        for state in stages {
            let output: UInt64
            switch state {
            case .verify(let s): output = s.bytesHashed
            case .gunzip(let s):
                result.append(StageOffset(stage: "gunzip", input: s.compressedOffset, output: s.outputOffset))
                input = s.outputOffset
                continue
            case .file(let s): output = s.bytesWritten
            case .stdout(let s): output = s.bytesWritten
            }
            result.append(StageOffset(stage: state.stageName, input: input, output: output))
            input = output
        }
        return result
    }
}
