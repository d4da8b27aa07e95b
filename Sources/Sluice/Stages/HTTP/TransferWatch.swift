/// The limits one request runs under (`--stall-timeout`, `--speed-limit`/`--speed-time`,
/// `--max-time`).
struct TransferLimits: Equatable {
    /// Seconds without a single byte (connect, headers or body) before the attempt is abandoned.
    var stallTimeout: Double
    /// Bytes per second an attempt must average over `speedTime` seconds; 0 turns it off.
    var speedLimit: UInt64 = 0
    var speedTime: Double = 30
    /// The run's deadline on the `Monotonic` clock; nil for none.
    var deadline: Double? = nil
}

/// Why a request was cut short by a limit of its own.
enum TransferTrip: Equatable {
    /// No byte for `TransferLimits.stallTimeout` seconds.
    case stalled
    /// Slower than `speedLimit` over `speedTime` seconds.
    case tooSlow
    /// The run's `--max-time` passed.
    case deadline
    /// The body went on past the end its own head announced (Content-Range or the total
    /// length already known); the bytes past that end were not delivered.
    case overran
}

/// Watches one request for stalls, slowness and the deadline. Pure: the caller passes the
/// clock, so the rules are tested by table.
struct TransferWatch {
    let limits: TransferLimits
    /// When a byte (of a header or the body) last arrived.
    private var lastActivity: Double
    /// The speed window: since when, and how many body bytes arrived in it.
    private var windowStart: Double
    private var windowBytes: UInt64 = 0

    init(_ limits: TransferLimits, now: Double) {
        self.limits = limits
        lastActivity = now
        windowStart = now
    }

    /// A header line arrived.
    mutating func heardFrom(now: Double) {
        lastActivity = now
    }

    /// `count` body bytes arrived.
    mutating func received(_ count: Int, now: Double) {
        lastActivity = now
        windowBytes &+= UInt64(count)
    }

    /// The sink blocked from `since` to `now`: that time is not held against the server.
    mutating func excuse(since: Double, now: Double) {
        let blocked = max(0, now - since)
        windowStart += blocked
        lastActivity = max(lastActivity, now)
    }

    /// The limit this request broke by `now`, if any. A speed window that passed resets.
    mutating func check(now: Double) -> TransferTrip? {
        if let deadline = limits.deadline, now >= deadline { return .deadline }
        if now - lastActivity > limits.stallTimeout { return .stalled }
        if limits.speedLimit > 0 {
            let elapsed = now - windowStart
            if elapsed >= limits.speedTime {
                if Double(windowBytes) / elapsed < Double(limits.speedLimit) { return .tooSlow }
                windowStart = now
                windowBytes = 0
            }
        }
        return nil
    }
}
