import CCurl
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
import Glibc
import Synchronization

/// `fetch URL connections=N`: several ranged connections, each its own easy handle on its
/// own thread, delivered strictly in order into the pipeline.
///
/// The first connection (the head) makes exactly the request a single transfer would and
/// streams straight into the pipeline. Its first response decides the plan: when the server
/// answers ranges, carries a strong ETag or a Last-Modified and a length, and enough remains,
/// the rest is cut into segments (SegmentPlanner) that further connections fetch into a
/// bounded ReorderWindow; the head stops at the end of its first segment and this thread then
/// passes the window's bytes on in order. Every connection retries its segment with the
/// single transfer's policy at the segment's own offset; each response is judged against the
/// first one's validators, so a change is "the remote changed" exactly as for one connection.
/// An extra connection answered 200, 416, 429 or 503 closes (down to one) with a notice.
/// A 206 to a range that names no range or another one counts as a 200 (connections=1 never
/// asks for such a range). The last one answered 200 or 416 shows the server does not serve ranges: it closes too, and
/// this thread fetches the rest as one connection would from a server that ignores ranges
/// (the whole resource, skipping what was delivered), so the ranges never add an error.
/// The source offset the pipeline sees is always the in-order point, so checkpoints are exact.
final class MultiFetch: @unchecked Sendable {
    // @unchecked Sendable: every mutable field lives in `shared`, a Mutex, except `deadline`,
    // which `run` sets before it starts any thread, and `probe`, which only the head's thread
    // touches (its screen and its sink).

    /// Default rule (documented in the README): this many connections when the server answers
    /// ranges, at least `Tuning.autoThreshold` bytes remain, and one connection cannot keep
    /// the pipeline busy (`ConnectionProbe`); otherwise one.
    static let autoConnections = 4
    static let maxConnections = 32
    /// The largest piece passed downstream at once (checkpoint barriers fall between pieces).
    static let deliveryPiece = 256 << 10

    /// Sizes; tests shrink them to exercise many segments with little data.
    struct Tuning: Sendable {
        var autoThreshold: UInt64 = 64 << 20
        /// Bytes held ahead of the in-order point, whatever the number of connections.
        var windowBytes = 12 << 20
        /// Segments are the window shared out among the connections, within these bounds.
        var minimumSegment: UInt64 = 512 << 10
        var maximumSegment: UInt64 = 16 << 20
        var minimumSplit: UInt64 = 256 << 10
        /// Bytes the head delivers alone, by default, before the probe judges whether the
        /// network or the pipeline is the slower (and again after each such stretch).
        var probeBytes: UInt64 = 8 << 20
        /// More connections when the pipeline was busy for less than this share of two
        /// stretches in a row (1: always, 0: never — tests).
        var busyShare = 0.25
    }

    private let source: HTTPSource
    private let options: HTTPOptions
    private let control: RunControl
    /// What every connection runs under: stopping it stops them all, not the run.
    private let connectionControl: RunControl
    private let shared = Mutex(Shared())
    private let workers = DispatchGroup()
    /// Set by `run` before any connection starts.
    private var deadline: Double?
    /// By default, extra connections wait until the head shows that the network, not the
    /// pipeline, is what the run waits for (the head's thread only, once set by its screen).
    private var probe: ConnectionProbe?
    /// The last connection found that the server does not serve ranges (set by its screen,
    /// read by this thread while it waits for the window). Not in `shared`: the window's
    /// wait reads it under the window's lock, which `shared`'s holders may take.
    private let rangesRefused = Atomic<Bool>(false)

    private struct Shared {
        /// Set once, by the head's first 200/206.
        var decided = false
        var planner: SegmentPlanner?
        var window: ReorderWindow?
        /// The head connection's segment.
        var headID: Int?
        /// Connections that will ask for work again.
        var alive = 0

        mutating func take(windowEnd: UInt64) -> SegmentPlanner.Segment? {
            if let segment = planner?.take(windowEnd: windowEnd) { return segment }
            alive -= 1
            return nil
        }

        /// An extra connection may close unless it is the last one.
        mutating func retire() -> Bool {
            guard alive > 1 else { return false }
            alive -= 1
            return true
        }
    }

    init(source: HTTPSource, options: HTTPOptions, control: RunControl) {
        self.source = source
        self.options = options
        self.control = control
        connectionControl = RunControl(progress: control.progress)
    }

