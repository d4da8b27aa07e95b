import Foundation
import Synchronization

/// The blocks read after the head block and not yet handed on, in order, and the worker
/// threads that decode them ahead while the stage's own thread decodes the head block
/// (`XzHeadBlock`); with `workers` = cores − 1 the stage keeps no more threads busy than
/// there are cores. A job is claimed by exactly one worker, oldest first; the stage takes
/// jobs out only at the head, done.
final class XzBlockPool: @unchecked Sendable {
    private final class Entry {
        let job: XzBlockJob
        var claimed = false
        var done = false
        init(_ job: XzBlockJob) { self.job = job }
    }

    // Guarded by `condition`: the entries and how many workers run.
    private let condition = NSCondition()
    private var entries: [Entry] = []
    private var running = 0
    private let stopping = Atomic<Bool>(false)
    private let workers: Int
    private var started = false  // the stage's thread only
    private let name: String

    init(workers: Int, name: String = "unxz") {
        self.workers = workers
        self.name = name
    }

    deinit { shutdown() }

    /// Jobs queued and not yet taken out, done or not.
    var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return entries.count
    }

    /// Worker threads that have not left yet.
    var runningWorkers: Int {
        condition.lock()
        defer { condition.unlock() }
        return running
    }

    /// The queued jobs in order (their bytes go into a checkpoint).
    var jobs: [XzBlockJob] {
        condition.lock()
        defer { condition.unlock() }
        return entries.map(\.job)
    }

    /// Queues a whole block; starts the workers on first use (exit 6 if the system refuses).
    func submit(_ job: XzBlockJob) throws(SluiceError) {
        if !started {
            started = true
            for n in 0..<workers {
                condition.lock()
                running += 1
                condition.unlock()
                do {
                    try EngineThread.start("sluice.\(name).\(n + 1)") { [self] in work() }
                } catch {
                    condition.lock()
                    running -= 1
                    condition.unlock()
                    throw error
                }
            }
        }
        condition.lock()
        entries.append(Entry(job))
        condition.broadcast()
        condition.unlock()
    }

    /// The head job if it is done, taken out of the queue; nil otherwise.
    func takeFinishedHead() -> XzBlockJob? {
        condition.lock()
        defer { condition.unlock() }
        guard let head = entries.first, head.done else { return nil }
        entries.removeFirst()
        return head.job
    }

    /// Returns once the head job is done: decoded here if no worker has taken it yet (a
    /// pool without workers, or one not yet woken), else waited for. Returns at once when
    /// the queue is empty.
    func waitForHead(decodingWith lzma2: Lzma2Decoder) {
        condition.lock()
        if let head = entries.first, !head.claimed {
            head.claimed = true
            condition.unlock()
            head.job.decode(with: lzma2, stopped: { false })
            markDone(head)
            return
        }
        while let head = entries.first, !head.done { condition.wait() }
        condition.unlock()
    }

    /// Stops the workers (they leave within a chunk) and waits until they have; the queue
    /// is dropped. Safe to call more than once.
    func shutdown() {
        stopping.store(true, ordering: .releasing)
        condition.lock()
        condition.broadcast()
        while running > 0 { condition.wait() }
        entries.removeAll()
        condition.unlock()
    }

    // MARK: workers

    private func work() {
        let lzma2 = Lzma2Decoder()
        while let entry = claim() {
            entry.job.decode(with: lzma2, stopped: { stopping.load(ordering: .relaxed) })
            markDone(entry)
        }
        condition.lock()
        running -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// The oldest unclaimed job, waiting for one; nil once the pool stops.
    private func claim() -> Entry? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if stopping.load(ordering: .acquiring) { return nil }
            if let entry = entries.first(where: { !$0.claimed }) {
                entry.claimed = true
                return entry
            }
            condition.wait()
        }
    }

    private func markDone(_ entry: Entry) {
        condition.lock()
        entry.done = true
        condition.broadcast()
        condition.unlock()
    }
}
