#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Bytes fetched ahead of the in-order point, held until everything before them has arrived.
///
/// The window is one ring of `capacity` bytes covering the source offsets
/// `base ..< base + capacity`: a connection whose bytes lie further ahead waits in `put`
/// (and, since it waits inside libcurl's write callback, libcurl stops reading its socket
/// and TCP slows the server), so memory is bounded whatever the number of connections and
/// however slow the head of the line is. The bytes at `base` are never refused, so the
/// connection the stream waits for always makes progress.
final class ReorderWindow: @unchecked Sendable {
    // Every mutable field is guarded by `condition`.
    let capacity: Int
    private let ring: UnsafeMutableRawBufferPointer
    private let condition = ThreadCondition()
    /// Every byte before it has left the window (or never needed it).
    private(set) var base: UInt64
    /// Stored ranges, coalesced, by start and by end.
    private var byStart: [UInt64: UInt64] = [:]
    private var byEnd: [UInt64: UInt64] = [:]
    private var failure: Error?
    /// How long a wait sleeps before it looks at `stopped` again.
    private static let pollSeconds = 0.05

    init(capacity: Int, base: UInt64) {
        self.capacity = max(1, capacity)
        self.base = base
        ring = .allocate(byteCount: self.capacity, alignment: 64)
    }

    deinit { ring.deallocate() }

    /// The in-order point, read under the lock.
    var inOrderOffset: UInt64 { locked { base } }

    /// Copies `bytes` in at source offset `offset`, waiting while they lie beyond the window.
    /// Throws the window's failure once it has one, or `stopped()`'s error (which only ends this call).
    func put(_ bytes: UnsafeRawBufferPointer, at offset: UInt64, stopped: () -> Error?) throws {
        var rest = bytes
        var at = offset
        while !rest.isEmpty {
            let count = min(rest.count, capacity)
            condition.lock()
            defer { condition.unlock() }
            while failure == nil && at.addingClamped(UInt64(count)) > base.addingClamped(UInt64(capacity)) {
                if let error = stopped() { throw error }
                _ = condition.wait(until: Date(timeIntervalSinceNow: Self.pollSeconds))
            }
            if let failure { throw failure }
            copyIn(UnsafeRawBufferPointer(rebasing: rest[..<count]), at: at)
            insert(at, at + UInt64(count))
            condition.broadcast()
            at += UInt64(count)
            rest = UnsafeRawBufferPointer(rebasing: rest[count...])
        }
    }

    /// Moves the in-order point to `offset`: the bytes before it were delivered without
    /// passing through the window (nothing may be stored below `offset`).
    func advance(to offset: UInt64) {
        locked {
            guard offset > base else { return }
            base = offset
            condition.broadcast()
        }
    }

    /// Waits for bytes at the in-order point, passes up to `limit` of them to `deliver`
    /// (outside the lock; one contiguous piece of the ring), then frees them. Returns the new
    /// in-order point. Throws the window's failure, or `stopped()`'s.
    @discardableResult
    func deliver(limit: Int, stopped: () -> Error?, _ deliver: (UnsafeRawBufferPointer) throws -> Void) throws -> UInt64 {
        condition.lock()
        while failure == nil && byStart[base] == nil {
            if let error = stopped() {
                condition.unlock()
                throw error
            }
            _ = condition.wait(until: Date(timeIntervalSinceNow: Self.pollSeconds))
        }
        if let failure {
            condition.unlock()
            throw failure
        }
        let start = base
        let available = byStart[start]! - start
        let position = Int(start % UInt64(capacity))
        let count = min(Int(min(available, UInt64(Int.max))), limit, capacity - position)
        condition.unlock()

        // The piece stays ours while we read it: `put` admits nothing past base + capacity.
        try deliver(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(ring)[position..<(position + count)]))

        return locked {
            // A connection may have extended this range meanwhile: look it up again.
            let end = byStart.removeValue(forKey: start) ?? start
            let next = start + UInt64(count)
            if next < end {
                byStart[next] = end
                byEnd[end] = next
            } else {
                byEnd[end] = nil
            }
            base = next
            condition.broadcast()
            return next
        }
    }

    /// Stops the window: every waiting and later `put` or `deliver` throws `error` (the first wins).
    func fail(_ error: Error) {
        locked {
            if failure == nil { failure = error }
            condition.broadcast()
        }
    }

    var failed: Error? { locked { failure } }

    /// Bytes stored ahead of the in-order point (for tests and the memory bound).
    var storedBytes: UInt64 { locked { byStart.reduce(0) { $0 + ($1.value - $1.key) } } }

    private func locked<T>(_ body: () -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }

    private func copyIn(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) {
        let position = Int(offset % UInt64(capacity))
        let first = min(bytes.count, capacity - position)
        ring.baseAddress!.advanced(by: position).copyMemory(from: bytes.baseAddress!, byteCount: first)
        if first < bytes.count {
            ring.baseAddress!.copyMemory(from: bytes.baseAddress!.advanced(by: first), byteCount: bytes.count - first)
        }
    }

    /// Records `start..<end` as stored, merging it with its neighbours.
    private func insert(_ start: UInt64, _ end: UInt64) {
        var lower = start
        var upper = end
        if let before = byEnd.removeValue(forKey: start) {
            byStart[before] = nil
            lower = before
        }
        if let after = byStart.removeValue(forKey: end) {
            byEnd[after] = nil
            upper = after
        }
        byStart[lower] = upper
        byEnd[upper] = lower
    }
}
