#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Synchronization

/// Shared by every thread of one run: the stop flag and the first failure.
///
/// Any thread may stop the run (a signal, `Pipeline.cancel()`, a failed checkpoint
/// write); the source checks `isStopped` between chunks, and long waits (libcurl's
/// progress callback, queue waits) poll it.
public final class RunControl: Sendable {
    private let stopped = Atomic<Bool>(false)
    private let firstFailure = Mutex<SluiceError?>(nil)
    private let delivered = Atomic<UInt64>(0)
    let progress: ProgressReporter

    init(progress: ProgressReporter) {
        self.progress = progress
    }

    /// A control for stages built by hand (outside a `Pipeline`): `cancel()` stops them,
    /// and `progress` receives what they report (a source's retries, for one).
    public convenience init(progress handler: ProgressHandler? = nil) {
        self.init(progress: ProgressReporter(handler: handler))
    }

    public var isStopped: Bool { stopped.load(ordering: .acquiring) }

    /// Why the run stopped: the first failure recorded, or `.cancelled`.
    public var failure: SluiceError? { firstFailure.withLock { $0 } }

    public func cancel() { fail(.cancelled) }

    /// Bytes the terminal sink has taken so far in this run (for progress).
    public var outputBytes: UInt64 { delivered.load(ordering: .relaxed) }

    func countOutput(_ n: Int) {
        delivered.add(UInt64(n), ordering: .relaxed)
    }

    func resetOutput(to n: UInt64) {
        delivered.store(n, ordering: .relaxed)
    }

    func fail(_ error: SluiceError) {
        firstFailure.withLock { if $0 == nil { $0 = error } }
        stopped.store(true, ordering: .releasing)
    }

    /// Throws the recorded failure if the run has been stopped.
    func check() throws {
        if isStopped { throw failure ?? .cancelled }
    }
}
