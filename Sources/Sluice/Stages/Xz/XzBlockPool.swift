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
    /// Block outputs lent to the next stage (`handOver`) that no worker has taken yet.
    private var lent: [Lease] = []
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

    /// A block's output mapping lent to the next stage. A worker may take it before it comes
    /// back and decode its next block into it behind the sink, which has written `released`
    /// bytes of it so far (the sink writes far faster than LZMA decodes). Guarded by the
    /// pool's condition.
    private final class Lease: @unchecked Sendable {
        let mapping: UnsafeMutableRawBufferPointer
        var released = 0
        var returned = false
        /// A worker decodes into it; else it becomes the spare when it comes back.
        var claimed = false
        /// The worker stopped before it came back: giving it back unmaps it.
        var abandoned = false
        init(_ mapping: UnsafeMutableRawBufferPointer) { self.mapping = mapping }
    }

    /// Keeps a handed-on block's output mapping for the next block (one at most).
    func recycle(_ mapping: UnsafeMutableRawBufferPointer) {
        condition.lock()
        let previous = spare
        spare = mapping
        condition.broadcast()
        condition.unlock()
        cxz_unmap(previous?.baseAddress, previous?.count ?? 0)
    }

    /// A block's output mapping lent to the next stage as it is (`HandOverSink`): the sink
    /// calls `released` as it writes it and `done` once it no longer needs it.
    func handOver(_ mapping: UnsafeMutableRawBufferPointer) -> (released: @Sendable (Int) -> Void, done: @Sendable () -> Void) {
        let lease = Lease(mapping)
        condition.lock()
        lent.append(lease)
        condition.unlock()
        return ({ [self] count in written(count, of: lease) }, { [self] in returned(lease) })
    }

    private func written(_ count: Int, of lease: Lease) {
        condition.lock()
        lease.released = max(lease.released, count)
        if lease.claimed { condition.broadcast() }
        condition.unlock()
    }

    /// Back from the sink: the worker decoding into it goes on; untaken, it is the spare.
    private func returned(_ lease: Lease) {
        condition.lock()
        lease.returned = true
        var unmap: UnsafeMutableRawBufferPointer?
        if lease.abandoned {
            unmap = lease.mapping
        } else if !lease.claimed {
            lent.removeAll { $0 === lease }
            unmap = spare
            spare = lease.mapping
        }
        condition.broadcast()
        condition.unlock()
        cxz_unmap(unmap?.baseAddress, unmap?.count ?? 0)
    }

    /// The spare mapping, else one still with the sink (the worker decodes behind it), else
    /// nil (a fresh one is mapped). So the workers hold one block's output each, however
    /// slow the sink, and none waits for its last one to come back.
    private func takeSpare() -> (mapping: UnsafeMutableRawBufferPointer?, lease: Lease?) {
        condition.lock()
        defer { condition.unlock() }
        if let mapping = spare {
            spare = nil
            return (mapping, nil)
        }
        guard !lent.isEmpty else { return (nil, nil) }
        let lease = lent.removeFirst()
        lease.claimed = true
        return (lease.mapping, lease)
    }

    /// Returns once the sink has written the first `count` bytes of the lease's mapping (or
    /// gave it back); false if the pool stops first.
    private func waitForRoom(_ count: Int, in lease: Lease) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !lease.returned && lease.released < count else { return true }
        return XzWaits.time(.workerWaitsForBuffer) {
            while !lease.returned && lease.released < count {
                if stopping.load(ordering: .acquiring) { return false }
                condition.wait()
            }
            return true
        }
    }

    /// After its block, a worker owns the lease's mapping again once the sink gave it back;
    /// stopping before that, it lets go of it (in the job's output or the decoder's window)
    /// and leaves the unmapping to the sink's give-back.
    private func settle(_ lease: Lease, job: XzBlockJob, lzma2: Lzma2Decoder) {
        if waitForRoom(.max, in: lease) { return }
        let base = lease.mapping.baseAddress
        if job.output?.baseAddress == base { _ = job.takeOutputMapping() }
        if lzma2.windowBase == base { _ = lzma2.takeOutput() }
        condition.lock()
        let unmapNow = lease.returned
        lease.abandoned = !unmapNow
        condition.unlock()
        if unmapNow { cxz_unmap(base, lease.mapping.count) }
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

    /// Returns once the head job is done: decoded here with `lzma2` if no worker has taken
    /// it yet (a pool without workers, or one not yet woken), else waited for (without a
    /// decoder, a worker takes it). Returns at once when the queue is empty.
    func waitForHead(decodingWith lzma2: Lzma2Decoder?) {
        condition.lock()
        if let lzma2, let head = entries.first, !head.claimed {
            head.claimed = true
            let available = head.available
            condition.unlock()
            // Only whole jobs are left for this thread (see `XzDecoder.drain`).
            head.job.decode(with: lzma2, stopped: { false }, awaiting: { $0 <= available })
            markDone(head)
            return
        }
        XzWaits.time(.stageWaitsForWorker) {
            stageWaits = true
            condition.broadcast()
            while let head = entries.first, !head.done { condition.wait() }
            stageWaits = false
        }
        condition.unlock()
    }

    /// Tests: a worker finishes a block only once the stage's thread waits for one, so the
    /// stage's thread always runs out of other work first (no timing involved).
    var finishOnlyWhenAwaitedForTests = false
    /// The stage's thread waits for a worker's block (guarded by `condition`).
    private var stageWaits = false

    private func awaitTheStageForTests(_ entry: Entry) {
        guard finishOnlyWhenAwaitedForTests else { return }
        condition.lock()
        while !stageWaits && !entry.withdrawn && !stopping.load(ordering: .acquiring) { condition.wait() }
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
            let (spare, lease) = takeSpare()
            entry.job.decode(
                with: lzma2, reusing: spare, room: { count in lease.map { waitForRoom(count, in: $0) } ?? true }, writingAhead: true,
                stopped: { stopping.load(ordering: .relaxed) }, awaiting: { waitForBytes($0, of: entry) })
            if let lease { settle(lease, job: entry.job, lzma2: lzma2) }
            // Written ahead, the output is in the file already: its mapping (pages given back)
            // is the next block's at once.
            if entry.job.writtenAhead != nil, let mapping = entry.job.takeOutputMapping() { recycle(mapping) }
            awaitTheStageForTests(entry)
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
