import CCurl
import XCTest
@testable import Sluice

/// The pure decisions of `fetch`, by table: what one response means (ResumeJudge), what one
/// perform means (AttemptJudge), what a failure means for the retry loop (RetryPolicy), the
/// transfer limits (TransferWatch), and the numbers and validators a response carries.
final class FetchDecisionTests: XCTestCase {
    private static let url = FetchURL("http://example.org/data.bin")!
    private static let limits = TransferLimits(stallTimeout: 30, speedLimit: 1000, speedTime: 10)
    private static let notFound = TransferCause.http(status: 404, statusText: "404 Not Found", server: "example.org")

    // MARK: Numbers from a response (issue 8 item 1)

    func testResponseNumbersAreDigitsOnlyAndBelowTwoToTheSixtyThree() {
        let table: [(String, UInt64?)] = [
            ("0", 0), ("42", 42), ("0042", 42), ("9223372036854775807", 9_223_372_036_854_775_807),
            ("9223372036854775808", nil), ("18446744073709551615", nil), ("18446744073709551616", nil),
            ("99999999999999999999999999", nil), ("", nil), ("+5", nil), ("-5", nil), (" 5", nil), ("5 ", nil),
            ("5,5", nil), ("0x10", nil), ("１２", nil), ("1e3", nil),
        ]
        for (text, expected) in table {
            XCTAssertEqual(HTTPNumber.parse(text), expected, "'\(text)'")
        }
    }

    func testContentRangeBoundsEveryNumber() {
        XCTAssertNil(ContentRange("bytes 0-18446744073709551615/*"), "last + 1 would overflow")
        XCTAssertNil(ContentRange("bytes 0-9223372036854775808/*"))
        XCTAssertNil(ContentRange("bytes 0-5/18446744073709551615"))
        XCTAssertNil(ContentRange("bytes -1-5/10"))
        XCTAssertNil(ContentRange("bytes +0-5/10"))
        XCTAssertEqual(ContentRange("bytes 0-9223372036854775806/*")?.kind, .bytes(first: 0, last: 9_223_372_036_854_775_806))
    }

    func testHugeContentRangeIsRefusedNotTrapped() {
        let verdict = judge(offset: 0, ["HTTP/1.1 206 Partial Content", "Content-Range: bytes 0-18446744073709551615/*"])
        guard case .failed(.malformed(let cause)) = verdict, case .protocolViolation(_, let reason) = cause else {
            return XCTFail("\(verdict)")
        }
        XCTAssertTrue(reason.contains("18446744073709551615"), reason)
        let largest = judge(offset: 0, ["HTTP/1.1 206 Partial Content", "Content-Range: bytes 0-9223372036854775806/*"])
        XCTAssertEqual(largest, .deliver(skip: 0, seen: FetchValidators(), end: 9_223_372_036_854_775_807))
    }

    func testRetryAfterIsBoundedWhateverTheServerSays() {
        for value in ["99999999999999999999999", "18446744073709551615", "-5", "Thu, 01 Jan 9999 00:00:00 GMT"] {
            var head = HTTPResponseHead()
            _ = head.consume("HTTP/1.1 503 Service Unavailable\r\n")
            _ = head.consume("Retry-After: \(value)\r\n")
            let backoff = RetryBackoff(base: 0.5, maxRetryAfter: 300)
            let delay = backoff.delay(forRetry: 1, retryAfter: head.retryAfter)
            XCTAssertTrue(delay.isFinite && delay >= 0 && delay <= 300, "\(value) → \(delay)")
        }
    }

    // MARK: Framing (issue 8 item 4)

