#if canImport(Glibc)
import Glibc
#endif

/// How long to wait before the next attempt: exponential backoff with jitter (so many
/// clients that failed together do not retry together), or the server's `Retry-After`.
struct RetryBackoff {
    let base: Double
    let maxRetryAfter: Double
    /// No backoff grows past this (unless the base itself is larger).
    static let cap: Double = 30

    /// The delay before retry number `retry` (1-based); `jitter` (0.5...1) scales the backoff.
    func delay(forRetry retry: Int, retryAfter: Double?, jitter: Double = Double.random(in: 0.5...1.0)) -> Double {
        if let retryAfter { return min(max(0, retryAfter), maxRetryAfter) }
        let nominal = min(max(Self.cap, base), base * Double(1 << min(max(retry - 1, 0), 30)))
        return nominal * min(max(jitter, 0.5), 1)
    }

    /// Sleeps `seconds` in short slices, so a stopped run does not sit out a long
    /// Retry-After; throws the run's failure (or `.cancelled`) when stopped.
    static func wait(_ seconds: Double, control: RunControl) throws {
        let deadline = Monotonic.seconds() + min(max(seconds, 0), 1e9)
        while true {
            try control.check()
            let remaining = deadline - Monotonic.seconds()
            if remaining <= 0 { return }
            usleep(useconds_t(min(remaining, 0.02) * 1_000_000))
        }
    }
}
