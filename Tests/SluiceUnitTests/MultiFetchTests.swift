import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// `fetch` over several connections against the in-process FaultServer, whose faults hit
/// single connections: each case checks the bytes delivered (exact, in order) and the
/// documented outcome (retry, fewer connections with a notice, or "the remote changed").
final class MultiFetchTests: XCTestCase {
    private static let size = 2 << 20
    private static let body = makeTestData(count: size, seed: 14)
    private static let segment = 64 << 10

    // MARK: Threads

    /// A connection whose thread cannot start (`ulimit -u`) ends the fetch with that error
    /// (exit 6) instead of a wait for a connection that never runs: the head's thread, then
    /// the first and the second extra connection's.
    func testAConnectionThreadThatCannotStartIsAnErrorNotAHang() throws {
        let server = try FaultServer(body: Self.body)
        defer { server.stop() }
        defer { EngineThread.refuseStarts(after: nil) }
        for allowed in 0..<3 {
            let ended = expectation(description: "the fetch with \(allowed) threads allowed returns")
            let outcome = LockedValue<Error?>(nil)
            let url = server.url()
            let options = Self.options(connections: 4, tuning: Self.tuning)
            Thread.detachNewThread {
                EngineThread.refuseStarts(after: allowed)
                do {
                    let control = RunControl(progress: ProgressReporter(handler: nil))
                    try HTTPSource(url: url, options: options, resumeFrom: nil, control: control).run(into: Collector())
                } catch {
                    outcome.value = error
                }
                EngineThread.refuseStarts(after: nil)
                ended.fulfill()
            }
            wait(for: [ended], timeout: 60)
            guard let error = outcome.value as? SluiceError, case .io(let path, "start", EAGAIN) = error else {
                XCTFail("\(allowed) threads allowed: \(String(describing: outcome.value))")
                continue
            }
            XCTAssertTrue(path.hasPrefix("thread sluice.fetch."), path)
            XCTAssertEqual(error.exitCode, 6)
        }
    }

    // MARK: Plans