    func testRepeatedOrInvalidContentLengthIsRefused() {
        let table: [[String]] = [
            ["Content-Length: 10", "Content-Length: 10"],
            ["Content-Length: 10", "Content-Length: 20"],
            ["Content-Length: 10, 20"],
            ["Content-Length: 99999999999999999999"],
            ["Content-Length: -1"],
            ["Content-Range: bytes 0-9/10", "Content-Range: bytes 0-4/10", "Content-Length: 10"],
        ]
        for fields in table {
            let verdict = judge(offset: 0, ["HTTP/1.1 200 OK"] + fields)
            guard case .failed(.malformed) = verdict else { return XCTFail("\(fields) → \(verdict)") }
        }
        // Chunked framing ignores Content-Length, but a repeated one is still refused.
        XCTAssertEqual(
            judge(offset: 0, ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Content-Length: x"]),
            .deliver(skip: 0, seen: FetchValidators(), end: nil))
    }

    func testBodyEndIsTheLengthAlreadyKnownWhenTheResponseHasNone() {
        let known = FetchValidators(etag: "\"a\"", totalLength: 100)
        let verdict = ResumeJudge(offset: 0, known: known, server: "s").judge(head(["HTTP/1.1 200 OK", "ETag: \"a\""]))
        XCTAssertEqual(verdict, .deliver(skip: 0, seen: FetchValidators(etag: "\"a\""), end: 100))
    }

    // MARK: Validators (issue 10 items 1 and 3)

    func testWeakAndStrongETagsOfTheSameEntityAgree() {
        let strong = FetchValidators(etag: "\"3a24\"", lastModified: "Mon", totalLength: 10)
        let weak = FetchValidators(etag: "W/\"3a24\"", lastModified: "Mon", totalLength: 10)
        XCTAssertNil(strong.contradiction(by: weak))
        XCTAssertNil(weak.contradiction(by: strong))
        XCTAssertTrue(weak.isConfirmed(by: strong), "same Last-Modified")
        XCTAssertNotNil(
            weak.contradiction(by: FetchValidators(etag: "\"3a24\"", lastModified: "Tue")),
            "a weak match leaves Last-Modified to decide")
        XCTAssertNil(
            strong.contradiction(by: FetchValidators(etag: "\"3a24\"", lastModified: "Tue")),
            "equal strong ETags decide alone")
        XCTAssertNotNil(strong.contradiction(by: FetchValidators(etag: "W/\"3a25\"")))
        XCTAssertNil(weak.ifRange, "a weak ETag never goes into If-Range, nor a Last-Modified not shown strong")
    }

    func testARefreshedURLNeedsProof() {
        let known = FetchValidators(etag: "W/\"a\"", lastModified: "Mon", totalLength: 10)
        let table: [(FetchValidators, Bool)] = [
            (FetchValidators(etag: "W/\"a\"", lastModified: "Mon", totalLength: 10), true),
            (FetchValidators(etag: "W/\"a\"", lastModified: "Mon"), false),
            (FetchValidators(etag: "W/\"a\"", totalLength: 10), false),
            (FetchValidators(), false),
        ]
        for (seen, proven) in table { XCTAssertEqual(known.proves(seen), proven, "\(seen)") }
        XCTAssertTrue(FetchValidators(etag: "\"s\"").proves(FetchValidators(etag: "\"s\"")))

        let judge = ResumeJudge(
            offset: 4, known: FetchValidators(etag: "W/\"a\"", totalLength: 10), server: "s",
            requireProof: true)
        guard
            case .failed(.changed(let reason)) = judge.judge(
                head([
                    "HTTP/1.1 206 Partial Content",
                    "Content-Range: bytes 4-9/10",
                ]))
        else {
            return XCTFail("an unproven 206 is not spliced onto a refreshed URL's bytes")
        }
        XCTAssertTrue(reason.contains("query"), reason)
    }

    /// A 206 without the ETag the content had cannot show its bytes are of the same version
    /// (a lying server answered one connection's range with zeros and no ETag).
    func testA206ThatDropsTheKnownETagIsNotSpliced() {
        let judge = ResumeJudge(offset: 4, known: FetchValidators(etag: "\"s\"", totalLength: 10), server: "s")
        guard case .failed(.changed(let reason)) = judge.judge(head(["HTTP/1.1 206 Partial Content", "Content-Range: bytes 4-9/10"])) else {
            return XCTFail("a 206 without the known ETag was accepted")
        }
        XCTAssertTrue(reason.contains("without the ETag"), reason)
        guard case .deliver = judge.judge(head(["HTTP/1.1 206 Partial Content", "Content-Range: bytes 4-9/10", "ETag: \"s\""])) else {
            return XCTFail("a 206 with the known ETag is the same version")
        }
        let noTagKnown = ResumeJudge(offset: 4, known: FetchValidators(lastModified: "Mon", totalLength: 10), server: "s")
        guard case .deliver = noTagKnown.judge(head(["HTTP/1.1 206 Partial Content", "Content-Range: bytes 4-9/10", "Last-Modified: Mon"])) else {
            return XCTFail("without a known ETag, Last-Modified and length decide")
        }
    }

    /// A server that ignores If-Range answers a resume's range against the content as it is
    /// now: a 206 whose Content-Range reaches past a shorter total. That was refused as a
    /// self-contradicting answer (exit 3); its total shows another version (the remote changed).
    func testA206PastANowShorterTotalIsAChangedRemote() {
        let known = ResumeJudge(offset: 30, known: FetchValidators(etag: "\"s\"", totalLength: 100), server: "s")
        for range in ["bytes 30-99/60", "bytes 30-99/20", "bytes 30-29/20"] {
            guard case .failed(.changed(let reason)) = known.judge(head(["HTTP/1.1 206 Partial Content", "Content-Range: \(range)", "ETag: \"s\""]))
            else { return XCTFail("\(range): not judged a changed remote") }
            XCTAssertTrue(reason.contains("length changed from 100 bytes to"), reason)
        }
        // Without a known length, a total no longer than the resume offset says the same.
        let noLength = ResumeJudge(offset: 30, known: FetchValidators(etag: "\"s\""), server: "s")
        guard case .failed(.changed(let reason)) = noLength.judge(head(["HTTP/1.1 206 Partial Content", "Content-Range: bytes 30-99/20", "ETag: \"s\""]))
        else { return XCTFail("a total below the resume offset: not judged a changed remote") }
        XCTAssertTrue(reason.contains("no longer than the resume offset 30"), reason)
        // Same version, self-contradicting: still a broken answer.
        guard case .failed(.malformed) = known.judge(head(["HTTP/1.1 206 Partial Content", "Content-Range: bytes 30-100/100", "ETag: \"s\""]))
        else { return XCTFail("a range past its own unchanged total was accepted or judged a change") }
    }

    // MARK: AttemptJudge

    func testWhatOnePerformMeans() {
        let deliver = ResponseVerdict.deliver(skip: 0, seen: FetchValidators(totalLength: 100), end: 100)
        let table: [(PerformFacts, AttemptNext)] = [
            (facts(deliver, requested: 0, offset: 100), .finished),
            (
                facts(deliver, requested: 0, offset: 60),
                .fail(.transient(.truncated(server: "example.org", offset: 60, expected: 100)))
            ),
            (
                facts(.deliver(skip: 0, seen: FetchValidators(totalLength: 100), end: 50), requested: 20, offset: 50, known: 100),
                .askForRest
            ),
            // A 206 of `bytes 0-999/*` is not the whole resource just because its range ended.
            (facts(.deliver(skip: 0, seen: FetchValidators(), end: 1000), requested: 0, offset: 1000), .askForRest),
            (facts(.redirect("/x"), requested: 0, offset: 0), .follow("/x")),
            (facts(.complete, requested: 100, offset: 100), .finished),
            (facts(.failed(.permanent(Self.notFound)), requested: 0, offset: 0), .fail(.permanent(Self.notFound))),
            (
                facts(deliver, requested: 0, offset: 100, trip: .overran),
                .fail(
                    .malformed(
                        .protocolViolation(
                            server: "example.org",
                            reason: "example.org sent more bytes than its response announced (it should have ended at source byte 100);"
                                + " the bytes past that end were not used")))
            ),
            (
                facts(deliver, requested: 0, offset: 7, trip: .deadline),
                .fail(.outOfTime(.deadline(offset: 7)))
            ),
            (facts(deliver, requested: 0, offset: 7, trip: .stalled), .fail(.transient(.stalled(server: "example.org", seconds: 30)))),
            (
                facts(deliver, requested: 0, offset: 7, trip: .tooSlow),
                .fail(.tooSlow(.tooSlow(server: "example.org", bytesPerSecond: 1000, seconds: 10)))
            ),
        ]
        for (facts, expected) in table {
            XCTAssertEqual(AttemptJudge.next(after: facts, url: Self.url, limits: Self.limits), expected, "\(facts)")
        }
        var dropped = facts(deliver, requested: 0, offset: 60)
        dropped.code = CURLE_RECV_ERROR
        guard case .fail(.transient) = AttemptJudge.next(after: dropped, url: Self.url, limits: Self.limits) else {
            return XCTFail("a receive error is transient")
        }
    }

    // MARK: RetryPolicy (issue 8 item 11)

    func testRetryDecisionsByTable() {
        let policy = RetryPolicy(retries: 2, backoff: RetryBackoff(base: 1, maxRetryAfter: 60))
        struct Row {
            var failure: FetchFailure
            var streak: Int
            var progressed = false
            var atTarget = false
            var secondsLeft: Double? = nil
            var expected: RetryPolicy.Decision
            var streakAfter: Int
        }
        let drop = TransferCause.curl(code: 56, message: "drop")
        let busy = TransferCause.http(status: 503, statusText: "503 Service Unavailable", server: "s")
        let gone = TransferCause.http(status: 410, statusText: "410 Gone", server: "s")
        let slow = TransferCause.tooSlow(server: "s", bytesPerSecond: 10, seconds: 1)
        let overrun = TransferCause.protocolViolation(server: "s", reason: "overrun")
        let late = TransferCause.deadline(offset: 9)
        let rows: [Row] = [
            Row(failure: .transient(drop), streak: 0, expected: .retry(attempt: 1, delay: 1, fromStart: false, reason: drop), streakAfter: 1),
            Row(failure: .transient(drop), streak: 1, expected: .retry(attempt: 2, delay: 2, fromStart: false, reason: drop), streakAfter: 2),
            Row(failure: .transient(drop), streak: 2, expected: .giveUp(drop, .afterRetries(2)), streakAfter: 3),
            Row(
                failure: .transient(drop), streak: 2, progressed: true,
                expected: .retry(attempt: 1, delay: 1, fromStart: false, reason: drop), streakAfter: 1),
            Row(
                failure: .transient(busy, retryAfter: 7), streak: 0,
                expected: .retry(attempt: 1, delay: 7, fromStart: false, reason: busy), streakAfter: 1),
            Row(
                failure: .transient(busy, retryAfter: 7), streak: 0, secondsLeft: 5,
                expected: .giveUp(busy, .deadlineBeforeRetry), streakAfter: 1),
            Row(failure: .permanent(gone), streak: 0, expected: .giveUp(gone, .atOnce), streakAfter: 0),
            Row(
                failure: .permanent(gone), streak: 0, atTarget: true,
                expected: .retry(attempt: 1, delay: 1, fromStart: true, reason: gone), streakAfter: 1),
            // Going back to the original URL never resets the streak, even after progress:
            // a target that delivers and then fails for good cannot loop.
            Row(
                failure: .permanent(gone), streak: 2, progressed: true, atTarget: true,
                expected: .giveUp(gone, .afterRetries(2)), streakAfter: 3),
            Row(
                failure: .tooSlow(slow), streak: 1, progressed: true,
                expected: .retry(attempt: 2, delay: 2, fromStart: false, reason: slow), streakAfter: 2),
            Row(failure: .malformed(overrun), streak: 0, atTarget: true, expected: .giveUp(overrun, .atOnce), streakAfter: 0),
            Row(failure: .outOfTime(late), streak: 0, expected: .giveUp(late, .atOnce), streakAfter: 0),
            Row(failure: .changed("etag"), streak: 1, expected: .changed("etag"), streakAfter: 1),
        ]
        for row in rows {
            var streak = RetryPolicy.Streak(failuresInARow: row.streak)
            let decision = policy.decide(
                row.failure, streak: &streak, progressed: row.progressed, atRedirectTarget: row.atTarget,
                secondsLeft: row.secondsLeft, jitter: 1)
            XCTAssertEqual(decision, row.expected, "\(row.failure)")
            XCTAssertEqual(streak.failuresInARow, row.streakAfter, "\(row.failure)")
        }
    }

    func testARedirectTargetThatAlwaysFailsEndsWithinTheRetries() {
        // The loop of issue 8 item 11, replayed through the policy: every attempt reaches the
        // target, delivers a little, and fails for good there.
        let policy = RetryPolicy(retries: 5, backoff: RetryBackoff(base: 0.5, maxRetryAfter: 60))
        var streak = RetryPolicy.Streak()
        var attempts = 0
        while attempts < 1_000 {
            attempts += 1
            if case .giveUp = policy.decide(
                .permanent(.http(status: 403, statusText: "403 Forbidden", server: "s")), streak: &streak, progressed: true, atRedirectTarget: true,
                secondsLeft: nil, jitter: 1)
            {
                break
            }
        }
        XCTAssertEqual(attempts, 6)
    }

    // MARK: TransferWatch (issue 8 item 15)

    func testTransferLimitsByTable() {
        var watch = TransferWatch(TransferLimits(stallTimeout: 5, speedLimit: 100, speedTime: 10, deadline: 50), now: 0)
        watch.received(300, now: 1)
        XCTAssertNil(watch.check(now: 4))
        watch.received(300, now: 6)
        XCTAssertNil(watch.check(now: 9.9), "60 B/s so far, but the 10 s window is not over yet")
        watch.received(500, now: 9.95)
        XCTAssertNil(watch.check(now: 10), "1,100 B in 10 s: fast enough; the window restarts")
        watch.received(100, now: 14)
        XCTAssertEqual(watch.check(now: 19.5), .stalled, "5.5 s without a byte")

        var slow = TransferWatch(TransferLimits(stallTimeout: 5, speedLimit: 100, speedTime: 10), now: 0)
        for second in 1...10 { slow.received(50, now: Double(second)) }
        XCTAssertEqual(slow.check(now: 10), .tooSlow)

        var blocked = TransferWatch(TransferLimits(stallTimeout: 5, speedLimit: 100, speedTime: 10), now: 0)
        blocked.received(500, now: 1)
        blocked.excuse(since: 1, now: 9)  // the sink held the source for 8 s
        XCTAssertNil(blocked.check(now: 10), "time spent blocked downstream is not the server's")
        XCTAssertEqual(blocked.check(now: 14.5), .stalled)

        var late = TransferWatch(TransferLimits(stallTimeout: 5, deadline: 3), now: 0)
        late.received(1, now: 2.9)
        XCTAssertEqual(late.check(now: 3), .deadline)

        var off = TransferWatch(TransferLimits(stallTimeout: 1e9, speedLimit: 0), now: 0)
        XCTAssertNil(off.check(now: 1e6), "speed limit 0 is off")
    }

    // MARK: Helpers

    private func head(_ lines: [String]) -> HTTPResponseHead {
        var head = HTTPResponseHead()
        for line in lines { _ = head.consume(line + "\r\n") }
        _ = head.consume("\r\n")
        return head
    }

    private func judge(offset: UInt64, _ lines: [String]) -> ResponseVerdict {
        ResumeJudge(offset: offset, known: nil, server: "s").judge(head(lines))
    }

    private func facts(
        _ verdict: ResponseVerdict, requested: UInt64, offset: UInt64, known: UInt64? = nil,
        trip: TransferTrip? = nil
    ) -> PerformFacts {
        PerformFacts(
            code: CURLE_OK, message: "", verdict: verdict, trip: trip, requested: requested, offset: offset,
            knownTotal: known)
    }
}
