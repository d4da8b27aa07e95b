import Sluice

/// A terminal sink that keeps what it receives; restoring cuts it back to the
/// checkpoint's length, as the file sink truncates its partial file.
final class MemorySink: TerminalSink {
    private(set) var bytes: [UInt8] = []
    private(set) var finished = false

    init(restoring state: StdoutSinkState? = nil, previous: [UInt8] = []) {
        if let state { bytes = Array(previous.prefix(Int(state.bytesWritten))) }
    }

    func write(_ buffer: UnsafeRawBufferPointer) throws { bytes.append(contentsOf: buffer) }

    func snapshot() -> StdoutSinkState {
        StdoutSinkState(bytesWritten: UInt64(bytes.count), fileSize: nil)
    }

    func durability() throws -> (@Sendable () throws -> Void)? { nil }

    func finish() throws { finished = true }
}

/// Decodes `gzip` with a fresh decoder on `engine`, written `chunk` bytes at a time.
func gunzip(_ gzip: [UInt8], engine: InflateEngineKind, chunk: Int = 65536) throws -> [UInt8] {
    let sink = MemorySink()
    let decoder = try GzipDecoder(engine: engine, next: sink)
    var i = 0
    while i < gzip.count {
        let end = min(gzip.count, i + chunk)
        try decoder.write(Array(gzip[i..<end]))
        i = end
    }
    try decoder.finish()
    return sink.bytes
}
