#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
import Glibc

/// A thread boundary inside the pipeline: a sink on the producer's side, a thread on the
/// consumer's that feeds the next sink.
///
/// Bytes travel in a fixed pool of reusable buffers (no allocation per chunk); when the
/// pool is empty the producer waits, so backpressure reaches the source. `RelayBatcher`
/// gathers the producer's small writes into those buffers; `RelayQueue` holds what is in
/// flight — bytes, barriers and the end of stream, in order. A failure downstream is
/// handed back to the producer on its next call, and wakes it if it waits for a buffer.
///
/// A stop of the run does not wake a waiting producer by itself: the consumer either
/// frees a buffer soon or fails (every wait downstream gives up once the run stops, see
/// `POSIX.waitReady`), and either wakes it. So a stop leaves the stages on the
/// producer's side whole, and a final barrier can record exactly where they stand.
final class Relay: BufferLendingSink, HandOverSink, AheadWritingSink, @unchecked Sendable {
    // `next` is touched only by the consumer thread, `batcher` only by the producer's;
    // everything shared lives in `queue`, behind its lock.
    private let next: ByteSink
    private let control: RunControl
    private let buffers: [UnsafeMutableRawBufferPointer]
    private let queue: RelayQueue
    private let batcher: RelayBatcher
    /// The next sink's ahead writer, taken before the consumer thread starts: its offset 0
    /// is the first byte this relay accepts (nothing reaches `next` but through the relay).
    private let ahead: AheadWriter?
    /// Bytes accepted so far, written, handed over or advanced (the producer's side only):
    /// where the ahead writers this relay hands out begin.
    private var accepted: UInt64 = 0

    /// Throws when the consumer thread cannot be started (exit 6), leaving nothing running.
    init(
        next: ByteSink, control: RunControl, name: String, bufferCount: Int = 8, bufferSize: Int = 256 * 1024,
        startThread: EngineThread.Starter = EngineThread.start
    ) throws(SluiceError) {
        self.next = next
        self.control = control
        let buffers = (0..<bufferCount).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 64) }
        self.buffers = buffers
        queue = RelayQueue(bufferCount: bufferCount)
        batcher = RelayBatcher(buffers: buffers, queue: queue)
        ahead = (next as? AheadWritingSink)?.aheadWriter()
        try startThread("sluice." + name) { [self] in consume() }
    }

    deinit {
        queue.dropHandedOver()
        for buffer in buffers { buffer.deallocate() }
    }

    // MARK: producer side

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        try batcher.write(bytes)
        accepted &+= UInt64(bytes.count)
    }

    func borrowBuffer() throws -> UnsafeMutableRawBufferPointer {
        try batcher.borrow()
    }

    func commitBorrowed(_ count: Int) {
        accepted &+= UInt64(batcher.commit(count))
    }

    func write(
        handingOver bytes: UnsafeRawBufferPointer, released: (@Sendable (Int) -> Void)?, whenDone done: @escaping @Sendable () -> Void
    ) throws {
        do {
            try queue.throwIfFailed()
        } catch {
            done()
            throw error
        }
        batcher.flush()
        queue.send(.handedOver(bytes, done, released: released))
        accepted &+= UInt64(bytes.count)
    }

    func aheadWriter() -> AheadWriter? {
        ahead.map { ShiftedAheadWriter($0, shift: accepted) }
    }

    /// Travels in order with the bytes: the consumer tells `next` once everything before it
    /// is written.
    func advance(_ count: UInt64, crc64: UInt64) throws {
        try queue.throwIfFailed()
        batcher.flush()
        queue.send(.advance(count, crc64: crc64))
        accepted &+= count
    }

    func barrier(_ cut: Cut) throws {
        try queue.throwIfFailed()
        batcher.flush()
        queue.send(.barrier(cut))
    }

    /// Ends the stream and waits until everything downstream has finished.
    func finish() throws {
        try queue.throwIfFailed()
        batcher.flush()
        queue.send(.finish)
        try queue.waitForConsumer()
    }

    /// Stops the consumer after it has handled everything queued so far (a final barrier
    /// included), without finishing downstream. Safe to call more than once.
    func close() {
        batcher.flush()
        queue.stopConsumer()
    }

    // MARK: consumer side

    private func consume() {
        var ended = false
        while !ended {
            let (item, failed) = queue.take()
            do {
                switch item {
                case .data(let index, let count):
                    defer { queue.release(index) }
                    if !failed { try next.write(UnsafeRawBufferPointer(rebasing: buffers[index][0..<count])) }
                case .handedOver(let bytes, let done, let released):
                    defer { done() }
                    if !failed { try writeHandedOver(bytes, released) }
                case .advance(let count, let crc64):
                    guard !failed else { break }
                    try next.passAdvance(count, crc64: crc64)
                case .barrier(let cut):
                    if !failed { try next.barrier(cut) }
                case .finish:
                    ended = true
                    if !failed { try next.finish() }
                case .stop:
                    ended = true
                }
            } catch {
                // Stop the run first (a source far upstream may be waiting in libcurl or a
                // read), so the producer, woken next, finds the run stopped; recorded before
                // the exit below, as `finish()` reads it once the consumer is gone. An error
                // that is not a SluiceError is a bug, never the user's stop: it must not read
                // as an interruption (exit 130).
                control.fail(error as? SluiceError ?? .unexpected(String(describing: error)))
                queue.record(error)
            }
        }
        queue.consumerExited()
    }

    /// Bytes lent whole go out in pieces of this many, each released once written.
    static let handOverPiece = 1 << 20

    /// A lender that reuses its buffer as it is written (unxz's worker decodes its next block
    /// into it, behind this thread) learns after each piece how far it may go.
    private func writeHandedOver(_ bytes: UnsafeRawBufferPointer, _ released: (@Sendable (Int) -> Void)?) throws {
        guard let released else { return try next.write(bytes) }
        var written = 0
        while written < bytes.count {
            let piece = min(Self.handOverPiece, bytes.count - written)
            try next.write(UnsafeRawBufferPointer(rebasing: bytes[written..<(written + piece)]))
            written += piece
            released(written)
        }
    }
}

