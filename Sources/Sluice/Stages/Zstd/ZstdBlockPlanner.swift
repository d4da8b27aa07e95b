import CZstdDecoder
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// A block read whole (its bytes padded as the C decoder needs) and, once planned, what
/// its execution needs: literals and resolved sequences (a `ZsdPlan`), or why it is corrupt.
/// Jobs are recycled; the stage swaps its unit buffer with the job's instead of copying.
final class ZstdBlockJob {
    enum Progress { case queued, planning, planned }

    var buffer: UnsafeMutableRawPointer
    let plan: OpaquePointer
    /// Set by the stage before submitting.
    var header: UInt32 = 0
    var count = 0
    var unitStart: UInt64 = 0
    var blockMaximum = 0
    /// Set by the planner.
    var progress = Progress.queued
    var failure: String?

    static let front = Int(ZSD_INPUT_FRONT_PAD)
    static let byteCount = front + Int(ZSD_BLOCK_MAX) + Int(ZSD_INPUT_TAIL_PAD)

    /// A zeroed buffer a unit of input can be read into (the padding reads as zeros).
    static func makeBuffer() -> UnsafeMutableRawPointer {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: 64)
        buffer.initializeMemory(as: UInt8.self, repeating: 0, count: byteCount)
        return buffer
    }

    init() {
        guard let made = zsd_plan_create() else { fatalError("out of memory allocating a zstd block plan") }
        plan = made
        buffer = Self.makeBuffer()
    }

    deinit {
        zsd_plan_destroy(plan)
        buffer.deallocate()
    }

    /// The block's bytes.
    var content: UnsafeMutableRawPointer { buffer + Self.front }

    /// Block type: 0 raw, 1 RLE, 2 compressed.
    var type: UInt32 { (header >> 1) & 3 }
}

/// Decodes blocks' entropy-coded halves (Huffman literals, FSE sequences, repeat offsets)
/// ahead of the stage, in order, on one worker thread, while the stage executes the blocks
/// before them into the window. Only execution needs earlier output, so a block is planned
/// while the one before it is copied out. Without a worker (one core) the stage plans each
/// block itself when it needs it.
///
/// The entropy state (`blocks`) belongs to whoever plans; the stage touches it (snapshot,
/// restore, new frame) only when no job is queued.
final class ZstdBlockPlanner: @unchecked Sendable {
    let blocks = ZstdBlockDecoder()

    // Guarded by `condition`: the jobs, their progress, `broken` and how many workers run.
    private let condition = ThreadCondition()
    private var jobs: [ZstdBlockJob] = []
    private var broken = false
    private var running = 0
    private let stopping = Atomic<Bool>(false)
    private let useWorker: Bool
    private var started = false  // the stage's thread only
    /// Whether a worker plans (set by the stage's thread before it queues a job after it).
    private var hasWorker = false

    /// Worker threads alive in the process (tests check that they all stop).
    static let liveWorkers = Atomic<Int>(0)

    /// Unplanned jobs queued before the worker is woken (the stage wakes it anyway before
    /// it waits for a plan).
    private let wakeBatch: Int

    init(useWorker: Bool = ProcessInfo.processInfo.activeProcessorCount > 1, wakeBatch: Int = 1) {
        self.useWorker = useWorker
        self.wakeBatch = max(1, wakeBatch)
    }

    deinit { shutdown() }

    /// Whether any block went through the queue (tests; the stage's thread only).
    private(set) var everQueued = false

    /// Jobs submitted and not yet taken out.
    var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count
    }

    /// Queues a block; starts the worker on first use (exit 6 if the system refuses).
    func submit(_ job: ZstdBlockJob) throws(SluiceError) {
        if useWorker && !started {
            started = true
            condition.lock()
            running += 1
            condition.unlock()
            Self.liveWorkers.add(1, ordering: .relaxed)
            do {
                try EngineThread.start("sluice.zstdplan") { [self] in work() }
                hasWorker = true
            } catch {
                Self.liveWorkers.subtract(1, ordering: .relaxed)
                condition.lock()
                running -= 1
                condition.unlock()
                throw error
            }
        }
        job.progress = .queued
        job.failure = nil
        everQueued = true
        condition.lock()
        jobs.append(job)
        if wakeBatch == 1 || jobs.count(where: { $0.progress == .queued }) >= wakeBatch { condition.broadcast() }
        condition.unlock()
    }

    /// The oldest job, planned (here when there is no worker), taken out of the queue;
    /// nil when none is queued.
    func takeHead() -> ZstdBlockJob? {
        condition.lock()
        defer { condition.unlock() }
        while let head = jobs.first {
            switch head.progress {
            case .planned:
                jobs.removeFirst()
                return head
            case .queued where !hasWorker:
                // No worker: plan here. (With one, helping it would only stall it: planning
                // is in order, so it could not start on the next block meanwhile.)
                head.progress = .planning
                condition.unlock()
                plan(head)
                condition.lock()
                head.progress = .planned
                condition.broadcast()
            case .queued, .planning:
                condition.broadcast()  // the worker may sleep on a batch not yet full
                condition.wait()
            }
        }
        return nil
    }

    /// Stops the worker (it leaves after the block it plans) and waits until it has; the
    /// queue is dropped. Safe to call more than once.
    func shutdown() {
        stopping.store(true, ordering: .releasing)
        condition.lock()
        condition.broadcast()
        while running > 0 { condition.wait() }
        jobs.removeAll()
        condition.unlock()
    }

    /// Plans `job` on the caller's thread, bypassing the queue. Only while nothing is
    /// queued: then no worker holds the entropy state (the lock taken by `count` or
    /// `takeHead` orders this after its last plan).
    func planHere(_ job: ZstdBlockJob) {
        job.failure = nil
        plan(job)
        job.progress = .planned
    }

    // MARK: planning

    /// Plans one job; after a corrupt block the entropy state is meaningless, so later jobs
    /// are not decoded (the stage stops at the first failure anyway).
    private func plan(_ job: ZstdBlockJob) {
        condition.lock()
        let skip = broken
        condition.unlock()
        if skip {
            job.failure = "not decoded after an earlier corrupt block"
            return
        }
        guard job.type == 2 else { return }
        do {
            try blocks.plan(job.content, count: job.count, blockMaximum: job.blockMaximum, into: job.plan)
        } catch {
            job.failure = error.reason
            condition.lock()
            broken = true
            condition.unlock()
        }
    }

    private func work() {
        while let job = claim() {
            plan(job)
            condition.lock()
            job.progress = .planned
            condition.broadcast()
            condition.unlock()
        }
        Self.liveWorkers.subtract(1, ordering: .relaxed)
        condition.lock()
        running -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// The oldest queued job once no other is being planned, waiting for one; nil once stopping.
    private func claim() -> ZstdBlockJob? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if stopping.load(ordering: .acquiring) { return nil }
            if !jobs.contains(where: { $0.progress == .planning }),
                let job = jobs.first(where: { $0.progress == .queued })
            {
                job.progress = .planning
                return job
            }
            condition.wait()
        }
    }
}