    /// `deadline`: --max-time's end on the monotonic clock, for every connection alike.
    func run(from start: UInt64, deadline: Double?, into sink: ByteSink) throws {
        self.deadline = deadline
        // Phase 1: the head connection, on its own thread so this one can watch the run.
        let head = HeadSink(next: sink, offset: start, fetch: self)
        let headEnded = DispatchSemaphore(value: 0)
        let result = Mutex<Error?>(nil)
        // A thread that cannot start is exit 6, not a wait for a head that never runs.
        try EngineThread.start("sluice.fetch.1") { [self] in
            do {
                // Planned from where the head stands: a first answer that was refused, or a
                // 200 that skipped to `start` and then dropped, leaves it past `start`.
                try source.transfer(from: start, deadline: deadline, into: head, control: connectionControl) { [self] answer, _ in
                    plan(from: answer, start: head.offset)
                }
            } catch {
                result.withLock { $0 = error }
            }
            headEnded.signal()
        }
        while headEnded.wait(timeout: .now() + .milliseconds(50)) == .timedOut {
            if control.isStopped || reorderWindow?.failed != nil { connectionControl.fail(.cancelled) }
        }
        let headError = result.withLock { $0 }
        if let headError, (headError as? MultiFetchCut) != .head { throw stopAll(headError) }

        // Phase 2: this thread passes the window on in order; a new connection takes the
        // head's place.
        let (planned, end) = shared.withLock { state -> (ReorderWindow?, UInt64?) in
            if let id = state.headID { state.planner?.finish(id) }
            return (state.window, state.planner?.end)
        }
        guard let window = planned, let end else { return }  // one connection did it all
        if headError != nil { startConnection(name: "head") }
        let stopped = { [control, self] () -> Error? in
            if control.isStopped { return control.failure ?? .cancelled }
            return self.rangesRefused.load(ordering: .acquiring) ? RangesRefused() : nil
        }
        do {
            while window.inOrderOffset < end {
                try window.deliver(limit: Self.deliveryPiece, stopped: stopped) { try sink.write($0) }
            }
        } catch is RangesRefused {
            // Every connection has closed and the window holds nothing at the in-order
            // point: the rest straight into the pipeline, as one connection would fetch it.
            workers.wait()
            try source.transfer(from: window.inOrderOffset, deadline: deadline, into: sink, control: control, whole: true)
            return
        } catch {
            throw stopAll(error)
        }
        workers.wait()
    }

    /// Stops every connection and waits for them; returns the error that explains the run's
    /// end: the run's own failure first, then a connection's, then `error`.
    private func stopAll(_ error: Error) -> Error {
        let window = reorderWindow
        window?.fail(error)
        connectionControl.fail(.cancelled)
        workers.wait()
        if control.isStopped { return control.failure ?? .cancelled }
        return window?.failed ?? error
    }

    // MARK: the plan

    /// The head's screen: its first 200/206 decides how many connections to use. Never
    /// overrides the ResumeJudge.
    private func plan(from head: HTTPResponseHead, start: UInt64) -> ResponseVerdict? {
        guard let status = head.status, status == 206 || (status == 200 && start == 0),
            shared.withLock({ state in
                defer { state.decided = true }
                return !state.decided
            })
        else { return nil }
        let total = status == 206 ? head.contentRange?.total : head.contentLength
        guard let total, total > start else { return nil }
        let remaining = total - start
        let tuning = options.tuning
        let wanted = min(
            options.connections ?? (remaining >= tuning.autoThreshold ? Self.autoConnections : 1),
            Self.maxConnections)
        guard wanted > 1 else { return nil }

        let answersRanges = status == 206 || (head["accept-ranges"]?.lowercased().contains("bytes") ?? false)
        let validators = head.validators
        let identified = validators.etag.map { !$0.hasPrefix("W/") } ?? false || validators.lastModified != nil
        guard answersRanges && identified else {
            let why =
                answersRanges
                ? "sends no strong ETag or Last-Modified to check ranges against"
                : "does not answer range requests"
            if options.connections != nil {
                control.progress.emit(.notice("\(head.statusText) from a server that \(why): using one connection"))
            }
            return nil
        }
        if options.connections == nil {
            // The default: one connection while it keeps the pipeline busy (on a fast
            // network extra ones only cost CPU and memory); the plan waits for the probe.
            probe = ConnectionProbe(total: total, wanted: wanted, stretch: tuning.probeBytes, busyShare: tuning.busyShare)
        } else {
            makePlan(from: start, total: total, wanted: wanted)
        }
        return nil
    }

