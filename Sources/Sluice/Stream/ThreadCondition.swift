#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// A mutex with a condition variable (pthreads): what the engine's threads hand work over
/// with. Foundation's `NSCondition` is the same thing, but it lives in the full Foundation,
/// whose libraries (ICU's among them) cost every run several MiB of resident memory; Sluice
/// links FoundationEssentials only.
final class ThreadCondition: @unchecked Sendable {
    // On the heap: a pthread object must not move, and a Swift stored property may.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    /// Releases the lock until signalled (or woken spuriously), then holds it again.
    func wait() { pthread_cond_wait(condition, mutex) }

    /// As `wait()`, but gives up at `deadline` (wall clock): false when it did.
    func wait(until deadline: Date) -> Bool {
        // Clamped so the conversion to whole seconds cannot trap on a far-off date.
        let seconds = min(max(deadline.timeIntervalSince1970, 0), 1e15)
        let whole = seconds.rounded(.down)
        var limit = timespec(tv_sec: Int(whole), tv_nsec: min(Int((seconds - whole) * 1e9), 999_999_999))
        return pthread_cond_timedwait(condition, mutex, &limit) == 0
    }

    func signal() { pthread_cond_signal(condition) }
    func broadcast() { pthread_cond_broadcast(condition) }
}
