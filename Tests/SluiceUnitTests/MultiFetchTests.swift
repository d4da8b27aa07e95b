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
        let (run, requests) = try fetch()
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.connections.first, 4)
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
        let (run, _) = try fetch(.init(bytesPerSecond: 4 << 20), options: Self.options(connections: 8))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.connections.first, 8)
    }

    func testDefaultIsOneConnectionBelowTheThreshold() throws {
        let (run, requests) = try fetch(options: Self.options(connections: nil))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(requests.count, 1)
        XCTAssertNil(requests.first?.headers["range"])
        XCTAssertTrue(run.events.connections.isEmpty)
    }

    /// At the threshold, the head fetches a stretch alone; when the network is the slower
    /// (`busyShare` 1 says so whatever the timing), what remains is planned from where the
    /// head stands and four connections share it.
    func testDefaultIsFourConnectionsAtTheThresholdOnceTheNetworkIsTheSlower() throws {
        let (run, requests) = try fetch(options: Self.options(connections: nil, tuning: Self.probing(stretch: 256 << 10, busyShare: 1)))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.connections.first, 4)
        XCTAssertNil(requests.first?.headers["range"])
        let starts = requests.dropFirst().compactMap { $0.headers["range"] }.compactMap { range -> Int? in
            Int(range.dropFirst("bytes=".count).prefix { $0 != "-" })
        }
        XCTAssertFalse(starts.isEmpty)
        // The plan starts after the probe's stretch (the head's first write opens it).
        XCTAssertGreaterThanOrEqual(starts.min() ?? 0, 256 << 10)
    }

    /// While the pipeline is the slower (`busyShare` 0: never enough), one connection does it all.
    func testDefaultStaysOnOneConnectionWhileThePipelineIsTheSlower() throws {
        let (run, requests) = try fetch(options: Self.options(connections: nil, tuning: Self.probing(stretch: 64 << 10, busyShare: 0)))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(requests.count, 1)
        XCTAssertTrue(run.events.connections.isEmpty)
    }

    /// The probe says "more" with less than a segment left: nothing to share, so the head
    /// goes on alone to the end, exactly.
    func testProbeDecidingInTheLastStretchLeavesTheHeadAlone() throws {
        let tuning = Self.probing(stretch: UInt64(Self.size - Self.segment / 2), busyShare: 1)
        let (run, requests) = try fetch(options: Self.options(connections: nil, tuning: tuning))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(requests.count, 1)
        XCTAssertTrue(run.events.connections.isEmpty)
    }

    /// The head drops around the probe's verdict (two 64 KiB stretches after its first write:
    /// before, at, or just after the plan, before
    /// the others start): its retry goes on from where it stands and every byte arrives once.
    func testHeadDroppedAroundTheProbesVerdictIsExact() throws {
        let tuning = Self.probing(stretch: 64 << 10, busyShare: 1)
        for drop in stride(from: 120 << 10, through: 170 << 10, by: 5_000) {
            let (run, _) = try fetch(
                .init(perConnection: [1: .init(dropAfterBodyBytes: drop)]), options: Self.options(connections: nil, tuning: tuning))
            XCTAssertNil(run.error, "drop after \(drop)")
            XCTAssertTrue(run.bytes == Self.body, "drop after \(drop): \(run.bytes.count) bytes")
            XCTAssertEqual(run.events.connections.first, 4, "drop after \(drop)")
        }
    }

    /// The probe's rule on given times: more connections once the pipeline took under a
    /// quarter of two stretches in a row; a stretch where it took more starts the count again.
    func testProbeJudgesEachStretch() {
        var probe = ConnectionProbe(total: 100 << 20, wanted: 4, stretch: 1000)
        XCTAssertEqual(probe.record(500, busy: 0, now: 10), .undecided, "the first write opens the stretch")
        XCTAssertEqual(probe.record(1000, busy: 0.1, now: 11), .undecided, "busy 0.1 s of 1 s: one slow stretch")
        XCTAssertEqual(probe.record(1000, busy: 0.4, now: 12), .undecided, "busy 0.4 s of 1 s: the pipeline is the slower")
        XCTAssertEqual(probe.record(1000, busy: 0.1, now: 13), .undecided, "one slow stretch again")
        XCTAssertEqual(probe.record(400, busy: 0.05, now: 13.5), .undecided, "a stretch not yet full")
        XCTAssertEqual(probe.record(600, busy: 0.05, now: 14), .moreConnections, "busy 0.1 s of 1 s, the second in a row")
        var never = ConnectionProbe(total: 1, wanted: 4, stretch: 1, busyShare: 0)
        XCTAssertEqual(never.record(1, busy: 0, now: 0), .undecided)
        XCTAssertEqual(never.record(1, busy: 0, now: 5), .undecided)
    }

    func testResumePlansFromTheCheckpointOffset() throws {
        let server = try FaultServer(body: Self.body)
        defer { server.stop() }
        let offset = 300_000
        let run = try FetchRun.run(server.url(), options: Self.options(connections: 4), resumeFrom: Self.checkpoint(server.url(), offset: offset))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Array(Self.body[offset...]))
        XCTAssertEqual(server.requests.first?.headers["range"], "bytes=\(offset)-")
        XCTAssertTrue(server.requests.contains { $0.headers["range"] == "bytes=\(offset + Self.segment)-\(offset + 2 * Self.segment - 1)" })
        XCTAssertEqual(run.events.connections.first, 4)
    }

    func testServerWithoutRangesGetsOneConnectionAndANotice() throws {
        let server = try FaultServer(body: Self.body, fault: .init(ignoreRange: true))
        defer { server.stop() }
        // Resuming: the server answers the range with 200; validators confirm, so it is skipped.
        let run = try FetchRun.run(server.url(), options: Self.options(connections: 4), resumeFrom: Self.checkpoint(server.url(), offset: 1_000))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Array(Self.body[1_000...]))
        XCTAssertEqual(server.requests.count, 1)
        XCTAssertTrue(run.events.connections.isEmpty)
    }

    /// Resuming, the head's first answer is a 200 that ignored the Range (skipped up to the
    /// checkpoint) and drops; the retry's 206 comes from further on. The plan must start where
    /// the head stands, not at the checkpoint, or the bytes between are delivered twice.
    func testPlanAfterASkipped200StartsWhereTheHeadStands() throws {
        let offset = 1_000
        for connections in [4, nil] {
            var tuning = Self.tuning
            if connections == nil {
                tuning = Self.probing(stretch: 64 << 10, busyShare: 1)
                tuning.autoThreshold = 1 << 20
            }
            let server = try FaultServer(
                body: Self.body, fault: .init(perConnection: [1: .init(dropAfterBodyBytes: 200_000, ignoreRange: true)]))
            defer { server.stop() }
            let run = try FetchRun.run(
                server.url(), options: Self.options(connections: connections, tuning: tuning),
                resumeFrom: Self.checkpoint(server.url(), offset: offset))
            XCTAssertNil(run.error, "connections=\(String(describing: connections))")
            XCTAssertEqual(run.bytes.count, Self.size - offset, "connections=\(String(describing: connections))")
            XCTAssertTrue(run.bytes == Array(Self.body[offset...]), "connections=\(String(describing: connections))")
            XCTAssertEqual(run.events.connections.first, 4, "connections=\(String(describing: connections))")
        }
    }

    // MARK: Faults on single connections

    func testConnectionDroppedMidSegmentIsRetriedAtItsOffset() throws {
        let (run, requests) = try fetch(.init(perConnection: [3: .init(dropAfterBodyBytes: 10_000)]))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.retries.count, 1)
        // The retry asks for the rest of that segment only.
        let third = requests[2].headers["range"] ?? ""
        let parts = third.dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
        XCTAssertEqual(parts.count, 2)
        let retried = "bytes=\(parts[0] + 10_000)-\(parts[1])"
        XCTAssertTrue(requests.contains { $0.headers["range"] == retried }, "no request for \(retried)")
    }

    func testStalledConnectionIsAbandonedAndRetried() throws {
        let (run, _) = try fetch(
            .init(perConnection: [2: .init(stallAfterBodyBytes: 5_000)]), options: Self.options(connections: 4, stallTimeout: 1))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.retries.count, 1)
        XCTAssertTrue(run.events.retries.first?.reason.contains("no data") ?? false)
    }

    func testStalledHeadIsRetriedWhileOthersWait() throws {
        let (run, _) = try fetch(
            .init(perConnection: [1: .init(stallAfterBodyBytes: 1_000)]), options: Self.options(connections: 16, stallTimeout: 1))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.retries.count, 1)
    }

    func testSlowHeadOfTheLineIsSplit() throws {
        let (run, requests) = try fetch(.init(perConnection: [1: .init(bytesPerSecond: 32 << 10)]))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        // The others filled the window while the head crawled; one took the head's upper half.
        let starts = requests.compactMap { $0.headers["range"] }.compactMap {
            $0.dropFirst("bytes=".count).split(separator: "-").first.flatMap { Int($0) }
        }
        XCTAssertTrue(starts.contains { $0 > 0 && $0 < Self.segment }, "no split of the head segment: \(starts.sorted())")
    }

    func testConnectionAnswered200ClosesWithANotice() throws {
        let (run, _) = try fetch(.init(perConnection: [2: .init(ignoreRange: true)]))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [4, 3])
        XCTAssertEqual(run.events.notices.count, 1)
        XCTAssertTrue(run.events.notices.first?.contains("HTTP 200 OK") ?? false, "\(run.events.notices)")
        XCTAssertTrue(run.events.notices.first?.contains("continuing with 3 connections") ?? false)
        XCTAssertTrue(run.events.retries.isEmpty)
    }

    func testTooManyRequestsOnTheThirdConnectionClosesIt() throws {
        let (run, _) = try fetch(.init(perConnection: [3: .init(status: 429)]))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [4, 3])
        XCTAssertTrue(run.events.notices.first?.contains("HTTP 429 Too Many Requests") ?? false, "\(run.events.notices)")
    }

    func testUnsatisfiableAndUnavailableDropDownToOneConnection() throws {
        let (run, _) = try fetch(.init(perConnection: [2: .init(status: 503), 3: .init(status: 429), 4: .init(status: 416)]))
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [4, 3, 2, 1])
        XCTAssertEqual(run.events.notices.count, 3)
    }

    /// README: "Fewer connections, never a new error". A server that refuses every range (416)
    /// but serves the whole resource, as one connection fetches it: the last connection's
    /// refusal ends the ranges, and the rest comes from one request for the whole resource,
    /// its first bytes (already delivered) skipped.
    func testServerRefusingEveryRangeFallsBackToOneWholeRequest() throws {
        let (run, requests) = try fetch(.init(always416: true))
        XCTAssertNil(run.error)
        XCTAssertTrue(run.bytes == Self.body, "\(run.bytes.count) bytes, not the body")
        XCTAssertEqual(run.events.connections, [4, 3, 2, 1])
        XCTAssertTrue(
            run.events.notices.last?.contains("asking for the whole resource") ?? false, "\(run.events.notices)")
        // The last request is the whole resource again, without a Range.
        XCTAssertNil(requests.last?.headers["range"], "\(requests.map { $0.headers["range"] ?? "-" })")
        // One connection needs nothing more than its single request.
        let (single, _) = try fetch(.init(always416: true), options: Self.options(connections: 1))
        XCTAssertNil(single.error)
        XCTAssertTrue(single.bytes == Self.body)
    }

    /// A server that ignores ranges (200 to each) with two connections: the last connection's
    /// 200 ends the ranges the same way, rather than downloading from byte 0 once per segment.
    func testServerIgnoringRangesFallsBackToOneWholeRequest() throws {
        let (run, requests) = try fetch(.init(ignoreRange: true), options: Self.options(connections: 2))
        XCTAssertNil(run.error)
        XCTAssertTrue(run.bytes == Self.body, "\(run.bytes.count) bytes, not the body")
        XCTAssertLessThanOrEqual(requests.count, 4, "\(requests.map { $0.headers["range"] ?? "-" })")
    }

    /// README: "Fewer connections, never a new error". A server whose 206 to a bounded range has
    /// no Content-Range, or one starting elsewhere (the head asks without a Range, so only the
    /// extra connections see it): each such connection closes, and the rest comes from one
    /// whole request, exactly as `connections=1` fetches it.
    func testMisplacedPartialContentOnExtraConnectionsFallsBackToOneWholeRequest() throws {
        let faults: [(String, FaultServer.Fault)] = [
            ("no Content-Range", .init(omitContentRange: true)),
            ("shifted Content-Range", .init(wrongContentRangeShift: 1)),
        ]
        for (name, fault) in faults {
            let (run, requests) = try fetch(fault)
            XCTAssertNil(run.error, name)
            XCTAssertTrue(run.bytes == Self.body, "\(name): \(run.bytes.count) bytes, not the body")
            XCTAssertEqual(run.events.connections, [4, 3, 2, 1], name)
            XCTAssertTrue(run.events.notices.first?.contains("HTTP 206 Partial Content") ?? false, "\(run.events.notices)")
            XCTAssertTrue(
                run.events.notices.last?.contains("asking for the whole resource") ?? false, "\(name): \(run.events.notices)")
            XCTAssertNil(requests.last?.headers["range"], name)
            let (single, _) = try fetch(fault, options: Self.options(connections: 1))
            XCTAssertNil(single.error, name)
            XCTAssertTrue(single.bytes == Self.body, name)
        }
    }

    /// The same answer to the first connection's own request (a resume's open range) keeps the
    /// single transfer's rule: refused as a protocol violation.
    func testMisplacedPartialContentOnTheFirstConnectionIsStillRefused() throws {
        let server = try FaultServer(body: Self.body, fault: .init(omitContentRange: true))
        defer { server.stop() }
        let run = try FetchRun.run(
            server.url(), options: Self.options(connections: 4), resumeFrom: Self.checkpoint(server.url(), offset: 1000))
        XCTAssertNotNil(run.error)
        XCTAssertTrue(String(describing: run.error).contains("Content-Range"), "\(String(describing: run.error))")
    }

    func testLastConnectionRetriesAsOneConnectionWould() throws {
        // Two connections: the extra one closes at its 503; the head's next request (the 3rd) is
        // answered 503 too, and being the last it retries after Retry-After, as one connection would.
        var options = Self.options(connections: 2)
        options.maxRetryAfter = 0.01
        let (run, _) = try fetch(.init(perConnection: [2: .init(status: 503), 3: .init(status: 503)]), options: options)
        XCTAssertNil(run.error)
        XCTAssertEqual(run.bytes, Self.body)
        XCTAssertEqual(run.events.connections, [2, 1])
        XCTAssertEqual(run.events.retries.count, 1)
    }

    func testETagChangeOnOneRangeIsARemoteChange() throws {
        let (run, _) = try fetch(.init(perConnection: [3: .init(etag: "\"v2\"")]))
        guard let changed = run.error as? SourceChanged else {
            return XCTFail("expected SourceChanged, got \(String(describing: run.error))")
        }
        XCTAssertTrue(changed.reason.contains("ETag changed from \"v1\" to \"v2\""), changed.reason)
        // Whatever reached the sink is a prefix of the one version.
        XCTAssertEqual(run.bytes, Array(Self.body.prefix(run.bytes.count)))
    }

    /// A resumed run whose head found the content as the checkpoint recorded it, and whose
    /// extra range then met another ETag: that change happened during this run, and the
    /// restart said "since the checkpoint".
    func testAnETagChangeOnAnExtraRangeOfAResumedRunHappenedDuringTheRun() throws {
        let server = try FaultServer(body: Self.body, fault: .init(perConnection: [3: .init(etag: "\"v2\"")]))
        defer { server.stop() }
        let run = try FetchRun.run(
            server.url(), options: Self.options(connections: 4), resumeFrom: Self.checkpoint(server.url(), offset: 300_000))
        guard let changed = run.error as? SourceChanged else {
            return XCTFail("expected SourceChanged, got \(String(describing: run.error))")
        }
        XCTAssertTrue(changed.reason.contains("ETag changed from \"v1\" to \"v2\""), changed.reason)
        XCTAssertTrue(changed.duringRun, "the head found the recorded version: the change came during this run")
        let decided = AfterAttempt.decide(
            .sourceChanged(location: changed.location, reason: changed.reason, duringRun: changed.duringRun),
            .init(sinkCanStartOver: true, startedOver: false, resumed: true, checkpointKept: true))
        guard case .startOver(let reason) = decided else { return XCTFail("\(decided)") }
        XCTAssertTrue(reason.contains("changed during the transfer"), reason)
        XCTAssertFalse(reason.contains("since the checkpoint"), reason)
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
        let (run, _) = try fetch(options: Self.options(connections: 8)) { total in
            if total > 500_000 { throw Full() }
        }
        XCTAssertTrue(run.error is Full, "\(String(describing: run.error))")
        XCTAssertEqual(run.bytes, Array(Self.body.prefix(run.bytes.count)))
    }

    func testCancelStopsTheRun() throws {
        let server = try FaultServer(body: Self.body, fault: .init(bytesPerSecond: 1 << 20))
        defer { server.stop() }
        let log = FetchEventLog()
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

    /// The default (no N) at the threshold, with the probe's stretch and verdict rule set.
    private static func probing(stretch: UInt64, busyShare: Double) -> MultiFetch.Tuning {
        var tuning = Self.tuning
        tuning.autoThreshold = UInt64(Self.size)
        tuning.probeBytes = stretch
        tuning.busyShare = busyShare
        return tuning
    }

    private static func options(
        connections: Int?, tuning: MultiFetch.Tuning = MultiFetchTests.tuning, stallTimeout: Double = 10
    ) -> HTTPOptions {
        var options = FetchRun.options()
        options.stallTimeout = stallTimeout
        options.connections = connections
        options.tuning = tuning
        return options
    }

    private static func checkpoint(_ url: String, offset: Int) -> SourceState {
        faultServerCheckpoint(url, offset: UInt64(offset), totalLength: size)
    }

    /// Fetches the body from a FaultServer that misbehaves as `fault` says: the run, and every
    /// request the server saw.
    private func fetch(
        _ fault: FaultServer.Fault = .init(), options: HTTPOptions = MultiFetchTests.options(connections: 4),
        onWrite: ((Int) throws -> Void)? = nil
    ) throws -> (run: FetchRun, requests: [FaultServer.Request]) {
        let server = try FaultServer(body: Self.body, fault: fault)
        defer { server.stop() }
        let run = try FetchRun.run(server.url(), options: options, onWrite: onWrite)
        return (run, server.requests)
    }
}
