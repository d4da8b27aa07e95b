/// Cuts the part of a resource still to fetch into segments and hands them out, lowest
/// offset first, to whichever connection is free (pure bookkeeping; MultiFetch locks it).
///
/// A segment is received contiguously from its start; `claimed` marks how far. Stragglers are
/// split, the free connection taking the upper half: the segment the in-order point waits on
/// when the next segment would not fit in the reorder window (a slow head of the line holds
/// the window full), and, when nothing is left to hand out, the in-flight segment with the
/// most bytes still to come. A connection that gives up returns the unclaimed rest of its
/// segment, which is handed out again before anything else.
struct SegmentPlanner: Equatable {
    struct Segment: Equatable {
        let id: Int
        let start: UInt64
        /// Exclusive; only ever lowered (by a split).
        var end: UInt64
        /// Bytes from `start` up to here belong to this segment's connection.
        var claimed: UInt64

        var remaining: UInt64 { end - claimed }
    }

    /// The size segments are cut to.
    let segmentSize: UInt64
    /// A split leaves at least this much to each side.
    let minimumSplit: UInt64
    /// Where the resource ends (exclusive).
    let end: UInt64
    /// The first byte not yet cut into a segment.
    private(set) var uncut: UInt64
    /// Ranges given back by connections that quit, lowest first.
    private(set) var returned: [Range<UInt64>] = []
    private(set) var inFlight: [Int: Segment] = [:]
    private var nextID = 0

    /// Plans `start..<end`; nil when the numbers make no plan (empty range, zero sizes).
    init?(start: UInt64, end: UInt64, segmentSize: UInt64, minimumSplit: UInt64) {
        guard start < end, segmentSize > 0, minimumSplit > 0 else { return nil }
        self.uncut = start
        self.end = end
        self.segmentSize = segmentSize
        self.minimumSplit = minimumSplit
    }

    /// True when every byte is claimed by some connection or already received.
    var isExhausted: Bool { uncut >= end && returned.isEmpty }

    /// The next piece of work for a free connection, or nil when there is none. `windowEnd`:
    /// the first offset the reorder window cannot hold yet.
    mutating func take(windowEnd: UInt64 = .max) -> Segment? {
        let next = returned.first?.lowerBound ?? (uncut < end ? uncut : nil)
        if let next, next.addingClamped(segmentSize) > windowEnd, let split = splitHeadOfLine() {
            return split
        }
        if !returned.isEmpty {
            let range = returned.removeFirst()
            return open(
                range.lowerBound, min(range.upperBound, range.lowerBound.addingClamped(segmentSize)),
                rest: range)
        }
        if uncut < end {
            let start = uncut
            uncut = min(end, start.addingClamped(segmentSize))
            return open(start, uncut, rest: nil)
        }
        return splitStraggler()
    }

    /// The segment's current end (lowered by a split); nil once it is finished.
    func end(of id: Int) -> UInt64? { inFlight[id]?.end }

    /// Claims up to `count` bytes at the segment's claimed position; returns how many
    /// belong to it (fewer when its end is reached).
    mutating func claim(_ id: Int, count: UInt64) -> UInt64 {
        guard var segment = inFlight[id] else { return 0 }
        let taken = min(count, segment.remaining)
        segment.claimed += taken
        inFlight[id] = segment
        return taken
    }

    /// The segment's connection is done with it: every byte is claimed.
    mutating func finish(_ id: Int) {
        inFlight[id] = nil
    }

    /// The segment's connection quits: the unclaimed rest goes back to be handed out again.
    mutating func giveBack(_ id: Int) {
        guard let segment = inFlight.removeValue(forKey: id) else { return }
        guard segment.claimed < segment.end else { return }
        returned.append(segment.claimed..<segment.end)
        returned.sort { $0.lowerBound < $1.lowerBound }
    }

    private mutating func open(_ start: UInt64, _ stop: UInt64, rest: Range<UInt64>?) -> Segment {
        if let rest, stop < rest.upperBound {
            returned.insert(stop..<rest.upperBound, at: 0)
        }
        let segment = Segment(id: nextID, start: start, end: stop, claimed: start)
        nextID += 1
        inFlight[segment.id] = segment
        return segment
    }

    /// Takes the upper half of the in-flight segment with the most bytes still to come.
    private mutating func splitStraggler() -> Segment? {
        let candidates = inFlight.values.filter { $0.remaining / 2 >= minimumSplit }
        guard let victim = candidates.max(by: { ($0.remaining, $1.start) < ($1.remaining, $0.start) }) else {
            return nil
        }
        return split(victim)
    }

    /// Takes the upper half of the segment the in-order point waits on: the unfinished one
    /// that has claimed the least.
    private mutating func splitHeadOfLine() -> Segment? {
        guard let victim = inFlight.values.filter({ $0.remaining > 0 }).min(by: { $0.claimed < $1.claimed }),
            victim.remaining / 2 >= minimumSplit
        else { return nil }
        return split(victim)
    }

    private mutating func split(_ victim: Segment) -> Segment {
        let middle = victim.claimed + victim.remaining / 2
        let upper = victim.end
        inFlight[victim.id]?.end = middle
        return open(middle, upper, rest: nil)
    }
}

extension UInt64 {
    /// `self + other`, or `UInt64.max` when that would overflow.
    func addingClamped(_ other: UInt64) -> UInt64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? .max : sum
    }
}
