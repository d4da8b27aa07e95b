import Foundation
import XCTest
import Sluice

/// Drives one `HTTPSource` in-process into a collecting sink, recording its progress events:
/// what the fetch unit tests inspect after a run.
struct FetchRun {
    let source: HTTPSource
    let sink: Collector
    let events: FetchEventLog
    let error: Error?

    var bytes: [UInt8] { sink.bytes }

    /// Fast retries for tests: 10 ms backoff, a 10 s stall timeout.
    static func options() -> HTTPOptions {
        var options = HTTPOptions()
        options.backoffBase = 0.01
        options.stallTimeout = 10
        return options
    }

    /// Runs a fresh source into a collector; `onWrite` sees the running total after each write.
    static func run(
        _ url: String, options: HTTPOptions = FetchRun.options(), resumeFrom: SourceState? = nil,
        onWrite: ((Int) throws -> Void)? = nil
    ) throws -> FetchRun {
        let log = FetchEventLog()
        let control = RunControl(progress: { log.append($0) })
        let source = try HTTPSource(url: url, options: options, resumeFrom: resumeFrom, control: control)
        let sink = Collector(onWrite: onWrite)
        var caught: Error?
        do { try source.run(into: sink) } catch { caught = error }
        return FetchRun(source: source, sink: sink, events: log, error: caught)
    }
}

/// Keeps every byte written; `onWrite` runs after each write with the running total.
final class Collector: TerminalSink {
    private(set) var bytes: [UInt8] = []
    private let onWrite: ((Int) throws -> Void)?

    init(onWrite: ((Int) throws -> Void)? = nil) { self.onWrite = onWrite }

    func write(_ buffer: UnsafeRawBufferPointer) throws {
        bytes.append(contentsOf: buffer)
        try onWrite?(bytes.count)
    }

    func snapshot() -> StdoutSinkState { StdoutSinkState(bytesWritten: UInt64(bytes.count), fileSize: nil) }
    func durability() throws -> (@Sendable () throws -> Void)? { nil }
    func finish() throws { XCTFail("a source never finishes its sink") }
}

/// Progress events, as the source's thread emits them.
final class FetchEventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [ProgressEvent] = []
    private var retryHook: (@Sendable () -> Void)?

    var onRetry: (@Sendable () -> Void)? {
        get { lock.withLock { retryHook } }
        set { lock.withLock { retryHook = newValue } }
    }

    func append(_ event: ProgressEvent) {
        lock.withLock { events.append(event) }
        if case .retry = event { onRetry?() }
    }

    /// Every connection count the run announced, in order.
    var connections: [Int] {
        lock.withLock { events.compactMap { if case .connections(let n) = $0 { return n } else { return nil } } }
    }

    var notices: [String] {
        lock.withLock { events.compactMap { if case .notice(let text) = $0 { return text } else { return nil } } }
    }

    var retries: [(attempt: Int, delay: Double, reason: String)] {
        lock.withLock {
            events.compactMap {
                if case .retry(let attempt, let delay, let reason) = $0 { return (attempt, delay, reason) }
                return nil
            }
        }
    }
}

/// A fetch checkpoint of a FaultServer's resource with its default validators, from `url`,
/// `offset` of its `totalLength` bytes in.
func faultServerCheckpoint(_ url: String, offset: UInt64, totalLength: Int) -> SourceState {
    SourceState(
        kind: "fetch", location: url, offset: offset, etag: FaultServer.defaultETag,
        lastModified: FaultServer.defaultLastModified, totalLength: UInt64(totalLength))
}

/// Runs `fetch URL connections=N | file OUTPUT` through `Pipeline.run`: the error it ended
/// with, nil when it succeeded.
func fetchPipelineError(_ url: String, connections: Int, options: PipelineOptions, output: String) throws -> SluiceError? {
    let pipeline = try Pipeline("fetch \(url) connections=\(connections) | file \(output)", options: options)
    do {
        _ = try pipeline.run()
        return nil
    } catch {
        return error
    }
}
