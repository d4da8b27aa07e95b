#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
import Glibc
import Synchronization

/// Where unxz's decoding threads spend their time, summed over a run and printed to
/// stderr when it finishes, with `SLUICE_XZ_WAITS=1` in the environment: for tuning the
/// parallel path on a shared machine, where wall times say little. Off, a wait costs one
/// branch.
enum XzWaits {
    enum Kind: Int, CaseIterable {
        /// The stage's thread: waiting for a worker's block it must hand on next.
        case stageWaitsForWorker
        /// The stage's thread: handing on a worker's block (copying it into the next stage).
        case stageHandsOn
        /// The stage's thread: handing on the head's output, chunk by chunk.
        case stageWritesHead
        /// A worker: waiting for a block to decode.
        case workerWaitsForBlock
        /// A worker: waiting for its block's compressed bytes to be gathered.
        case workerWaitsForBytes
        /// A worker: waiting for the last block's output buffer to come back from the sink.
        case workerWaitsForBuffer
        /// A worker: writing its block's output ahead into the file (`XzAheadOutput`).
        case workerWritesAhead
        /// CPU time of the stage's thread and of the workers (at their end).
        case stageCPU
        case workerCPU
    }

    static let enabled = getenv("SLUICE_XZ_WAITS") != nil
    private static let totals = Mutex<[(ns: UInt64, count: Int)]>(Array(repeating: (0, 0), count: Kind.allCases.count))

    static func time<T>(_ kind: Kind, _ body: () throws -> T) rethrows -> T {
        guard enabled else { return try body() }
        let start = DispatchTime.now().uptimeNanoseconds
        defer { add(kind, DispatchTime.now().uptimeNanoseconds &- start) }
        return try body()
    }

    static func add(_ kind: Kind, _ ns: UInt64) {
        guard enabled else { return }
        totals.withLock {
            $0[kind.rawValue].ns &+= ns
            $0[kind.rawValue].count += 1
        }
    }

    /// Adds the calling thread's CPU time so far.
    static func addThreadCPU(_ kind: Kind) {
        guard enabled else { return }
        var spec = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec) == 0 else { return }
        add(kind, UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec))
    }

    static func report() {
        guard enabled else { return }
        let lines = totals.withLock { totals in
            Kind.allCases.map { kind in
                let (ns, count) = totals[kind.rawValue]
                return "unxz waits: \(kind) \(cFormat("%.3f", Double(ns) / 1e9)) s in \(count)\n"
            }
        }
        StandardError.write(lines.joined())
    }
}
