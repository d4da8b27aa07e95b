import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Drives `HTTPSource` directly into a collecting sink against the in-process FaultServer
/// (and file:// URLs), checking exact bytes, the error thrown, and that resumes really resume.
final class HTTPSourceTests: XCTestCase {
    private static let size = 100_000
    private static let body: [UInt8] = (0..<size).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ ($0 >> 8)) }
    private static let otherBody: [UInt8] = (0..<size + 5).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }

    // MARK: Plain transfers

    func testPlainFetchDeliversEveryByteAndRecordsValidators() throws {
        try withFaultServer(body: Self.body) { server in
            let run = try fetch(server.url())
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertEqual(run.source.state(at: 42), Self.checkpoint(server.url(), offset: 42))
            let requests = server.requests
            XCTAssertEqual(requests.count, 1)
            XCTAssertNil(requests.first?.headers["range"])
            XCTAssertNil(requests.first?.headers["if-range"])
            XCTAssertTrue(run.events.retries.isEmpty)
        }
    }

    func testResponseWithoutContentLength() throws {
        try withFaultServer(body: Self.body, fault: { $0.omitContentLength = true }) { server in
            let run = try fetch(server.url())
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertNil(run.source.state(at: 0).totalLength)
            XCTAssertEqual(run.source.state(at: 0).etag, "\"v1\"")
        }
    }

    func testChunkedResponse() throws {
        try withFaultServer(body: Self.body, fault: { $0.chunked = true }) { server in
            let run = try fetch(server.url())
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertEqual(server.requests.count, 1)
        }
    }

    // MARK: Transient failures within one run

    func testDropsAreResumedWithRangeEachTime() throws {
        try withFaultServer(body: Self.body, fault: { $0.dropAfterBodyBytes = 8_000 }) { server in
            // 13 responses, 12 drops: more than `retries` (5), but each one made progress.
            let run = try fetch(server.url())
            server.stop()
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertLessThan(Double(server.totalBodyBytesSent), 1.2 * Double(Self.size))
            let requests = server.requests
            XCTAssertEqual(requests.count, 13)
            for (index, request) in requests.enumerated().dropFirst() {
                XCTAssertEqual(request.headers["range"], "bytes=\(index * 8_000)-")
                XCTAssertEqual(request.headers["if-range"], "\"v1\"")
            }
            XCTAssertEqual(run.events.retries.count, 12)
            XCTAssertTrue(run.events.retries.allSatisfy { $0.attempt == 1 }, "progress resets the count")
        }
    }

    func testChunkedDropsAreResumed() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.chunked = true
                $0.dropAfterBodyBytes = 30_000
            }
        ) { server in
            let run = try fetch(server.url())
            server.stop()
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertLessThan(Double(server.totalBodyBytesSent), 1.2 * Double(Self.size))
            XCTAssertEqual(server.requests.count, 4)
        }
    }

    func testFailuresWithoutProgressExhaustRetries() throws {
        try withFaultServer(body: Self.body, fault: { $0.dropAfterBodyBytes = 0 }) { server in
            var options = Self.options()
            options.retries = 3
            let run = try fetch(server.url(), options: options)
            assertTransfer(run.error, url: server.url(), mentions: ["gave up after 3 retries"])
            XCTAssertTrue(run.sink.bytes.isEmpty)
            XCTAssertEqual(server.requests.count, 4)
            XCTAssertEqual(run.events.retries.map(\.attempt), [1, 2, 3])
        }
    }

    func testServiceUnavailableHonoursRetryAfter() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.unavailableCount = 1
                $0.retryAfterSeconds = 1
            }
        ) { server in
            let run = try fetch(server.url())
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertEqual(server.requests.count, 2)
            let retries = run.events.retries
            XCTAssertEqual(retries.count, 1)
            XCTAssertEqual(retries.first?.delay, 1.0, "Retry-After wins over the 0.01 s backoff")
            XCTAssertTrue(
                retries.first?.reason.contains("HTTP 503 Service Unavailable from 127.0.0.1:\(server.port)") ?? false,
                retries.first?.reason ?? "")
        }
    }

    func testRetryAfterIsCappedAndServerErrorsExhaustRetries() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.unavailableCount = 100
                $0.retryAfterSeconds = 3_600
            }
        ) { server in
            var options = Self.options()
            options.retries = 2
            options.maxRetryAfter = 0.02
            let run = try fetch(server.url(), options: options)
            assertTransfer(run.error, url: server.url(), mentions: ["HTTP 503", "gave up after 2 retries"])
            XCTAssertEqual(run.events.retries.map(\.delay), [0.02, 0.02])
            XCTAssertEqual(server.requests.count, 3)
        }
    }

    func testStallIsAbandonedAndResumed() throws {
        try withFaultServer(body: Self.body, fault: { $0.stallAfterBodyBytes = 20_000 }) { server in
            var options = Self.options()
            options.stallTimeout = 1
            let run = try fetch(server.url(), options: options)
            server.stop()
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertEqual(run.events.retries.count, 1)
            XCTAssertTrue(run.events.retries.first?.reason.contains("no data") ?? false)
            XCTAssertEqual(server.requests.count, 2)
            XCTAssertEqual(server.requests.last?.headers["range"], "bytes=20000-")
            XCTAssertLessThan(Double(server.totalBodyBytesSent), 1.2 * Double(Self.size))
        }
    }

    func testConnectionRefusedExhaustsRetries() throws {
        let closed = try FaultServer(body: [])
        let url = closed.url()
        closed.stop()
        var options = Self.options()
        options.retries = 2
        let run = try fetch(url, options: options)
        assertTransfer(run.error, url: url, mentions: ["gave up after 2 retries"])
        XCTAssertEqual(run.events.retries.count, 2)
    }

    // MARK: Resume decisions

    func testResumeWhenServerIgnoresRangeSkipsDeliveredBytes() throws {
        try withFaultServer(body: Self.body, fault: { $0.ignoreRange = true }) { server in
            let saved = Self.checkpoint(server.url(), offset: 30_000)
            let run = try fetch(server.url(), resumeFrom: saved)
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Array(Self.body[30_000...]))
            XCTAssertEqual(server.requests.first?.headers["range"], "bytes=30000-")
            XCTAssertEqual(server.requests.first?.headers["if-range"], "\"v1\"")
            XCTAssertEqual(run.source.state(at: 7), Self.checkpoint(server.url(), offset: 7))
        }
    }

    func testResumeFromCheckpointUsesRange() throws {
        try withFaultServer(body: Self.body) { server in
            let run = try fetch(server.url(), resumeFrom: Self.checkpoint(server.url(), offset: 60_000))
            server.stop()
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Array(Self.body[60_000...]))
            XCTAssertEqual(server.totalBodyBytesSent, Self.size - 60_000)
        }
    }

    /// Without ETag or Last-Modified only the length can show the content unchanged: the
    /// resume goes on, and says so once; with a validator it says nothing.
    func testResumeOnTheLengthAloneIsNoticed() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.omitValidators()
            }
        ) { server in
            var saved = Self.checkpoint(server.url(), offset: 60_000)
            saved.etag = nil
            saved.lastModified = nil
            let run = try fetch(server.url(), resumeFrom: saved)
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Array(Self.body[60_000...]))
            XCTAssertEqual(run.events.notices.filter { $0.contains("only the length") }.count, 1, "\(run.events.notices)")
        }
        try withFaultServer(body: Self.body) { server in
            let run = try fetch(server.url(), resumeFrom: Self.checkpoint(server.url(), offset: 60_000))
            XCTAssertNil(run.error)
            XCTAssertFalse(run.events.notices.contains { $0.contains("only the length") }, "\(run.events.notices)")
        }
    }

    func testServerIgnoringRangeMidRunIsSkippedToTheOffset() throws {
        try withFaultServer(body: Self.body, fault: { $0.dropAfterBodyBytes = 40_000 }) { server in
            var ignoring = FaultServer.Fault()
            ignoring.ignoreRange = true
            // Once the first (dropped) response is in, the server stops honouring ranges.
            let run = try fetch(server.url()) { total in
                if total == 40_000 { server.setFault(ignoring) }
            }
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertEqual(server.requests.count, 2)
        }
    }

    func testContentChangeBetweenRequestsIsSourceChanged() throws {
        try withFaultServer(body: Self.body, fault: { $0.dropAfterBodyBytes = 30_000 }) { server in
            let run = try fetch(server.url()) { total in
                if total == 30_000 {
                    server.replaceBody(Self.otherBody, etag: "\"v2\"", lastModified: "Thu, 02 Jan 2025 00:00:00 GMT")
                }
            }
            assertChanged(run.error, url: server.url(), mentions: "\"v2\"")
            XCTAssertEqual((run.error as? SourceChanged)?.duringRun, true, "it changed during the run, not between runs")
            XCTAssertEqual(run.sink.bytes, Array(Self.body[..<30_000]), "nothing of the new version is spliced in")
            XCTAssertEqual(server.requests.count, 2)
        }
    }

    func testResumeAgainstNewETagIsSourceChanged() throws {
        try withFaultServer(body: Self.otherBody, etag: "\"v2\"") { server in
            let run = try fetch(server.url(), resumeFrom: Self.checkpoint(server.url(), offset: 30_000))
            assertChanged(run.error, url: server.url(), mentions: "ETag")
            XCTAssertEqual((run.error as? SourceChanged)?.duringRun, false, "it changed between the runs")
            XCTAssertTrue(run.sink.bytes.isEmpty)
        }
    }

    func testResumeWithNewTotalLengthIsSourceChanged() throws {
        try withFaultServer(body: Self.body) { server in
            var saved = Self.checkpoint(server.url(), offset: 30_000)
            saved.totalLength = UInt64(Self.size * 2)
            let run = try fetch(server.url(), resumeFrom: saved)
            assertChanged(run.error, url: server.url(), mentions: "length")
            XCTAssertTrue(run.sink.bytes.isEmpty)
        }
    }

    func testIgnoredRangeWithoutValidatorsIsSourceChanged() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.ignoreRange = true
                $0.omitValidators()
            }
        ) { server in
            let saved = SourceState(kind: "fetch", location: server.url(), offset: 30_000, totalLength: UInt64(Self.size))
            let run = try fetch(server.url(), resumeFrom: saved)
            assertChanged(run.error, url: server.url(), mentions: "ignored the range")
            XCTAssertTrue(run.sink.bytes.isEmpty)
        }
    }

    func testWrongContentRangeIsNeverSpliced() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.dropAfterBodyBytes = 30_000
                $0.wrongContentRangeShift = 10
            }
        ) { server in
            let run = try fetch(server.url())
            assertTransfer(run.error, url: server.url(), mentions: ["Content-Range 'bytes 30010-99999/100000'", "30000"])
            XCTAssertEqual(run.sink.bytes, Array(Self.body[..<30_000]))
            XCTAssertEqual(server.requests.count, 2)
            XCTAssertEqual(run.events.retries.count, 1, "only the drop was retried")
        }
    }

    func testRangeNotSatisfiableAtTheEndMeansComplete() throws {
        try withFaultServer(body: Self.body) { server in
            let run = try fetch(server.url(), resumeFrom: Self.checkpoint(server.url(), offset: UInt64(Self.size)))
            XCTAssertNil(run.error)
            XCTAssertTrue(run.sink.bytes.isEmpty)
            XCTAssertEqual(server.requests.count, 1)
            XCTAssertEqual(server.requests.first?.headers["range"], "bytes=100000-")
        }
    }

    func testRangeNotSatisfiableElsewhereIsSourceChanged() throws {
        try withFaultServer(body: Self.body, fault: { $0.always416 = true }) { server in
            let run = try fetch(server.url(), resumeFrom: Self.checkpoint(server.url(), offset: 30_000))
            assertChanged(run.error, url: server.url(), mentions: "416")
            // Same validators, same length: the message must not claim the length changed.
            assertChanged(run.error, url: server.url(), mentions: "holds \(Self.size) bytes, yet refuses that range")
            XCTAssertTrue(run.sink.bytes.isEmpty)
        }
    }

    // MARK: Permanent failures

    func testNotFoundFailsAtOnce() throws {
        try withFaultServer(body: Self.body, fault: { $0.status = 404 }) { server in
            let run = try fetch(server.url())
            assertTransfer(run.error, url: server.url(), mentions: ["HTTP 404 Not Found from 127.0.0.1:\(server.port)"])
            XCTAssertEqual(server.requests.count, 1)
            XCTAssertTrue(run.events.retries.isEmpty)
            XCTAssertTrue(run.sink.bytes.isEmpty)
        }
    }

    /// libcurl answers a header line over its limit with "Out of memory"; the message must
    /// point at the server too, and nothing is retried.
    func testOversizedHeaderLineNamesTheServer() throws {
        let line = "X-Junk: " + String(repeating: "a", count: 200 << 10)
        try withFaultServer(body: Self.body, fault: { $0.extraHeaders = [line] }) { server in
            let run = try fetch(server.url())
            assertTransfer(run.error, url: server.url(), mentions: ["127.0.0.1:\(server.port) sends a response header line over"])
            XCTAssertTrue(run.events.retries.isEmpty)
            XCTAssertTrue(run.sink.bytes.isEmpty)
        }
    }

    func testForbiddenFailsAtOnce() throws {
        try withFaultServer(body: Self.body, fault: { $0.status = 403 }) { server in
            let run = try fetch(server.url())
            assertTransfer(run.error, url: server.url(), mentions: ["HTTP 403 Forbidden"])
            XCTAssertEqual(server.requests.count, 1)
        }
    }

    // MARK: Redirects

    func testRedirectToAnotherHostDropsCredentials() throws {
        try withFaultServer(body: Self.body) { server in
            let target = "http://localhost:\(server.port)/data.bin"
            let url = server.url("/redirect?to=\(Self.encode(target))&code=302")
            var options = Self.options()
            options.headers = ["Authorization: Bearer secret", "Cookie: session=1", "X-Trace: abc"]
            let run = try fetch(url, options: options)
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            let requests = server.requests
            XCTAssertEqual(requests.count, 2)
            XCTAssertEqual(requests[0].headers["authorization"], "Bearer secret")
            XCTAssertEqual(requests[0].headers["cookie"], "session=1")
            XCTAssertEqual(requests[1].host, "localhost:\(server.port)")
            XCTAssertEqual(requests[1].path, "/data.bin")
            XCTAssertNil(requests[1].headers["authorization"])
            XCTAssertNil(requests[1].headers["cookie"])
            XCTAssertEqual(requests[1].headers["x-trace"], "abc")
            XCTAssertEqual(
                run.source.state(at: 0).location, DisplayText.redactedURL(url),
                "the checkpoint keeps the original URL, without its query values")
        }
    }

    func testRelativeSameHostRedirectKeepsCredentials() throws {
        try withFaultServer(body: Self.body) { server in
            let url = server.url("/redirect?to=\(Self.encode("/data.bin"))&code=307")
            var options = Self.options()
            options.headers = ["authorization: Bearer secret", "Cookie: session=1"]
            let run = try fetch(url, options: options)
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            let requests = server.requests
            XCTAssertEqual(requests.count, 2)
            XCTAssertEqual(requests[1].path, "/data.bin")
            XCTAssertEqual(requests[1].headers["authorization"], "Bearer secret")
            XCTAssertEqual(requests[1].headers["cookie"], "session=1")
        }
    }

    func testRetriesGoStraightToTheRedirectTarget() throws {
        try withFaultServer(body: Self.body, fault: { $0.dropAfterBodyBytes = 40_000 }) { server in
            let run = try fetch(server.url("/redirect?to=\(Self.encode("/data.bin"))"))
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body)
            XCTAssertEqual(server.requests.map(\.path).dropFirst(), ["/data.bin", "/data.bin", "/data.bin"])
            XCTAssertEqual(server.requests.last?.headers["range"], "bytes=80000-")
        }
    }

    func testFailingRedirectTargetFallsBackToTheOriginalURLOnce() throws {
        try withFaultServer(body: Self.body, fault: { $0.dropAfterBodyBytes = 40_000 }) { server in
            var gone = FaultServer.Fault()
            gone.status = 410
            let url = server.url("/redirect?to=\(Self.encode("/data.bin"))")
            // After the first (dropped) response the target answers 410, as an expired signed URL would.
            let run = try fetch(url) { total in
                if total == 40_000 { server.setFault(gone) }
            }
            assertTransfer(run.error, url: url, mentions: ["HTTP 410 Gone from 127.0.0.1:\(server.port)"])
            XCTAssertEqual(run.sink.bytes, Array(Self.body[..<40_000]))
            let paths = server.requests.map { $0.path.hasPrefix("/redirect") ? "R" : $0.path }
            XCTAssertEqual(paths, ["R", "/data.bin", "/data.bin", "R", "/data.bin"])
        }
    }

    func testRedirectLoopFails() throws {
        try withFaultServer(body: Self.body) { server in
            let run = try fetch(server.url("/redirect-loop"))
            assertTransfer(run.error, url: server.url("/redirect-loop"), mentions: ["too many redirects"])
            XCTAssertEqual(server.requests.count, 11, "the original request and 10 redirects")
            XCTAssertTrue(run.events.retries.isEmpty)
        }
    }

    func testRedirectPolicyRefusesDowngradeAndOtherSchemes() throws {
        // The https leg needs TLS (covered with nginx elsewhere); the rule itself is checked here.
        let original = try XCTUnwrap(FetchURL("https://example.org/data.bin"))
        let policy = RedirectPolicy(original: original)
        XCTAssertThrowsError(try policy.follow("http://example.org/data.bin", from: original, hops: 1)) { error in
            guard case FetchFailure.permanent(.redirect(let reason))? = error as? FetchFailure else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("insecure"), reason)
        }
        XCTAssertThrowsError(try policy.follow("file:///etc/passwd", from: original, hops: 1))
        XCTAssertThrowsError(try policy.follow("/x", from: original, hops: 11))
        let next = try policy.follow("/mirror/data.bin?x=1", from: original, hops: 10)
        XCTAssertEqual(next.text, "https://example.org/mirror/data.bin?x=1")
        XCTAssertEqual(policy.headers(["Authorization: a", "X-A: b"], for: next), ["Authorization: a", "X-A: b"])
        let elsewhere = try XCTUnwrap(FetchURL("https://example.org:8443/"))
        XCTAssertEqual(
            policy.headers(["Authorization: a", "PROXY-Authorization: c", "X-A: b"], for: elsewhere),
            ["X-A: b"])
        // The default port is the same origin.
        XCTAssertEqual(
            policy.headers(["Cookie: a"], for: try XCTUnwrap(FetchURL("https://EXAMPLE.org:443/y"))),
            ["Cookie: a"])
    }

    // MARK: file://

    func testFileURLFetchAndResume() throws {
        let path = try Self.temporaryFile(Self.body)
        defer { unlink(path) }
        let url = "file://" + path
        let first = try fetch(url)
        XCTAssertNil(first.error)
        XCTAssertEqual(first.sink.bytes, Self.body)
        let saved = first.source.state(at: 30_000)
        XCTAssertEqual(saved.totalLength, UInt64(Self.size))
        XCTAssertNotNil(saved.lastModified)

        let resumed = try fetch(url, resumeFrom: saved)
        XCTAssertNil(resumed.error)
        XCTAssertEqual(resumed.sink.bytes, Array(Self.body[30_000...]))

        let atEnd = try fetch(url, resumeFrom: first.source.state(at: UInt64(Self.size)))
        XCTAssertNil(atEnd.error)
        XCTAssertTrue(atEnd.sink.bytes.isEmpty)
    }

    func testFileURLChangedSinceCheckpoint() throws {
        let path = try Self.temporaryFile(Self.body)
        defer { unlink(path) }
        let url = "file://" + path
        var saved = SourceState(kind: "fetch", location: url, offset: 30_000)
        saved.totalLength = UInt64(Self.size + 1)
        let grown = try fetch(url, resumeFrom: saved)
        assertChanged(grown.error, url: url, mentions: "length")
        XCTAssertTrue(grown.sink.bytes.isEmpty)

        saved.totalLength = nil
        saved.offset = UInt64(Self.size + 10)
        let beyond = try fetch(url, resumeFrom: saved)
        assertChanged(beyond.error, url: url, mentions: "shorter")
        XCTAssertTrue(beyond.sink.bytes.isEmpty)
    }

    func testMissingFileFailsAtOnce() throws {
        let url = "file:///nonexistent/sluice-\(getpid())/data.bin"
        let run = try fetch(url)
        assertTransfer(run.error, url: url, mentions: ["/nonexistent/"])
        XCTAssertTrue(run.events.retries.isEmpty)
    }

    // MARK: Cancellation, sink errors, options

    func testStopDuringTransferThrowsCancelled() throws {
        try withFaultServer(body: Self.body, fault: { $0.bytesPerSecond = 50_000 }) { server in
            let log = EventLog()
            let control = RunControl(progress: ProgressReporter(handler: { log.append($0) }))
            let sink = Collector { _ in control.cancel() }
            let source = try HTTPSource(url: server.url(), options: Self.options(), resumeFrom: nil, control: control)
            XCTAssertThrowsError(try source.run(into: sink)) { error in
                XCTAssertEqual(error as? SluiceError, .cancelled)
            }
            XCTAssertLessThan(sink.bytes.count, Self.size)
        }
    }

    func testStopDuringBackoffEndsTheWaitPromptly() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.unavailableCount = 1
                $0.retryAfterSeconds = 120
            }
        ) { server in
            let log = EventLog()
            let control = RunControl(progress: ProgressReporter(handler: { log.append($0) }))
            log.onRetry = { control.cancel() }
            let source = try HTTPSource(url: server.url(), options: Self.options(), resumeFrom: nil, control: control)
            let started = Date()
            XCTAssertThrowsError(try source.run(into: Collector())) { error in
                XCTAssertEqual(error as? SluiceError, .cancelled)
            }
            XCTAssertEqual(log.retries.first?.delay, 120)
            XCTAssertLessThan(Date().timeIntervalSince(started), 10, "the 120 s Retry-After wait was cut short")
            XCTAssertEqual(server.requests.count, 1)
        }
    }

    func testSinkErrorIsRethrownUnchanged() throws {
        struct Full: Error, Equatable {}
        try withFaultServer(body: Self.body) { server in
            let control = RunControl(progress: ProgressReporter(handler: nil))
            let sink = Collector { _ in throw Full() }
            let source = try HTTPSource(url: server.url(), options: Self.options(), resumeFrom: nil, control: control)
            XCTAssertThrowsError(try source.run(into: sink)) { error in
                XCTAssertEqual(error as? Full, Full())
            }
            XCTAssertEqual(server.requests.count, 1)
        }
    }

    func testWarningsAndOwnedHeaders() throws {
        try withFaultServer(body: Self.body) { server in
            var options = Self.options()
            options.insecure = true
            options.headers = ["Range: bytes=5-", "X-Keep: 1"]
            let run = try fetch(server.url(), options: options)
            XCTAssertNil(run.error)
            XCTAssertEqual(run.sink.bytes, Self.body, "a user Range must not corrupt the offsets")
            XCTAssertTrue(run.source.warnings.contains("warning: --insecure: TLS certificates are not verified"))
            XCTAssertTrue(run.source.warnings.contains { $0.contains("Range") })
            XCTAssertNil(server.requests.first?.headers["range"])
            XCTAssertEqual(server.requests.first?.headers["x-keep"], "1")
        }
    }

    func testNotAURLIsAUsageError() {
        let control = RunControl(progress: ProgressReporter(handler: nil))
        XCTAssertThrowsError(
            try HTTPSource(
                url: "ftp://example.org/x", options: HTTPOptions(), resumeFrom: nil,
                control: control)
        ) { error in
            guard case .usage? = error as? SluiceError else { return XCTFail("\(error)") }
        }
    }

    // MARK: Parsing

    func testContentRangeParsing() {
        XCTAssertEqual(ContentRange("bytes 10-19/100")?.kind, .bytes(first: 10, last: 19))
        XCTAssertEqual(ContentRange("bytes 10-19/100")?.total, 100)
        XCTAssertEqual(ContentRange("bytes 10-19/*")?.total, nil)
        XCTAssertEqual(ContentRange("bytes */100")?.kind, .unsatisfied)
        XCTAssertNil(ContentRange("bytes 19-10/100"))
        XCTAssertNil(ContentRange("bytes 10-100/100"))
        XCTAssertNil(ContentRange("items 1-2/3"))
        XCTAssertNil(ContentRange("bytes */*"))
    }

    func testResponseHeadSkipsInterimResponses() {
        var head = HTTPResponseHead()
        for line in [
            "HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 206 Partial Content\r\n",
            "ETag: \"a\"\r\n", "Content-Range: bytes 5-9/10\r\n",
        ] {
            XCTAssertEqual(head.consume(line), .needMore)
        }
        XCTAssertEqual(head.consume("\r\n"), .complete)
        XCTAssertEqual(head.status, 206)
        XCTAssertEqual(head["etag"], "\"a\"")
        XCTAssertEqual(head.contentRange?.kind, .bytes(first: 5, last: 9))

        var h2 = HTTPResponseHead()
        _ = h2.consume("HTTP/2 404\r\n")
        XCTAssertEqual(h2.statusText, "404 Not Found")
    }

    func testRetryAfterAcceptsAnHTTPDate() {
        var head = HTTPResponseHead()
        _ = head.consume("HTTP/1.1 503 Service Unavailable\r\n")
        let soon = Date().addingTimeInterval(120)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        _ = head.consume("Retry-After: \(formatter.string(from: soon))\r\n")
        let delay = head.retryAfter ?? -1
        XCTAssertGreaterThan(delay, 100)
        XCTAssertLessThanOrEqual(delay, 121)
    }

    func testValidatorComparison() {
        let known = FetchValidators(etag: "\"a\"", lastModified: "Mon", totalLength: 10)
        XCTAssertTrue(known.isConfirmed(by: FetchValidators(etag: "\"a\"", lastModified: "Tue", totalLength: 10)))
        XCTAssertNotNil(known.contradiction(by: FetchValidators(etag: "\"b\"", lastModified: "Mon")))
        XCTAssertNotNil(known.contradiction(by: FetchValidators(etag: "\"a\"", totalLength: 11)))
        XCTAssertFalse(FetchValidators(etag: "W/\"a\"").isConfirmed(by: FetchValidators(etag: "W/\"a\"")))
        XCTAssertNil(FetchValidators(etag: "W/\"a\"", lastModified: "Mon").ifRange, "a Last-Modified not shown strong")
        XCTAssertEqual(FetchValidators(etag: "W/\"a\"", lastModified: "Mon", lastModifiedIsStrong: true).ifRange, "Mon")
        XCTAssertEqual(known.ifRange, "\"a\"")
    }

    // MARK: Helpers

    private typealias Run = FetchRun
    private typealias EventLog = FetchEventLog

    private static func options() -> HTTPOptions { FetchRun.options() }

    private func fetch(
        _ url: String, options: HTTPOptions = FetchRun.options(), resumeFrom: SourceState? = nil,
        onWrite: ((Int) throws -> Void)? = nil
    ) throws -> Run {
        try FetchRun.run(url, options: options, resumeFrom: resumeFrom, onWrite: onWrite)
    }

    private static func checkpoint(_ url: String, offset: UInt64) -> SourceState {
        faultServerCheckpoint(url, offset: offset, totalLength: size)
    }

    private static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }

    private static func temporaryFile(_ bytes: [UInt8]) throws -> String {
        let path = NSTemporaryDirectory() + "sluice-http-\(getpid())-\(UUID().uuidString).bin"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    private func assertTransfer(
        _ error: Error?, url: String, mentions words: [String],
        file: StaticString = #filePath, line: UInt = #line
    ) {
        guard let failure = error as? SluiceError, case .transfer(let failedURL, _, _) = failure else {
            return XCTFail("expected .transfer, got \(String(describing: error))", file: file, line: line)
        }
        let reason = failure.description
        XCTAssertEqual(failedURL, DisplayText.redactedURL(url), file: file, line: line)
        for word in words {
            XCTAssertTrue(reason.contains(word), "'\(reason)' does not mention '\(word)'", file: file, line: line)
        }
    }

    private func assertChanged(
        _ error: Error?, url: String, mentions word: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        guard let changed = error as? SourceChanged else {
            return XCTFail("expected SourceChanged, got \(String(describing: error))", file: file, line: line)
        }
        XCTAssertEqual(changed.location, DisplayText.redactedURL(url), file: file, line: line)
        XCTAssertTrue(
            changed.reason.contains(word), "'\(changed.reason)' does not mention '\(word)'",
            file: file, line: line)
    }
}