    func testSeveralConnectionsDeliverEveryByteInOrder() throws {
        let server = try FaultServer(body: Self.body)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 4)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.connections.first, 4)
        let requests = server.requests
        XCTAssertGreaterThanOrEqual(requests.count, Self.size / Self.segment, "a request per segment, plus splits")
        // The head asks exactly as one connection would; the others ask for bounded ranges
        // that together cover the rest.
        XCTAssertNil(requests.first?.headers["range"])
        var covered = [Bool](repeating: false, count: Self.size)
        for request in requests.dropFirst() {
            let bounds = (request.headers["range"] ?? "").dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
            guard bounds.count == 2, bounds[0] >= Self.segment, bounds[0] <= bounds[1], bounds[1] < Self.size else {
                return XCTFail("unexpected range \(request.headers["range"] ?? "none")")
            }
            for i in bounds[0]...bounds[1] { covered[i] = true }
        }
        XCTAssertFalse(covered[Self.segment...].contains(false))
        XCTAssertTrue(requests.dropFirst().allSatisfy { $0.headers["if-range"] == "\"v1\"" })
        XCTAssertTrue(run.events.notices.isEmpty, "\(run.events.notices)")
    }

    func testPerConnectionRateLimitStillExact() throws {
        var fault = FaultServer.Fault()
        fault.bytesPerSecond = 4 << 20
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 8)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.connections.first, 8)
    }

    func testDefaultIsOneConnectionBelowTheThreshold() throws {
        let server = try FaultServer(body: Self.body)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: nil)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(server.requests.count, 1)
        XCTAssertNil(server.requests.first?.headers["range"])
        XCTAssertTrue(run.events.connections.isEmpty)
    }

    func testDefaultIsFourConnectionsAtTheThreshold() throws {
        let server = try FaultServer(body: Self.body)
        defer { server.stop() }
        var tuning = Self.tuning
        tuning.autoThreshold = UInt64(Self.size)
        let run = try fetch(server.url(), connections: nil, tuning: tuning)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.connections.first, 4)
    }

    func testResumePlansFromTheCheckpointOffset() throws {
        let server = try FaultServer(body: Self.body)
        defer { server.stop() }
        let offset = 300_000
        let saved = SourceState(
            kind: "fetch", location: server.url(), offset: UInt64(offset), etag: "\"v1\"",
            lastModified: "Wed, 01 Jan 2025 00:00:00 GMT", totalLength: UInt64(Self.size))
        let run = try fetch(server.url(), connections: 4, resumeFrom: saved)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Array(Self.body[offset...]))
        XCTAssertEqual(server.requests.first?.headers["range"], "bytes=\(offset)-")
        XCTAssertTrue(server.requests.contains { $0.headers["range"] == "bytes=\(offset + Self.segment)-\(offset + 2 * Self.segment - 1)" })
        XCTAssertEqual(run.events.connections.first, 4)
    }

    func testServerWithoutRangesGetsOneConnectionAndANotice() throws {
        var fault = FaultServer.Fault()
        fault.ignoreRange = true
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        // Resuming: the server answers the range with 200; validators confirm, so it is skipped.
        let saved = SourceState(
            kind: "fetch", location: server.url(), offset: 1_000, etag: "\"v1\"",
            lastModified: "Wed, 01 Jan 2025 00:00:00 GMT", totalLength: UInt64(Self.size))
        let run = try fetch(server.url(), connections: 4, resumeFrom: saved)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Array(Self.body[1_000...]))
        XCTAssertEqual(server.requests.count, 1)
        XCTAssertTrue(run.events.connections.isEmpty)
    }

    // MARK: Faults on single connections

    func testConnectionDroppedMidSegmentIsRetriedAtItsOffset() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[3] = .init(dropAfterBodyBytes: 10_000)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 4)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.retries.count, 1)
        // The retry asks for the rest of that segment only.
        let third = server.requests[2].headers["range"] ?? ""
        let parts = third.dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
        XCTAssertEqual(parts.count, 2)
        let retried = "bytes=\(parts[0] + 10_000)-\(parts[1])"
        XCTAssertTrue(server.requests.contains { $0.headers["range"] == retried }, "no request for \(retried)")
    }

    func testStalledConnectionIsAbandonedAndRetried() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[2] = .init(stallAfterBodyBytes: 5_000)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        var options = Self.options(connections: 4)
        options.stallTimeout = 1
        let run = try fetch(server.url(), options: options)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.retries.count, 1)
        XCTAssertTrue(run.events.retries.first?.reason.contains("no data") ?? false)
    }

    func testStalledHeadIsRetriedWhileOthersWait() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[1] = .init(stallAfterBodyBytes: 1_000)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        var options = Self.options(connections: 16)
        options.stallTimeout = 1
        let run = try fetch(server.url(), options: options)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.retries.count, 1)
    }

    func testSlowHeadOfTheLineIsSplit() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[1] = .init(bytesPerSecond: 32 << 10)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 4)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        // The others filled the window while the head crawled; one took the head's upper half.
        let starts = server.requests.compactMap { $0.headers["range"] }.compactMap {
            $0.dropFirst("bytes=".count).split(separator: "-").first.flatMap { Int($0) }
        }
        XCTAssertTrue(starts.contains { $0 > 0 && $0 < Self.segment }, "no split of the head segment: \(starts.sorted())")
    }

    func testConnectionAnswered200ClosesWithANotice() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[2] = .init(ignoreRange: true)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 4)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [4, 3])
        XCTAssertEqual(run.events.notices.count, 1)
        XCTAssertTrue(run.events.notices.first?.contains("HTTP 200 OK") ?? false, "\(run.events.notices)")
        XCTAssertTrue(run.events.notices.first?.contains("continuing with 3 connections") ?? false)
        XCTAssertTrue(run.events.retries.isEmpty)
    }

    func testTooManyRequestsOnTheThirdConnectionClosesIt() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[3] = .init(status: 429)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 4)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [4, 3])
        XCTAssertTrue(run.events.notices.first?.contains("HTTP 429 Too Many Requests") ?? false, "\(run.events.notices)")
    }

    func testUnsatisfiableAndUnavailableDropDownToOneConnection() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[2] = .init(status: 503)
        fault.perConnection[3] = .init(status: 429)
        fault.perConnection[4] = .init(status: 416)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 4)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [4, 3, 2, 1])
        XCTAssertEqual(run.events.notices.count, 3)
    }

    func testLastConnectionRetriesAsOneConnectionWould() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[2] = .init(status: 503)
        fault.perConnection[3] = .init(status: 503)
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        // Two connections: the extra one closes at its 503; the head's next request (the 3rd) is
        // answered 503 too, and being the last it retries after Retry-After, as one connection would.
        var options = Self.options(connections: 2)
        options.maxRetryAfter = 0.01
        let run = try fetch(server.url(), options: options)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.sink.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [2, 1])
        XCTAssertEqual(run.events.retries.count, 1)
    }

    func testETagChangeOnOneRangeIsARemoteChange() throws {
        var fault = FaultServer.Fault()
        fault.perConnection[3] = .init(etag: "\"v2\"")
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 4)
        guard let changed = run.error as? SourceChanged else {
            return XCTFail("expected SourceChanged, got \(String(describing: run.error))")
        }
        XCTAssertTrue(changed.reason.contains("ETag changed from \"v1\" to \"v2\""), changed.reason)
        // Whatever reached the sink is a prefix of the one version.
        XCTAssertEqual(run.sink.bytes, Array(Self.body.prefix(run.sink.bytes.count)))
    }

    func testProgressBarShowsTheConnectionCount() {
        let wide = ProgressRenderer.barLine(offset: 50, total: 100, resumed: true, rate: 10, columns: 120, connections: 8)
        XCTAssertTrue(wide.contains("×8 conn"), wide)
        XCTAssertTrue(wide.contains("(resumed)"), wide)
        let narrow = ProgressRenderer.barLine(offset: 50, total: 100, resumed: false, rate: 10, columns: 24, connections: 8)
        XCTAssertLessThan(narrow.count, 24, narrow)
        XCTAssertFalse(ProgressRenderer.barLine(offset: 1, total: 2, resumed: false, rate: 1).contains("conn"))
    }

    // MARK: Stopping

    func testSinkFailureStopsEveryConnection() throws {
        struct Full: Error {}
        let server = try FaultServer(body: Self.body)
        defer { server.stop() }
        let run = try fetch(server.url(), connections: 8) { total in
            if total > 500_000 { throw Full() }
        }
        XCTAssertTrue(run.error is Full, "\(String(describing: run.error))")
        XCTAssertEqual(run.sink.bytes, Array(Self.body.prefix(run.sink.bytes.count)))
    }

    func testCancelStopsTheRun() throws {
        var fault = FaultServer.Fault()
        fault.bytesPerSecond = 1 << 20
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let log = EventLog()
        let control = RunControl(progress: ProgressReporter(handler: { log.append($0) }))
        let source = try HTTPSource(
            url: server.url(), options: Self.options(connections: 4), resumeFrom: nil,
            control: control)
        let sink = Collector { total in if total > 300_000 { control.cancel() } }
        XCTAssertThrowsError(try source.run(into: sink)) {
            XCTAssertEqual($0 as? SluiceError, .cancelled)
        }
        XCTAssertEqual(sink.bytes, Array(Self.body.prefix(sink.bytes.count)))
    }

    // MARK: Helpers

    private static let tuning: MultiFetch.Tuning = {
        var tuning = MultiFetch.Tuning()
        tuning.windowBytes = 512 << 10
        tuning.minimumSegment = UInt64(segment)
        tuning.maximumSegment = UInt64(segment)
        tuning.minimumSplit = 16 << 10
        return tuning
    }()

    private static func options(connections: Int?, tuning: MultiFetch.Tuning = MultiFetchTests.tuning) -> HTTPOptions {
        var options = HTTPOptions()
        options.backoffBase = 0.01
        options.stallTimeout = 10
        options.connections = connections
        options.tuning = tuning
        return options
    }

    private struct Run {
        let sink: Collector
        let events: EventLog
        let error: Error?
    }

    private func fetch(
        _ url: String, connections: Int?, tuning: MultiFetch.Tuning = MultiFetchTests.tuning,
        resumeFrom: SourceState? = nil, onWrite: ((Int) throws -> Void)? = nil
    ) throws -> Run {
        try fetch(
            url, options: Self.options(connections: connections, tuning: tuning), resumeFrom: resumeFrom,
            onWrite: onWrite)
    }

    private func fetch(
        _ url: String, options: HTTPOptions, resumeFrom: SourceState? = nil,
        onWrite: ((Int) throws -> Void)? = nil
    ) throws -> Run {
        let log = EventLog()
        let control = RunControl(progress: ProgressReporter(handler: { log.append($0) }))
        let source = try HTTPSource(url: url, options: options, resumeFrom: resumeFrom, control: control)
        let sink = Collector(onWrite: onWrite)
        var caught: Error?
        do { try source.run(into: sink) } catch { caught = error }
        return Run(sink: sink, events: log, error: caught)
    }

    /// Keeps every byte written. One thread writes at a time (the head's, then the run's).
    private final class Collector: ByteSink, @unchecked Sendable {
        private(set) var bytes: [UInt8] = []
        private let onWrite: ((Int) throws -> Void)?

        init(onWrite: ((Int) throws -> Void)? = nil) { self.onWrite = onWrite }

        func write(_ buffer: UnsafeRawBufferPointer) throws {
            bytes.append(contentsOf: buffer)
            try onWrite?(bytes.count)
        }

        func barrier(_ cut: Cut) throws { cut.seal(makeDurable: nil) }
        func finish() throws { XCTFail("a source never finishes its sink") }
    }

    private final class EventLog: @unchecked Sendable {
        private let lock = NSLock()
        private var events: [ProgressEvent] = []

        func append(_ event: ProgressEvent) { lock.withLock { events.append(event) } }

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
}