    /// Cuts what remains from `start` into segments, the head's first; false if too little
    /// remains to share.
    @discardableResult
    private func makePlan(from start: UInt64, total: UInt64, wanted: Int) -> Bool {
        let tuning = options.tuning
        let size = min(max(UInt64(tuning.windowBytes / wanted), tuning.minimumSegment), tuning.maximumSegment)
        guard start < total,
            var planner = SegmentPlanner(start: start, end: total, segmentSize: size, minimumSplit: tuning.minimumSplit),
            let first = planner.take(), !planner.isExhausted
        else { return false }
        let segments = 1 + (total - start - (first.end - first.start) + size - 1) / size
        let count = Int(min(UInt64(wanted), segments))
        let window = ReorderWindow(capacity: tuning.windowBytes, base: start)
        shared.withLock {
            $0.planner = planner
            $0.window = window
            $0.headID = first.id
            $0.alive = count
        }
        return true
    }

    /// The head (no plan yet) handed `count` bytes to the pipeline, which took `busy`
    /// seconds to accept them, and stands at `offset`: once the probe says the network is
    /// the slower, what remains is planned from here and the next write starts the others.
    fileprivate func headWrote(_ count: Int, busy: Double, at offset: UInt64) {
        guard var probe else { return }
        let verdict = probe.record(count, busy: busy, now: Monotonic.seconds())
        self.probe = probe
        guard verdict == .moreConnections else { return }
        self.probe = nil
        makePlan(from: offset, total: probe.total, wanted: probe.wanted)
    }

    /// Whether a probe is running (the head's thread).
    fileprivate var probing: Bool { probe != nil }

    /// The other connections, started once the head's first bytes have moved (by then the
    /// validators every response is judged against are recorded).
    fileprivate func startConnections() {
        let count = shared.withLock { $0.alive }
        control.progress.emit(.connections(count))
        for number in 2...max(2, count) where number <= count { startConnection(name: String(number)) }
    }

    private func startConnection(name: String) {
        workers.enter()
        do {
            try EngineThread.start("sluice.fetch.\(name)") { [self] in
                work()
                workers.leave()
            }
        } catch {
            // Ends the run with that error (exit 6) rather than waiting for a connection
            // that never runs.
            workers.leave()
            reorderWindow?.fail(error)
        }
    }

    // MARK: one connection

    private func work() {
        guard let window = reorderWindow, let connection = CurlTransfer(options: options) else {
            reorderWindow?.fail(SluiceError.transfer(url: source.state(at: 0).location, cause: .curlUnavailable))
            return
        }
        let known = FetchValidators(source.state(at: 0))
        while let segment = shared.withLock({ $0.take(windowEnd: window.inOrderOffset.addingClamped(UInt64(window.capacity))) }) {
            let retired = RetiredBy()
            let sink = SegmentSink(id: segment.id, offset: segment.start, window: window, fetch: self)
            do {
                try source.transfer(
                    from: segment.start, until: segment.end, deadline: deadline, into: sink,
                    control: connectionControl, over: connection
                ) { [self] head, asked in screen(head, asked: asked, known: known, retired: retired) }
            } catch MultiFetchCut.segment {
            } catch {
                if retired.reason != nil {
                    shared.withLock { $0.planner?.giveBack(segment.id) }
                    return
                }
                window.fail(error)
                return
            }
            shared.withLock { $0.planner?.finish(segment.id) }
        }
    }

    /// An extra connection answered in a way that says "fewer connections, please": it
    /// closes (unless it is the last), and its segment goes back to the others. A changed
    /// resource is left to the ResumeJudge. A 206 that does not say it holds the bytes asked
    /// for (no Content-Range, or one starting elsewhere) counts as a 200: the server mishandles
    /// bounded ranges, which one connection never asks for.
    private func screen(_ head: HTTPResponseHead, asked: UInt64, known: FetchValidators, retired: RetiredBy) -> ResponseVerdict? {
        guard let status = head.status else { return nil }
        let misplaced = status == 206 && head.framingProblem == nil && !Self.holds(head, from: asked)
        guard misplaced || [200, 416, 429, 503].contains(status) else { return nil }
        let refusesRanges = misplaced || status == 200 || status == 416
        if retired.reason == nil {
            if refusesRanges {
                var seen = head.validators
                seen.totalLength = status == 200 ? head.contentLength : head.statedTotal
                if known.contradiction(by: seen) != nil { return nil }
            }
            let reason = misplaced ? "HTTP \(head.statusText) \(Self.misplacement(head))" : "HTTP \(head.statusText)"
            let closed = shared.withLock { state in
                guard state.retire() else { return refusesRanges ? refuseRanges(&state, reason) : false }
                // Under the lock, so the counts reach the user in the order they fell.
                let left = state.alive
                control.progress.emit(
                    .notice(
                        "\(reason) to an extra range request; continuing with"
                            + " \(Counted.text(left, "connection"))"))
                control.progress.emit(.connections(left))
                return true
            }
            guard closed else { return nil }
            retired.reason = reason
        }
        return .failed(.permanent(.curl(code: Int(CURLE_ABORTED_BY_CALLBACK.rawValue), message: "closing this connection")))
    }

