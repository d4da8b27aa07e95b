import CXz
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// The blocks read after the head block and not yet handed on, in order, and the worker
/// threads that decode them ahead while the stage's own thread decodes the head block
/// (`XzHeadBlock`); with `workers` = cores − 1 the stage keeps no more threads busy than
/// there are cores. A job is claimed by exactly one worker, oldest first; the stage takes
/// jobs out only at the head, done.
///
/// A job may be queued from its header on, while the stage's thread still gathers it
/// (`published` tells the workers how far): a worker decodes a chunk as soon as its bytes
/// are there, instead of idling until the whole block has come in.
final class XzBlockPool: @unchecked Sendable {
    private final class Entry {
        let job: XzBlockJob
        var claimed = false
        var done = false
        /// Bytes of the job the worker may read (set by the stage's thread).
        var available: Int
        /// The stage stopped gathering it (`withdraw`): a worker waiting for bytes gives up.
        var withdrawn = false
        init(_ job: XzBlockJob) {
            self.job = job
            available = job.gathered
        }
    }

    // Guarded by `condition`: the entries and how many workers run.
    private let condition = ThreadCondition()
    private var entries: [Entry] = []
    private var running = 0
    private let stopping = Atomic<Bool>(false)
    /// A block output's mapping handed back once the block went on, for the next block a
    /// worker decodes (a fresh mapping costs a page fault per page, and zeroing).
    private var spare: UnsafeMutableRawBufferPointer?
    /// Block outputs handed over to the next stage and not yet given back (`handOver`).
    private var handedOver = 0
    private let workers: Int
    private var started = false  // the stage's thread only
    private let name: String

    init(workers: Int, name: String = "unxz") {
        self.workers = workers
        self.name = name
    }

    deinit {
        shutdown()
        cxz_unmap(spare?.baseAddress, spare?.count ?? 0)
    }

    /// Keeps a handed-on block's output mapping for the next block (one at most).
    func recycle(_ mapping: UnsafeMutableRawBufferPointer) {
        recycle(mapping, handedBack: false)
    }

    /// `handedBack`: it comes back from the next stage (`handOver`); in the same critical
    /// section, so a worker waiting for it never sees neither a spare nor one to come.
    private func recycle(_ mapping: UnsafeMutableRawBufferPointer, handedBack: Bool) {
        condition.lock()
        if handedBack { handedOver -= 1 }
        let previous = spare
        spare = mapping
        condition.broadcast()
        condition.unlock()
        cxz_unmap(previous?.baseAddress, previous?.count ?? 0)
    }

    /// A block's output mapping lent to the next stage as it is (`HandOverSink`): the
    /// returned closure, called once the sink no longer needs it, makes it the spare.
    func handOver(_ mapping: UnsafeMutableRawBufferPointer) -> @Sendable () -> Void {
        condition.lock()
        handedOver += 1
        condition.unlock()
        let lent = LentMapping(buffer: mapping)
        return { [self] in recycle(lent.buffer, handedBack: true) }
    }

    /// The spare mapping; while a block's output is still with the next stage, waits for it
    /// to come back rather than mapping a second block (so the workers never hold more than
    /// one block's output each, however slow the sink).
    private func takeSpare() -> UnsafeMutableRawBufferPointer? {
        condition.lock()
        defer { condition.unlock() }
        defer { spare = nil }
        if spare == nil && handedOver > 0 {
            XzWaits.time(.workerWaitsForBuffer) {
                while spare == nil && handedOver > 0 && !stopping.load(ordering: .acquiring) { condition.wait() }
            }
        }
        return spare
    }

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

    /// Queues a block, whole or still being gathered (then `published` follows it); starts
    /// the workers on first use (exit 6 if the system refuses).
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
            let available = head.available
            condition.unlock()
            // Only whole jobs are left for this thread (see `XzDecoder.drain`).
            head.job.decode(with: lzma2, stopped: { false }, awaiting: { $0 <= available })
            markDone(head)
            return
        }
        XzWaits.time(.stageWaitsForWorker) {
            while let head = entries.first, !head.done { condition.wait() }
        }
        condition.unlock()
    }

    /// The stage's thread gathered more of a queued job: a worker waiting for it may go on.
    func published(_ job: XzBlockJob) {
        condition.lock()
        if let entry = entries.last(where: { $0.job === job }), entry.available != job.gathered {
            entry.available = job.gathered
            condition.broadcast()
        }
        condition.unlock()
    }

    /// Takes a job that will never be gathered whole (the input ended, or the stage failed
    /// before it) out of the queue, waiting for a worker that decodes it to give up. It must
    /// be the last job queued.
    func withdraw(_ job: XzBlockJob) {
        condition.lock()
        defer { condition.unlock() }
        guard let entry = entries.last, entry.job === job else { return }
        entry.withdrawn = true
        condition.broadcast()
        while entry.claimed && !entry.done { condition.wait() }
        entries.removeLast()
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
            entry.job.decode(
                with: lzma2, reusing: takeSpare(), stopped: { stopping.load(ordering: .relaxed) }, awaiting: { waitForBytes($0, of: entry) })
            markDone(entry)
        }
        XzWaits.addThreadCPU(.workerCPU)
        condition.lock()
        running -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// The oldest unclaimed job, waiting for one; nil once the pool stops.
    private func claim() -> Entry? {
        condition.lock()
        defer { condition.unlock() }
        return XzWaits.time(.workerWaitsForBlock) {
            while true {
                if stopping.load(ordering: .acquiring) { return nil }
                if let entry = entries.first(where: { !$0.claimed }) {
                    entry.claimed = true
                    return entry
                }
                condition.wait()
            }
        }
    }

    /// Waits until `count` bytes of the entry's job are gathered; false if they never will be.
    private func waitForBytes(_ count: Int, of entry: Entry) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard entry.available < count else { return true }
        return XzWaits.time(.workerWaitsForBytes) {
            while entry.available < count {
                if entry.withdrawn || stopping.load(ordering: .acquiring) { return false }
                condition.wait()
            }
            return true
        }
    }

    private func markDone(_ entry: Entry) {
        condition.lock()
        entry.done = true
        condition.broadcast()
        condition.unlock()
    }
}

/// A block's output mapping on its way back from the next stage's thread.
private struct LentMapping: @unchecked Sendable {
    let buffer: UnsafeMutableRawBufferPointer
}
