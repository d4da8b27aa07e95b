import Foundation

/// A thread boundary inside the pipeline: a sink on the producer's side, a thread on the
/// consumer's that feeds the next sink.
///
/// Bytes travel in a fixed pool of reusable buffers (no allocation per chunk); when the
/// pool is empty the producer waits, so backpressure reaches the source. Barriers and
/// the end of stream travel in the same queue, in order. A failure downstream is handed
/// back to the producer on its next call.
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
    private var finished = false
    /// The buffer lent to the producer, if any (producer-side state).
    private var lent: Int?

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
            let index = try acquireBuffer()
            let n = min(rest.count, buffers[index].count)
            buffers[index].copyMemory(from: UnsafeRawBufferPointer(rebasing: rest[0..<n]))
            enqueue(.data(buffer: index, count: n))
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
        }
    }

    func borrowBuffer() throws -> UnsafeMutableRawBufferPointer {
        precondition(lent == nil, "one borrowed buffer at a time")
        let index = try acquireBuffer()
        lent = index
        return buffers[index]
    }

    func commitBorrowed(_ count: Int) {
        guard let index = lent else { return }
        lent = nil
        if count > 0 { enqueue(.data(buffer: index, count: count)) } else { release(index) }
    }

    func barrier(_ cut: Cut) throws {
        try throwIfFailed()
        enqueue(.barrier(cut))
    }

    /// Ends the stream and waits until everything downstream has finished.
    func finish() throws {
        try throwIfFailed()
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
                    if !failed { try next.finish() }
                    done = true
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
