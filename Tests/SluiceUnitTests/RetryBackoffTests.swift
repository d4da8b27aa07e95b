import Foundation
import XCTest
@testable import Sluice

/// The delay before a retry: the server's Retry-After within bounds, else exponential
/// backoff with jitter, capped.
final class RetryBackoffTests: XCTestCase {
    private let backoff = RetryBackoff(base: 1, maxRetryAfter: 60)

    func testRetryAfterIsHonouredWithinBounds() {
        let cases: [(retryAfter: Double, expected: Double)] = [(7, 7), (0, 0), (60, 60), (1000, 60), (-5, 0)]
        for (retryAfter, expected) in cases {
            XCTAssertEqual(backoff.delay(forRetry: 3, retryAfter: retryAfter), expected, "Retry-After \(retryAfter)")
        }
    }

    func testDelayDoublesPerRetryWithJitterBetweenHalfAndAll() {
        for (retry, nominal) in [(1, 1.0), (2, 2), (3, 4), (4, 8), (5, 16), (6, 30), (7, 30)] {
            let delays = (0..<200).map { _ in backoff.delay(forRetry: retry, retryAfter: nil) }
            XCTAssertTrue(delays.allSatisfy { $0 >= nominal / 2 && $0 <= nominal }, "retry \(retry): \(delays.min()!)…\(delays.max()!)")
            XCTAssertGreaterThan(Set(delays).count, 1, "retry \(retry): no jitter")
        }
    }

    func testNoRetryNumberEscapesTheCap() {
        for retry in [0, -1, 31, 64, 1_000, Int.max] {
            let delay = backoff.delay(forRetry: retry, retryAfter: nil)
            XCTAssertTrue(delay.isFinite && delay >= 0.5 && delay <= RetryBackoff.cap, "retry \(retry): \(delay)")
        }
    }

    func testABaseAboveTheCapIsKept() {
        let slow = RetryBackoff(base: 45, maxRetryAfter: 60)
        for retry in 1...5 {
            let delay = slow.delay(forRetry: retry, retryAfter: nil)
            XCTAssertTrue(delay >= 22.5 && delay <= 45, "retry \(retry): \(delay)")
        }
    }

    func testWaitReturnsAfterZeroSeconds() throws {
        try RetryBackoff.wait(0, control: RunControl(progress: ProgressReporter(handler: nil)))
    }

    func testAStoppedRunDoesNotSitOutTheWait() {
        let control = RunControl(progress: ProgressReporter(handler: nil))
        control.cancel()
        let done = expectation(description: "the wait gives up")
        let thrown = LockedValue<Error?>(nil)
        Thread.detachNewThread {
            do { try RetryBackoff.wait(3_600, control: control) } catch { thrown.value = error }
            done.fulfill()
        }
        wait(for: [done], timeout: 30)
        XCTAssertEqual(thrown.value as? SluiceError, .cancelled)
    }
}