    /// Whether a 206's Content-Range says its body starts at `offset`.
    private static func holds(_ head: HTTPResponseHead, from offset: UInt64) -> Bool {
        guard let range = head.contentRange, case .bytes(let first, _) = range.kind else { return false }
        return first == offset
    }

    /// What is wrong with a 206 that `holds` rejects, for the notice.
    private static func misplacement(_ head: HTTPResponseHead) -> String {
        guard let field = head["content-range"] else { return "without a Content-Range" }
        return "with Content-Range '\(DisplayText.quoted(field))' for another range"
    }

    /// The last connection was answered 200, 416 or a misplaced 206 to a range whose validators match: the
    /// server does not serve ranges (under `shared`'s lock). It closes; `run`'s thread then
    /// asks for the whole resource once, as one connection does when a server ignores ranges.
    private func refuseRanges(_ state: inout Shared, _ reason: String) -> Bool {
        state.alive -= 1
        control.progress.emit(
            .notice(
                "\(reason) to a range request: the server does not serve ranges; asking for the whole resource"
                    + " on one connection and skipping the bytes already delivered"))
        rangesRefused.store(true, ordering: .releasing)
        return true
    }

    /// How many of `count` bytes at the segment's claimed position belong to it.
    fileprivate func claim(_ id: Int, count: Int) -> Int {
        Int(shared.withLock { $0.planner?.claim(id, count: UInt64(count)) ?? 0 })
    }

    /// The head's segment and the window, once there is a plan.
    fileprivate var headPlan: (id: Int, window: ReorderWindow)? {
        shared.withLock { state in
            guard let id = state.headID, let window = state.window else { return nil }
            return (id, window)
        }
    }
    fileprivate var reorderWindow: ReorderWindow? { shared.withLock { $0.window } }
    fileprivate var connectionsStopped: Error? {
        connectionControl.isStopped ? (connectionControl.failure ?? .cancelled) : nil
    }
}

/// Why an extra connection closed, set by its screen.
private final class RetiredBy {
    var reason: String?
}

/// The head connection's sink: straight into the pipeline; once a plan exists, only up to
/// the end of the head's segment.
// @unchecked Sendable: handed to the head thread, the only one that ever calls it.
private final class HeadSink: ByteSink, @unchecked Sendable {
    private let next: ByteSink
    /// The source offset of the next byte the head passes on (the head's thread).
    private(set) var offset: UInt64
    private unowned let fetch: MultiFetch
    private var started = false

    init(next: ByteSink, offset: UInt64, fetch: MultiFetch) {
        self.next = next
        self.offset = offset
        self.fetch = fetch
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard let (id, window) = fetch.headPlan else {
            let began = fetch.probing ? Monotonic.seconds() : nil
            try next.write(bytes)
            offset += UInt64(bytes.count)
            if let began { fetch.headWrote(bytes.count, busy: Monotonic.seconds() - began, at: offset) }
            return
        }
        if !started {
            started = true
            fetch.startConnections()
        }
        let count = fetch.claim(id, count: bytes.count)
        if count > 0 {
            try next.write(UnsafeRawBufferPointer(rebasing: bytes[..<count]))
            offset += UInt64(count)
            window.advance(to: offset)
        }
        if count < bytes.count { throw MultiFetchCut.head }
    }

    func barrier(_ cut: Cut) throws { try next.barrier(cut) }
    func finish() throws { try next.finish() }
}

/// An extra connection's sink: into the reorder window at the segment's offsets.
private final class SegmentSink: ByteSink {
    private let id: Int
    private var offset: UInt64
    private let window: ReorderWindow
    private unowned let fetch: MultiFetch

    init(id: Int, offset: UInt64, window: ReorderWindow, fetch: MultiFetch) {
        self.id = id
        self.offset = offset
        self.window = window
        self.fetch = fetch
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        let count = fetch.claim(id, count: bytes.count)
        if count > 0 {
            try window.put(UnsafeRawBufferPointer(rebasing: bytes[..<count]), at: offset) { fetch.connectionsStopped }
            offset += UInt64(count)
        }
        // A split gave the rest of this segment to another connection.
        if count < bytes.count { throw MultiFetchCut.segment }
    }

    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}

/// The ranges ended: the server refuses them (`MultiFetch.refuseRanges`).
private struct RangesRefused: Error {}

/// A connection reached the (possibly lowered) end of its segment mid-response.
enum MultiFetchCut: Error {
    case head
    case segment
}
