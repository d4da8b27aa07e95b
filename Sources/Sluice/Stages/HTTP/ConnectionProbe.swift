/// Decides, for `fetch` without `connections=N`, whether extra connections would help: they
/// do when the run waits for the network, not when the pipeline (hashing, decoding, the
/// disk) is the slower part — then they only add threads, copies and memory (on loopback,
/// four connections made `fetch | verify | gunzip | file` 13% slower and 13 MiB larger).
///
/// The sign is how long the pipeline takes to accept the head's bytes: when, over two
/// stretches of `stretch` bytes in a row, writing into it took less than `busyShare` (a
/// quarter) of the time the bytes took to arrive and go, the network is what the run waits
/// for. A pipeline that keeps up is busy most of the time (it blocks the head once its
/// queue is full); the margin and the second stretch keep a busy machine's scheduling from
/// passing for a slow network. Stretches go on being judged, so a transfer that slows down
/// later still gets its connections.
struct ConnectionProbe {
    enum Verdict: Equatable { case undecided, moreConnections }

    let total: UInt64
    let wanted: Int
    let stretch: UInt64
    let busyShare: Double
    private var bytes: UInt64 = 0
    private var busy = 0.0
    private var since: Double?
    /// Stretches in a row in which the network was the slower.
    private var slowStretches = 0

    init(total: UInt64, wanted: Int, stretch: UInt64, busyShare: Double = 0.25) {
        self.total = total
        self.wanted = wanted
        self.stretch = max(stretch, 1)
        self.busyShare = busyShare
    }

    /// `count` bytes were written into the pipeline, which took `busy` seconds, at `now`.
    mutating func record(_ count: Int, busy: Double, now: Double) -> Verdict {
        guard let start = since else {
            // The first write opens the stretch: the time before it was the request's.
            since = now
            return .undecided
        }
        bytes += UInt64(count)
        self.busy += busy
        guard bytes >= stretch else { return .undecided }
        let elapsed = now - start
        let networkSlower = busyShare >= 1 || self.busy < elapsed * busyShare
        slowStretches = networkSlower ? slowStretches + 1 : 0
        let verdict: Verdict = slowStretches >= 2 ? .moreConnections : .undecided
        bytes = 0
        self.busy = 0
        since = now
        return verdict
    }
}