/// The shared half of a relay, behind one lock: the pool of free buffers, the items in
/// flight, the first failure downstream, and whether the consumer has exited. It never touches the bytes themselves.
final class RelayQueue: @unchecked Sendable {
    enum Item {
        case data(buffer: Int, count: Int)
        /// Bytes the producer lent as they are (`HandOverSink`); `done` gives them back,
        /// `released` the part written so far.
        case handedOver(UnsafeRawBufferPointer, @Sendable () -> Void, released: (@Sendable (Int) -> Void)? = nil)
        /// The next bytes are already written ahead (`AheadWritingSink.advance`).
        case advance(UInt64, crc64: UInt64)
        case barrier(Cut)
        case finish
        case stop
    }

    // All mutable state is guarded by `condition`.
    private let condition = ThreadCondition()
    private var free: [Int]
    private var items: [Item] = []
    private var failure: Error?
    private var exited = false
    private var stopQueued = false

    init(bufferCount: Int) {
        free = Array(0..<bufferCount)
    }

    // MARK: producer

    /// A free buffer, waiting while none is; throws the consumer's failure instead.
    func acquire() throws -> Int {
        condition.lock()
        defer { condition.unlock() }
        while free.isEmpty && failure == nil { condition.wait() }
        if let failure { throw failure }
        return free.removeLast()
    }

    func throwIfFailed() throws {
        condition.lock()
        defer { condition.unlock() }
        if let failure { throw failure }
    }

    func send(_ item: Item) {
        condition.lock()
        items.append(item)
        condition.broadcast()
        condition.unlock()
    }

    /// Waits for the consumer to exit (after `.finish`); throws what failed downstream.
    func waitForConsumer() throws {
        condition.lock()
        while !exited { condition.wait() }
        let error = failure
        condition.unlock()
        if let error { throw error }
    }

    /// Queues one `.stop` (unless the consumer is gone) and waits for the consumer to exit.
    func stopConsumer() {
        condition.lock()
        if !exited && !stopQueued {
            stopQueued = true
            items.append(.stop)
            condition.broadcast()
        }
        while !exited { condition.wait() }
        condition.unlock()
    }

