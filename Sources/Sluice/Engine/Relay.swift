import Foundation

/// A thread boundary inside the pipeline: a sink on the producer's side, a thread on the
/// consumer's that feeds the next sink.
///
/// Bytes travel in a fixed pool of reusable buffers (no allocation per chunk); when the
/// pool is empty the producer waits, so backpressure reaches the source. Small writes
/// (libcurl hands over 16–64 KiB at a time) are gathered into a buffer until it is full,
/// so the threads meet once per buffer, not once per write; a partly filled buffer goes
/// out after `maxDelay`, so a slow stream still flows. Barriers and the end of stream
/// travel in the same queue, in order, behind the bytes before them. A failure downstream
/// is handed back to the producer on its next call.
final class Relay: BufferLendingSink, @unchecked Sendable {
    // All mutable state below is guarded by `condition`.
    private enum Item {
        case data(buffer: Int, count: Int)
        case barrier(Cut)
        case finish
        case stop
    }

    private let next: ByteSink
    private let control: RunControl
    private let buffers: [UnsafeMutableRawBufferPointer]
    private let condition = NSCondition()
    private var free: [Int]
    private var queue: [Item] = []
    private var failure: Error?
    private var consumerExited = false
    // Producer-side state (only the producer's thread touches it).
    /// The buffer being filled, how much of it is, and since when (ns).
    private var filling: Int?
    private var filled = 0
    private var fillingSince: UInt64 = 0
    private var lent = false
    /// Lending less room than this would make the producer's calls tiny: send the buffer on.
    private static let minimumRoom = 16 * 1024
    /// The longest a partly filled buffer waits for more bytes (ns).
    private static let maxDelay: UInt64 = 20_000_000

    init(next: ByteSink, control: RunControl, name: String, bufferCount: Int = 8, bufferSize: Int = 256 * 1024) {
        self.next = next
        self.control = control
        buffers = (0..<bufferCount).map { _ in .allocate(byteCount: bufferSize, alignment: 64) }
        free = Array(buffers.indices)
        let thread = Thread { [self] in consume() }
        thread.name = "sluice." + name
        thread.start()
    }

    deinit {
        for buffer in buffers { buffer.deallocate() }
    }

    // MARK: producer side

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var rest = bytes
        while !rest.isEmpty {
            let index = try fillingBuffer()
            let n = min(rest.count, buffers[index].count - filled)
            (buffers[index].baseAddress! + filled).copyMemory(from: rest.baseAddress!, byteCount: n)
            filled += n
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            if filled == buffers[index].count { sendFilling() }
        }
        sendIfStale()
    }

    func borrowBuffer() throws -> UnsafeMutableRawBufferPointer {
        precondition(!lent, "one borrowed buffer at a time")
        var index = try fillingBuffer()
        if buffers[index].count - filled < Self.minimumRoom {
            sendFilling()
            index = try fillingBuffer()
        }
        lent = true
        return UnsafeMutableRawBufferPointer(rebasing: buffers[index][filled...])
    }

    func commitBorrowed(_ count: Int) {
        guard lent, let index = filling else { return }
        lent = false
        filled += count
        if filled == buffers[index].count { sendFilling() } else { sendIfStale() }
    }

    /// The buffer to gather into, taking a free one if none is being filled.
    private func fillingBuffer() throws -> Int {
        if let filling { return filling }
        let index = try acquireBuffer()
        filling = index
        filled = 0
        fillingSince = DispatchTime.now().uptimeNanoseconds
        return index
    }

    /// Sends the gathered bytes on (or returns an empty buffer to the pool).
    private func sendFilling() {
        guard let index = filling else { return }
        filling = nil
        if filled > 0 { enqueue(.data(buffer: index, count: filled)) } else { release(index) }
        filled = 0
    }

    private func sendIfStale() {
        if filling != nil && DispatchTime.now().uptimeNanoseconds - fillingSince >= Self.maxDelay { sendFilling() }
    }

    func barrier(_ cut: Cut) throws {
        try throwIfFailed()
        sendFilling()
        enqueue(.barrier(cut))
    }

    /// Ends the stream and waits until everything downstream has finished.
    func finish() throws {
        try throwIfFailed()
        sendFilling()
        enqueue(.finish)
        condition.lock()
        while !consumerExited { condition.wait() }
        let error = failure
        condition.unlock()
        if let error { throw error }
    }

    /// Stops the consumer after it has handled everything queued so far (a final barrier
    /// included), without finishing downstream. Safe to call more than once.
    func close() {
        sendFilling()
        condition.lock()
        if !consumerExited && !queue.contains(where: { if case .stop = $0 { return true } else { return false } }) {
            queue.append(.stop)
            condition.broadcast()
        }
        while !consumerExited { condition.wait() }
        condition.unlock()
    }

    private func acquireBuffer() throws -> Int {
        condition.lock()
        defer { condition.unlock() }
        while free.isEmpty && failure == nil { condition.wait() }
        if let failure { throw failure }
        return free.removeLast()
    }

    private func throwIfFailed() throws {
        condition.lock()
        defer { condition.unlock() }
        if let failure { throw failure }
    }

    private func enqueue(_ item: Item) {
        condition.lock()
        queue.append(item)
        condition.broadcast()
        condition.unlock()
    }

    // MARK: consumer side

    private func consume() {
        while true {
            condition.lock()
            while queue.isEmpty { condition.wait() }
            let item = queue.removeFirst()
            let failed = failure != nil
            condition.unlock()

            var done = false
            do {
                switch item {
                case .data(let index, let count):
                    if !failed { try next.write(UnsafeRawBufferPointer(rebasing: buffers[index][0..<count])) }
                    release(index)
                case .barrier(let cut):
                    if !failed { try next.barrier(cut) }
                case .finish:
                    done = true  // before finish(), which may throw: the producer waits for this
                    if !failed { try next.finish() }
                case .stop:
                    done = true
                }
            } catch {
                condition.lock()
                failure = error
                condition.broadcast()
                condition.unlock()
                if case .data(let index, _) = item { release(index) }
                // Wake a source that may be blocked far upstream (in libcurl, a read).
                control.fail(error as? SluiceError ?? .cancelled)
            }
            if done {
                condition.lock()
                consumerExited = true
                condition.broadcast()
                condition.unlock()
                return
            }
        }
    }

    private func release(_ index: Int) {
        condition.lock()
        free.append(index)
        condition.broadcast()
        condition.unlock()
    }
}