    // MARK: consumer

    /// The next item, waiting for one, and whether an earlier item failed downstream
    /// (then the consumer only returns buffers until the end).
    func take() -> (item: Item, failed: Bool) {
        condition.lock()
        defer { condition.unlock() }
        while items.isEmpty { condition.wait() }
        return (items.removeFirst(), failure != nil)
    }

    func release(_ index: Int) {
        condition.lock()
        free.append(index)
        condition.broadcast()
        condition.unlock()
    }

    /// Keeps the first failure downstream, for the producer's next call.
    func record(_ error: Error) {
        condition.lock()
        if failure == nil { failure = error }
        condition.broadcast()
        condition.unlock()
    }

    /// Gives back what was handed over and never taken (the consumer stopped first).
    func dropHandedOver() {
        condition.lock()
        let left = items
        items.removeAll()
        condition.unlock()
        for case .handedOver(_, let done, _) in left { done() }
    }

    func consumerExited() {
        condition.lock()
        exited = true
        condition.broadcast()
        condition.unlock()
    }
}

/// The producer's half of a relay: gathers writes into the buffer being filled and
/// decides when it goes out. Small writes (libcurl hands over 16–64 KiB at a time) meet
/// the consumer once per buffer, not once per write; a partly filled buffer goes out
/// after `maxDelay`, so a slow stream still flows. Only the producer's thread uses it.
final class RelayBatcher {
    private let buffers: [UnsafeMutableRawBufferPointer]
    private let queue: RelayQueue
    private let now: () -> UInt64
    /// The buffer being filled, how much of it is, and since when (ns).
    private var filling: Int?
    private var filled = 0
    private var fillingSince: UInt64 = 0
    private var lent = false
    /// Lending less room than this would make the producer's calls tiny: send the buffer on.
    static let minimumRoom = 16 * 1024
    /// The longest a partly filled buffer waits for more bytes (ns).
    static let maxDelay: UInt64 = 20_000_000

    /// `now`: a monotonic clock in nanoseconds (tests pass their own).
    init(
        buffers: [UnsafeMutableRawBufferPointer], queue: RelayQueue,
        now: @escaping () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }
    ) {
        self.buffers = buffers
        self.queue = queue
        self.now = now
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var rest = bytes
        while let base = rest.baseAddress, !rest.isEmpty {
            let index = try fillingBuffer()
            let n = min(rest.count, buffers[index].count - filled)
            UnsafeMutableRawBufferPointer(rebasing: buffers[index][filled..<(filled + n)])
                .copyMemory(from: UnsafeRawBufferPointer(start: base, count: n))
            filled += n
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            if filled == buffers[index].count { flush() }
        }
        flushIfStale()
    }

    /// Room in the buffer being filled, for the producer to write into directly.
    func borrow() throws -> UnsafeMutableRawBufferPointer {
        precondition(!lent, "one borrowed buffer at a time")
        var index = try fillingBuffer()
        if buffers[index].count - filled < Self.minimumRoom {
            flush()
            index = try fillingBuffer()
        }
        lent = true
        return UnsafeMutableRawBufferPointer(rebasing: buffers[index][filled...])
    }

    /// The producer wrote `count` bytes into the borrowed room; returns how many count.
    @discardableResult
    func commit(_ count: Int) -> Int {
        guard lent, let index = filling else { return 0 }
        lent = false
        let taken = min(max(count, 0), buffers[index].count - filled)
        filled += taken
        if filled == buffers[index].count { flush() } else { flushIfStale() }
        return taken
    }

    /// Sends the gathered bytes on (or returns an empty buffer to the pool).
    func flush() {
        guard let index = filling else { return }
        filling = nil
        if filled > 0 { queue.send(.data(buffer: index, count: filled)) } else { queue.release(index) }
        filled = 0
    }

    /// The buffer to gather into, taking a free one if none is being filled.
    private func fillingBuffer() throws -> Int {
        if let filling { return filling }
        let index = try queue.acquire()
        filling = index
        filled = 0
        fillingSince = now()
        return index
    }

    private func flushIfStale() {
        if filling != nil && now() &- fillingSince >= Self.maxDelay { flush() }
    }
}
