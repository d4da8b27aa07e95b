import CXz
import CZlib
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `unxz`: decompresses .xz (the xz file format 1.x): concatenated streams, stream padding,
/// the index checked against the blocks, every block's check (None, CRC32, CRC64, SHA-256);
/// filters LZMA2, delta, x86 and ARM64. Its state is exact at every input byte, so a
/// checkpoint may cut anywhere, even inside a block.
///
/// Input is gathered unit by unit (a header, an LZMA2 chunk of at most 64 KiB, a check…)
/// and each unit is handled whole: output leaves only for whole chunks, and a snapshot is
/// the position plus the partly gathered unit.
///
/// Blocks whose header declares both sizes (what `xz -T` writes) are gathered whole instead.
/// The oldest is the head (`XzHeadBlock`): this thread decodes it chunk by chunk into the
/// next stage, keeping pace with the input that follows, while worker threads decode the
/// next blocks whole (`XzBlockPool`, one block per worker) to hand on after it. A snapshot
/// is the position, the head's exact state and undecoded bytes, the raw bytes of the blocks
/// decoded ahead (decoded again on restore), and the block being gathered.
public final class XzDecoder: ForwardingSink {
    public let next: ByteSink
    public let memoryLimit: UInt64
    private var phase: XzState.Phase = .streamHeader
    private var inputOffset: UInt64 = 0
    private var outputOffset: UInt64 = 0
    /// Output of the current stream's blocks handed on (checks a restored queue).
    private var streamOutput: UInt64 = 0
    /// The unit being gathered, with slack the LZMA decoder may read past a chunk's end.
    private let pending: UnsafeMutableRawBufferPointer
    private var pendingCount = 0
    private var streamsDone: UInt64 = 0
    private var paddingRun: UInt64 = 0
    private var streamFlags: UInt8 = 0
    private var checkKind = XzCheck.Kind.none
    private var blocks = XzRecordSummary()
    private var index = XzIndexParser()
    private var block: Block?
    /// Threads that decode sized blocks, this one included; 1 decodes every block in turn.
    private let decoders: Int
    private let pool: XzBlockPool
    /// In `blockBody`: the sized block being gathered.
    private var gathering: XzBlockJob?
    /// The block being gathered is already queued: a worker decodes it as it comes in.
    private var gatheringQueued = false
    /// The oldest sized block not yet handed on, decoded on this thread.
    private var head: XzHeadBlock?
    /// The block being gathered when it will be the next head but a worker still decodes
    /// the block before it: this thread starts it meanwhile, its output held back.
    private var early: XzEarlyHead?
    /// Sized blocks decoded ahead of the head by the workers, at most: one per worker.
    private var lookAhead: Int { decoders - 1 }
    /// The file behind the next stage, for workers to write their blocks' output straight to
    /// its place (`AheadWriter`); `origin` is `outputOffset` when it was taken, its offset 0.
    /// Taken at the first block queued; nil when the sink behind is not a file.
    private lazy var ahead: (writer: AheadWriter, origin: UInt64)? =
        (next as? AheadWritingSink)?.aheadWriter().map { ($0, outputOffset) }
    /// Where the unit being handled began in the input.
    private var unitStart: UInt64 = 0
    /// A restored checkpoint may queue no more blocks than this.
    static let mostQueued = 8

    /// The block being decoded.
    private final class Block {
        let headerBytes: Data
        let header: XzBlockHeader
        var compressedSize: UInt64 = 0
        var uncompressedSize: UInt64 = 0
        var check: XzCheck
        let lzma2: Lzma2Decoder
        let filters: XzFilterChain

        init(headerBytes: Data, header: XzBlockHeader, check: XzCheck, lzma2: Lzma2Decoder) {
            self.headerBytes = headerBytes
            self.header = header
            self.check = check
            self.lzma2 = lzma2
            self.filters = XzFilterChain(header.filters)
            lzma2.startBlock(dictionarySize: header.dictionarySize)
        }
    }
    /// Kept across blocks, so its window's memory is reused.
    private let lzma2 = Lzma2Decoder()

    private static let largestUnit = 6 + (1 << 16)

    /// `decoders`: threads that may decode sized blocks at once, this one included (the
    /// others are started at the first such block).
    public init(next: ByteSink, memoryLimit: UInt64 = 256 << 20, decoders: Int = 1, restoring state: XzState? = nil) throws {
        self.next = next
        self.memoryLimit = memoryLimit
        self.decoders = max(1, decoders)
        pool = XzBlockPool(workers: self.decoders - 1)
        pending = .allocate(byteCount: Self.largestUnit + Int(CXZ_INPUT_SLACK), alignment: 16)
        pending.initializeMemory(as: UInt8.self, repeating: 0)
        if let state {
            do {
                try restore(state)
            } catch let error as XzStateError {
                throw StateRejected("its unxz state is malformed: \(error.reason)")
            } catch let error as XzFormatError {
                throw StateRejected("its unxz state does not hold together: \(error.reason)")
            } catch let limit as DecoderLimitExceeded {
                throw StateRejected("its unxz state is unusable: \(limit.refusal)")
            }
        }
    }

    deinit {
        pool.shutdown()
        pending.deallocate()
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        var rest = bytes
        while !rest.isEmpty {
            let used: Int
            do {
                used = try step(rest)
            } catch let error as XzFormatError {
                throw failing(SluiceError.corruptData(format: "xz", offset: inputOffset, reason: error.reason))
            } catch let limit as DecoderLimitExceeded {
                throw failing(limit.error(format: "xz", offset: inputOffset))
            } catch {
                pool.shutdown()
                throw error
            }
            rest = UnsafeRawBufferPointer(rebasing: rest[used...])
        }
    }

    /// Worker threads still running (for tests: none after `finish` or a failure).
    var workersRunning: Int { pool.runningWorkers }
    /// Sized blocks read by this decoder that streamed as the head, and that went to the
    /// workers (for tests).
    private(set) var blocksStreamed = 0
    private(set) var blocksDecodedAhead = 0
    /// Blocks decoded ahead that were handed over to the next stage without a copy (for tests).
    private(set) var blocksHandedOver = 0
    /// Blocks decoded ahead whose output a worker wrote straight into the file behind (for tests).
    private(set) var blocksWrittenAhead = 0
    /// Heads started while a worker still decoded the block before them, and their output
    /// decoded before that block went on (for tests).
    private(set) var headsStartedEarly = 0
    private(set) var outputDecodedEarly: UInt64 = 0
    /// A head started early is being gathered (for tests).
    var startingAHeadEarly: Bool { early != nil }
    /// Moves the place a worker writes at by this many bytes (tests: a wrong place is refused
    /// at the block's turn, never counted).
    var misplaceAheadForTests: UInt64 = 0
    /// Tests: a worker finishes a block only once this thread waits for it.
    var finishOnlyWhenAwaitedForTests: Bool {
        get { pool.finishOnlyWhenAwaitedForTests }
        set { pool.finishOnlyWhenAwaitedForTests = newValue }
    }

    /// Damage found on this thread lies after every queued block: a queued block's own
    /// failure is the one to report. Either way the workers stop.
    private func failing(_ found: SluiceError) -> Error {
        defer { pool.shutdown() }
        do {
            try drain()
        } catch {
            return error
        }
        return found
    }

    /// Consumes bytes of the current unit; handles the unit once it is whole.
    private func step(_ input: UnsafeRawBufferPointer) throws -> Int {
        switch phase {
        case .index:
            let used = try index.consume(input)
            inputOffset &+= UInt64(used)
            if index.isDone { try endIndex() }
            return used
        case .blockBody:
            guard let job = gathering else { throw XzFormatError("no block is being gathered") }
            if let early { return try gatherEarly(job, early, input) }
            let pacing = try keepPace(with: job)
            // While the head keeps pace, small pieces let it follow closely.
            let piece = pacing ? UnsafeRawBufferPointer(rebasing: input.prefix(max(job.count / 32, 1 << 16))) : input
            let used = job.gather(piece)
            inputOffset &+= UInt64(used)
            if gatheringQueued { pool.published(job) }
            if job.isGathered { try queue(job) }
            return used
        case .streamPadding:
            guard let nonzero = input.firstIndex(where: { $0 != 0 }) else {
                paddingRun &+= UInt64(input.count)
                inputOffset &+= UInt64(input.count)
                return input.count
            }
            paddingRun &+= UInt64(nonzero)
            inputOffset &+= UInt64(nonzero)
            if nonzero == 0 {
                guard paddingRun % 4 == 0 else { throw XzFormatError("stream padding is not a multiple of four bytes") }
                phase = .streamHeader
            }
            return nonzero
        default:
            let want = try unitSize() - pendingCount
            let take = min(want, input.count)
            (pending.baseAddress! + pendingCount).copyMemory(from: input.baseAddress!, byteCount: take)
            pendingCount += take
            if take == want {
                // Errors name the offset where the unit began.
                unitStart = inputOffset &+ UInt64(take) &- UInt64(pendingCount)
                try handleUnit()
            }
            inputOffset &+= UInt64(take)
            return take
        }
    }

    /// The size of the unit being gathered, from the phase and what is gathered so far.
    private func unitSize() throws -> Int {
        switch phase {
        case .streamHeader, .streamFooter: return 12
        case .blockStart: return 1
        case .blockHeader: return (Int(pending[0]) + 1) * 4
        case .chunk:
            guard pendingCount > 0 else { return 1 }
            let header = try Lzma2Decoder.headerLength(control: pending[0])
            guard pendingCount >= header, header > 1 else { return header }
            return header + Lzma2Decoder.payloadLength(header: UnsafeRawBufferPointer(pending))
        case .blockPadding: return Int((4 - (currentBlock.compressedSize % 4)) % 4)
        case .check: return checkKind.size
        case .index, .streamPadding, .blockBody: return 0
        }
    }

    private var currentBlock: Block { block! }

    private func handleUnit() throws {
        let unit = UnsafeRawBufferPointer(rebasing: pending[0..<pendingCount])
        switch phase {
        case .streamHeader:
            try startStream(unit)
        case .blockStart:
            if unit[0] == 0 {
                try drain()
                index = XzIndexParser()
                phase = .index
                pendingCount = 0
            } else {
                phase = .blockHeader
            }
            return
        case .blockHeader:
            let header = try XzBlockHeader(unit, memoryLimit: memoryLimit)
            // memlimit also bounds the parallel path: up to `decoders` blocks' output is held.
            let heldFits = header.uncompressedSize.map { $0 <= memoryLimit / UInt64(decoders) } ?? false
            if decoders > 1 && XzBlockJob.qualifies(header) && heldFits {
                // Every worker has a block, so this one will be the next head: the head and
                // the blocks decoded ahead go on first, so that it is not gathered whole
                // beside their output and their compressed bytes (see `keepPace`) — but
                // rather than wait for a worker's block, this thread starts this one.
                if pool.count >= lookAhead {
                    while head != nil { try advanceHead() }
                    if !XzEarlyHead.suits(header) { try drain() }
                }
                let job = XzBlockJob(
                    offset: unitStart, headerBytes: unit, header: header, checkKind: checkKind,
                    blockNumber: blocks.count &+ 1, streamNumber: streamsDone &+ 1)
                gathering = job
                phase = .blockBody
                // Not with filters, whose output is not the window's (with more than one
                // worker the queue may be short of a worker per block, and nothing drained).
                if head == nil && pool.count > 0 && XzEarlyHead.suits(header) {
                    early = XzEarlyHead(job, lzma2: lzma2)
                    headsStartedEarly += 1
                } else {
                    try queueWhileGathering(job)
                }
            } else {
                // A block decoded here follows every queued block's output.
                try drain()
                block = Block(headerBytes: Data(unit), header: header, check: XzCheck(checkKind), lzma2: lzma2)
                phase = .chunk
            }
        case .chunk:
            let header = try Lzma2Decoder.headerLength(control: unit[0])
            if unit.count == 1 && header > 1 { return }  // the control byte alone: gather the rest
            if unit.count == header && header > 1 { return }  // header done: gather the payload
            try chunkDone(unit)
        case .blockPadding:
            guard unit.allSatisfy({ $0 == 0 }) else { throw XzFormatError("block padding is not zero") }
            phase = .check
        case .check:
            try endBlock(storedCheck: unit)
        case .streamFooter:
            try endStream(unit)
        case .index, .streamPadding, .blockBody:
            break
        }
        pendingCount = 0
        try skipEmptyUnits()
    }

    /// Block padding and a None check may be zero bytes long: pass them at once.
    private func skipEmptyUnits() throws {
        if phase == .blockPadding, try unitSize() == 0 { phase = .check }
        if phase == .check && checkKind.size == 0 { try endBlock(storedCheck: UnsafeRawBufferPointer(start: nil, count: 0)) }
    }

    private static let magic: [UInt8] = [0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00]

    /// What bytes that cannot begin a stream are: the whole input, or what follows a stream.
    private var notAStream: String {
        streamsDone == 0 ? "not xz data (no xz magic bytes)" : "garbage after the end of an xz stream"
    }

    private func startStream(_ unit: UnsafeRawBufferPointer) throws {
        guard unit.prefix(6).elementsEqual(Self.magic) else { throw XzFormatError(notAStream) }
        guard littleEndian32(unit, at: 8) == xzCRC32(UnsafeRawBufferPointer(rebasing: unit[6..<8])) else {
            throw XzFormatError("stream header CRC32 mismatch")
        }
        guard unit[6] == 0, unit[7] & 0xF0 == 0 else { throw XzFormatError("stream header has reserved flag bits set") }
        checkKind = try XzCheck.Kind(streamFlag: unit[7])
        streamFlags = unit[7]
        blocks = XzRecordSummary()
        streamOutput = 0
        phase = .blockStart
    }

    private func chunkDone(_ unit: UnsafeRawBufferPointer) throws {
        let block = currentBlock
        block.compressedSize &+= UInt64(unit.count)
        if let declared = block.header.compressedSize, block.compressedSize > declared {
            throw XzFormatError("the block is longer than its header's compressed size \(declared)")
        }
        if unit[0] == 0 {
            try emit(block.filters.run(UnsafeRawBufferPointer(start: nil, count: 0), final: true), block)
            if let declared = block.header.compressedSize, block.compressedSize != declared {
                throw XzFormatError("the block is shorter than its header's compressed size \(declared)")
            }
            if let declared = block.header.uncompressedSize, block.uncompressedSize != declared {
                throw XzFormatError("the block decodes to \(block.uncompressedSize) bytes, its header says \(declared)")
            }
            phase = .blockPadding
            return
        }
        let produced = try block.lzma2.decode(chunk: unit)
        try emit(block.filters.isEmpty ? produced : block.filters.run(produced, final: false), block)
    }

    private func emit(_ bytes: UnsafeRawBufferPointer, _ block: Block) throws {
        guard !bytes.isEmpty else { return }
        block.uncompressedSize &+= UInt64(bytes.count)
        if let declared = block.header.uncompressedSize, block.uncompressedSize > declared {
            throw XzFormatError("the block decodes to more than its header's uncompressed size \(declared)")
        }
        block.check.update(bytes)
        outputOffset &+= UInt64(bytes.count)
        streamOutput &+= UInt64(bytes.count)
        try next.write(bytes)
    }

    // MARK: Sized blocks

    /// A sized block's header is read: while the head streams and a worker is free, the
    /// block goes to the worker at once, which decodes its chunks as they are gathered (a
    /// worker that waited for the whole block idled while it came in).
    private func queueWhileGathering(_ job: XzBlockJob) throws {
        guard head != nil && pool.count < lookAhead && Self.worthAWorker(job) else { return }
        try submit(job)
        gatheringQueued = true
        blocksDecodedAhead += 1
    }

    /// Queues a block for the workers, with the place of its output in the file behind
    /// when there is one: the output handed on so far, plus what the head and the blocks
    /// queued before it declare (a block that lies about its size fails at its turn, before
    /// anything after it is announced, so a wrong place is never counted).
    private func submit(_ job: XzBlockJob) throws {
        if decoders > 1, job.header.filters.isEmpty, let ahead {
            var end = outputOffset &- ahead.origin
            if let head { end &+= (head.job.header.uncompressedSize ?? 0) &- head.uncompressedSize }
            for queued in pool.jobs { end &+= queued.header.uncompressedSize ?? 0 }
            job.aheadTarget = (ahead.writer, end &+ misplaceAheadForTests)
        }
        try pool.submit(job)
    }

    /// Blocks that declare fewer output bytes than this are decoded on this thread, in turn:
    /// handing each to a worker costs more than decoding it (a hostile file of 105,000
    /// 64-byte blocks took 2.4 s that way, mostly in the kernel; `xz -T2 -dc` 0.75 s).
    static let workerMinimum: UInt64 = 512

    private static func worthAWorker(_ job: XzBlockJob) -> Bool {
        (job.header.uncompressedSize ?? 0) >= workerMinimum
    }

    /// A queued block that will not be gathered whole leaves the queue (its worker gives up);
    /// a head started early is dropped with what it held back.
    private func withdrawGathering() {
        early = nil
        guard gatheringQueued, let gathering else { return }
        pool.withdraw(gathering)
        gatheringQueued = false
        blocksDecodedAhead -= 1
    }

    /// A sized block is whole (the index learns its declared sizes, which decoding checks).
    /// It is already with a worker, or goes to one while the head streams and a worker is
    /// free; otherwise it is the next head, once everything before it has gone on.
    private func queue(_ job: XzBlockJob) throws {
        blocks.add(unpadded: job.unpaddedSize, uncompressed: job.header.uncompressedSize ?? 0)
        gathering = nil
        phase = .blockStart
        if gatheringQueued {
            gatheringQueued = false
        } else if let early, early.head.job === job {
            // Everything before it goes on, then what it held back, and it streams on.
            self.early = nil
            try drainQueue(decodingHere: false)
            head = early.head
            blocksStreamed += 1
            try handOnHeadOutput(early.heldOutput)
            if job.header.uncompressedSize == 0 { try advanceHead() }
        } else if head != nil && pool.count < lookAhead && Self.worthAWorker(job) {
            try submit(job)
            blocksDecodedAhead += 1
        } else {
            try drain()
            head = XzHeadBlock(job, lzma2: lzma2)
            blocksStreamed += 1
            // An empty block owes no output: it ends now (see XzHeadBlock.restoring).
            if job.header.uncompressedSize == 0 { try advanceHead() }
        }
    }

    /// While every worker has a block, the head decodes as far through its bytes as the
    /// block being gathered has come through its own: so the head ends about when that
    /// block is whole, and a cut falls inside the head (exact) rather than between blocks.
    /// A block a worker decodes as it comes in is read a quarter of it ahead, so that the
    /// worker does not wait for each piece (an eighth left it waiting for bytes ~0.17 s of a
    /// 4 s run, and the head then waited for it). Returns whether it is pacing.
    private func keepPace(with job: XzBlockJob) throws -> Bool {
        guard head != nil, pool.count >= lookAhead else { return false }
        let lead = gatheringQueued ? job.count / 4 : 0
        while let head, head.lags(behind: job, lead: lead) { try advanceHead() }
        return true
    }

    /// One chunk of the head into the next stage; a finished head lets the blocks decoded
    /// ahead go on.
    private func advanceHead() throws {
        guard let head else { return }
        try head.advance(handOnHeadOutput)
        if head.isDone {
            self.head = nil
            try emitFinished()
        }
    }

    /// The head's output, decoded now or held back while it started early, into the next stage.
    private func handOnHeadOutput(_ bytes: UnsafeRawBufferPointer) throws {
        outputOffset &+= UInt64(bytes.count)
        streamOutput &+= UInt64(bytes.count)
        try XzWaits.time(.stageWritesHead) { try next.write(bytes) }
    }

    /// Hands on, in order, the blocks decoded ahead that are done, once no head precedes them.
    private func emitFinished() throws {
        guard head == nil else { return }
        while let job = pool.takeFinishedHead() { try emit(job) }
    }

    /// Everything read so far handed on: the head to its end, then every block decoded
    /// ahead (waiting for the workers), or the first failure thrown.
    private func drain() throws {
        // A block still coming in cannot be handed on (the input ended or failed before it).
        withdrawGathering()
        while head != nil { try advanceHead() }
        try drainQueue(decodingHere: true)
    }

    /// Every block decoded ahead handed on, waiting for the workers. `decodingHere`: a block
    /// no worker has taken yet is decoded on this thread — not while a head started early
    /// owns this thread's decoder (a worker takes it then).
    private func drainQueue(decodingHere: Bool) throws {
        while pool.count > 0 {
            pool.waitForHead(decodingWith: decodingHere ? lzma2 : nil)
            try emitFinished()
        }
    }

    /// Gathers the next head while a worker still decodes a block before it, decoding its
    /// chunks here as they come in (their output held back) instead of waiting for the
    /// worker. While that block is out, no more of this one is gathered than about what the
    /// head before it still held (a quarter of a block, as `keepPace` leads), so the
    /// compressed bytes held stay as they were; then this thread waits for the worker.
    private func gatherEarly(_ job: XzBlockJob, _ early: XzEarlyHead, _ input: UnsafeRawBufferPointer) throws -> Int {
        try emitFinished()
        var piece = input
        if pool.count > 0 {
            let before = early.held
            do {
                while pool.count > 0, try early.advance() {
                    try emitFinished()
                }
            } catch let error as SluiceError {
                // Damage here comes after the blocks before it, whose own failure goes first.
                throw failing(error)
            }
            outputDecodedEarly &+= UInt64(early.held - before)
            let room = job.count / 4 - job.gathered
            if pool.count > 0 && room <= 0 {
                try drainQueue(decodingHere: false)
                return 0
            }
            if pool.count > 0 { piece = UnsafeRawBufferPointer(rebasing: input.prefix(max(min(room, job.count / 32), 1))) }
        }
        let used = job.gather(piece)
        inputOffset &+= UInt64(used)
        if job.isGathered { try queue(job) }
        return used
    }

    private func emit(_ job: XzBlockJob) throws {
        if let failure = job.failure { throw failure }
        if let written = job.writtenAhead {
            guard written.count == job.header.uncompressedSize, let taker = next as? AheadWritingSink else {
                throw SluiceError.unexpected("block \(job.blockNumber) was written ahead with \(written.count) bytes")
            }
            // The place the worker wrote at must be where the stream stands now: the file's
            // checksum counts the worker's bytes, not the file's, so a wrong place would
            // otherwise go unnoticed.
            guard let ahead, job.aheadTarget?.offset == outputOffset &- ahead.origin else {
                throw SluiceError.unexpected("block \(job.blockNumber) was written ahead at another place than its turn")
            }
            outputOffset &+= written.count
            streamOutput &+= written.count
            try XzWaits.time(.stageHandsOn) { try taker.advance(written.count, crc64: written.crc64) }
            blocksWrittenAhead += 1
            return
        }
        guard let output = job.output, !output.isEmpty else { return }
        outputOffset &+= UInt64(output.count)
        streamOutput &+= UInt64(output.count)
        try XzWaits.time(.stageHandsOn) {
            // Lent whole to a sink on another thread: this thread goes on with the next head
            // while the block is written (copying it waited for the sink, and the worker idled).
            if let taker = next as? HandOverSink, let mapping = job.takeOutputMapping() {
                let lent = pool.handOver(mapping)
                try taker.write(handingOver: UnsafeRawBufferPointer(output), released: lent.released, whenDone: lent.done)
                blocksHandedOver += 1
                return
            }
            try next.write(UnsafeRawBufferPointer(output))
            if let mapping = job.takeOutputMapping() { pool.recycle(mapping) }
        }
    }

    private func endBlock(storedCheck: UnsafeRawBufferPointer) throws {
        let block = currentBlock
        guard storedCheck.elementsEqual(block.check.finalBytes()) else {
            throw XzFormatError("\(block.check.name) mismatch in block \(blocks.count &+ 1) of stream \(streamsDone &+ 1)")
        }
        let unpadded = UInt64(block.header.size) &+ block.compressedSize &+ UInt64(checkKind.size)
        blocks.add(unpadded: unpadded, uncompressed: block.uncompressedSize)
        self.block = nil
        phase = .blockStart
    }

    private func endIndex() throws {
        guard index.records == blocks else {
            throw XzFormatError(
                index.records.count == blocks.count
                    ? "the index disagrees with the blocks' sizes"
                    : "the index lists \(index.records.count) blocks, the stream has \(blocks.count)")
        }
        phase = .streamFooter
    }

    private func endStream(_ unit: UnsafeRawBufferPointer) throws {
        guard unit[10] == 0x59, unit[11] == 0x5A else { throw XzFormatError("stream footer magic bytes are wrong") }
        guard littleEndian32(unit, at: 0) == xzCRC32(UnsafeRawBufferPointer(rebasing: unit[4..<10])) else {
            throw XzFormatError("stream footer CRC32 mismatch")
        }
        guard unit[8] == 0, unit[9] == streamFlags else { throw XzFormatError("stream footer flags differ from the header's") }
        guard (UInt64(littleEndian32(unit, at: 4)) + 1) * 4 == index.size &+ 4 else {
            throw XzFormatError("stream footer's backward size disagrees with the index")
        }
        streamsDone &+= 1
        paddingRun = 0
        phase = .streamPadding
    }

    public func finish() throws {
        defer { pool.shutdown() }
        // A queued block's failure comes before anything found at the end.
        try drain()
        guard phase == .streamPadding else {
            // Damage in the part of a sized block that came is what is wrong, not its end.
            if phase == .blockBody, let damage = gathering?.damageSoFar(with: lzma2) { throw damage }
            let where_: String
            switch phase {
            case .streamHeader where streamsDone == 0 && pendingCount == 0:
                throw SluiceError.corruptData(format: "xz", offset: 0, reason: "no xz data at all (empty input)")
            case .streamHeader
            where !UnsafeRawBufferPointer(rebasing: pending[0..<min(pendingCount, 6)]).elementsEqual(Self.magic.prefix(pendingCount)):
                // Too few bytes for a header, and they do not begin one: not a stream cut short.
                throw SluiceError.corruptData(format: "xz", offset: inputOffset &- UInt64(pendingCount), reason: notAStream)
            case .streamHeader: where_ = "inside a stream header"
            case .blockStart, .blockHeader: where_ = "inside a block header"
            case .chunk, .blockPadding, .blockBody: where_ = "inside compressed data (truncated block)"
            case .check: where_ = "inside a block's check"
            case .index: where_ = "inside the index"
            case .streamFooter: where_ = "inside a stream footer"
            case .streamPadding: where_ = ""
            }
            throw SluiceError.corruptData(format: "xz", offset: inputOffset, reason: "unexpected end of data: the input ends \(where_)")
        }
        guard paddingRun % 4 == 0 else {
            throw SluiceError.corruptData(format: "xz", offset: inputOffset, reason: "stream padding is not a multiple of four bytes")
        }
        XzWaits.addThreadCPU(.stageCPU)
        pool.shutdown()
        XzWaits.report()
        try next.finish()
    }

    // MARK: State

    /// Finished blocks go on before the state is taken when no head precedes them (fewer
    /// bytes in the checkpoint); nothing waits.
    public func barrier(_ cut: Cut) throws {
        try emitFinished()
        try cut.record(spilling: snapshot(spillingTo:))
        try next.barrier(cut)
    }

    public func snapshot() -> XzState {
        snapshot(spillingTo: nil)
    }

    /// The dictionary windows go to `spill` when there is one (the blocks' raw bytes are
    /// referred to where they lie, not copied: see `XzBlockJob.bytes`).
    func snapshot(spillingTo spill: CheckpointSpill?) -> XzState {
        // The block being gathered is saved as such even when a worker already decodes it.
        let queued = pool.jobs.filter { $0 !== gathering }.map { XzRawBlock(offset: $0.offset, bytes: $0.bytes) }
        return XzState(
            version: XzState.currentVersion, phase: phase, inputOffset: inputOffset, outputOffset: outputOffset,
            pending: Data(pending.prefix(pendingCount)), streamsDone: streamsDone, paddingRun: paddingRun,
            streamFlags: streamFlags, blocks: blocks, index: phase == .index || phase == .streamFooter ? index : nil,
            block: block.map { b in
                XzBlockState(
                    header: b.headerBytes, compressedSize: b.compressedSize, uncompressedSize: b.uncompressedSize,
                    check: b.check.snapshot(), lzma: b.lzma2.snapshot(spillingTo: spill), filters: b.filters.snapshot())
            },
            head: head?.snapshot(spillingTo: spill), queued: queued.isEmpty ? nil : queued,
            gathering: gathering.map { XzRawBlock(offset: $0.offset, bytes: $0.bytes) },
            streamOutput: streamOutput)
    }

    private func restore(_ s: XzState) throws {
        guard s.version == XzState.currentVersion else { throw XzStateError("version \(s.version), this build reads \(XzState.currentVersion)") }
        phase = s.phase
        inputOffset = s.inputOffset
        outputOffset = s.outputOffset
        streamsDone = s.streamsDone
        paddingRun = s.paddingRun
        blocks = s.blocks
        let inStream = phase != .streamHeader && phase != .streamPadding
        if inStream {
            streamFlags = s.streamFlags
            checkKind = try XzCheck.Kind(streamFlag: s.streamFlags)
        }
        guard phase != .streamPadding || streamsDone > 0 else { throw XzStateError("stream padding before any stream") }
        let inBlock = [.chunk, .blockPadding, .check].contains(phase)
        guard inBlock == (s.block != nil) else { throw XzStateError("block state present where there is no block, or missing") }
        if let saved = s.block {
            guard saved.header.count >= 8, saved.header.count <= 1024, saved.header.count % 4 == 0,
                Int(saved.header[saved.header.startIndex]) * 4 + 4 == saved.header.count
            else {
                throw XzStateError("the block header is malformed")
            }
            let header = try saved.header.withUnsafeBytes { try XzBlockHeader($0, memoryLimit: memoryLimit) }
            let restored = Block(
                headerBytes: saved.header, header: header,
                check: try XzCheck(restoring: saved.check, kind: checkKind), lzma2: lzma2)
            try restored.lzma2.restore(saved.lzma)
            try restored.filters.restore(saved.filters)
            restored.compressedSize = saved.compressedSize
            restored.uncompressedSize = saved.uncompressedSize
            if let declared = header.compressedSize, saved.compressedSize > declared { throw XzStateError("the block is past its size") }
            if let declared = header.uncompressedSize, saved.uncompressedSize > declared { throw XzStateError("the block is past its size") }
            block = restored
        }
        // The footer is checked against the index's size, so the index stays until then.
        guard (phase == .index || phase == .streamFooter) == (s.index != nil) else {
            throw XzStateError("index state present outside the index, or missing")
        }
        if let saved = s.index {
            guard saved.isPlausible || (phase == .streamFooter && saved.isDone) else { throw XzStateError("the index state is out of range") }
            guard phase == .index || saved.isDone else { throw XzStateError("the index is not complete before the footer") }
            index = saved
        }
        // The gathered unit must be shorter than the unit its phase gathers.
        guard s.pending.count < Self.largestUnit else { throw XzStateError("too many gathered bytes") }
        pending.copyBytes(from: s.pending)
        pendingCount = s.pending.count
        if phase == .index || phase == .streamPadding || phase == .blockBody {
            guard pendingCount == 0 else { throw XzStateError("gathered bytes in a phase that gathers none") }
        } else {
            if phase == .blockHeader { guard pendingCount >= 1, pending[0] != 0 else { throw XzStateError("a block header without its size byte") } }
            guard pendingCount < (try unitSize()) else {
                throw XzStateError("the gathered unit is complete, or longer than its phase allows")
            }
        }
        try restoreSizedBlocks(s)
    }

    /// The head, the queued blocks and the one being gathered must follow each other up to
    /// the unit in progress; each is parsed again, the head restored exactly, and the queued
    /// blocks given to the workers again.
    private func restoreSizedBlocks(_ s: XzState) throws {
        let queued = s.queued ?? []
        guard queued.count <= Self.mostQueued else { throw XzStateError("more than \(Self.mostQueued) queued blocks") }
        guard (queued.isEmpty && s.head == nil) || [.blockStart, .blockHeader, .blockBody].contains(phase) else {
            throw XzStateError("queued blocks outside a stream's blocks")
        }
        guard (phase == .blockBody) == (s.gathering != nil) else { throw XzStateError("a gathered block where none is gathered, or missing") }
        let first = blocks.count &- UInt64(queued.count)
        if let saved = s.head {
            head = try XzHeadBlock.restoring(
                saved, memoryLimit: memoryLimit, checkKind: checkKind, blockNumber: first, streamNumber: streamsDone &+ 1, lzma2: lzma2)
        }
        var jobs: [XzBlockJob] = []
        for (n, saved) in queued.enumerated() {
            jobs.append(try restoredJob(saved, whole: true, number: first &+ UInt64(n) &+ 1))
        }
        // The workers may hold every queued block's output at once: together they must fit in
        // memlimit, as the blocks a run queues do (at most threads − 1, each within its share).
        let held = jobs.reduce(UInt64(0)) { $0 &+ ($1.header.uncompressedSize ?? 0) }
        guard held <= memoryLimit else { throw XzStateError("the queued blocks decode to more than memlimit \(xzSize(memoryLimit))") }
        if let saved = s.gathering { gathering = try restoredJob(saved, whole: false, number: blocks.count &+ 1) }
        // The blocks end where the input stands, less the unit in progress.
        let (stands, below) = inputOffset.subtractingReportingOverflow(UInt64(pendingCount))
        guard !below else { throw XzStateError("more gathered bytes than input") }
        let chain = (head.map { [$0.job] } ?? []) + jobs + (gathering.map { [$0] } ?? [])
        var end = chain.first?.offset ?? stands
        for job in chain {
            guard job.offset == end else { throw XzStateError("the queued blocks do not follow each other") }
            let (next, overflow) = end.addingReportingOverflow(UInt64(job.gathered))
            guard !overflow else { throw XzStateError("a queued block's offset is out of range") }
            end = next
        }
        guard end == stands else { throw XzStateError("the queued blocks do not end where the input stands") }
        try checkQueueAnchor(s, jobs)
        for job in jobs { try submit(job) }
        if let gathering { try queueWhileGathering(gathering) }
    }

    /// The chain above shows only that the blocks follow each other: the stream's output
    /// handed on plus what the head and the queued blocks have still to give must make up
    /// what its blocks so far declare, or a queue that lost its oldest blocks (or its head)
    /// would resume into output without them.
    private func checkQueueAnchor(_ s: XzState, _ jobs: [XzBlockJob]) throws {
        // Without it a state whose queue was removed would look like one that had none.
        guard let handedOn = s.streamOutput else { throw XzStateError("the stream's output so far is missing") }
        streamOutput = handedOn
        guard [.blockStart, .blockHeader, .blockBody].contains(phase) else { return }
        var owed = jobs.reduce(UInt64(0)) { $0 &+ ($1.header.uncompressedSize ?? 0) }
        if let head {
            // Restoring checked that the head's output so far is within its declared size.
            owed &+= (head.job.header.uncompressedSize ?? 0) &- head.uncompressedSize
            guard handedOn >= head.uncompressedSize else { throw XzStateError("the head block handed on more than the stream") }
        }
        let (total, overflow) = handedOn.addingReportingOverflow(owed)
        guard !overflow, total == blocks.uncompressedTotal else {
            throw XzStateError("the queued blocks and the output handed on do not add up to the stream's blocks")
        }
    }

    private func restoredJob(_ saved: XzRawBlock, whole: Bool, number: UInt64) throws -> XzBlockJob {
        try saved.bytes.withUnsafeBytes { raw in
            guard raw.count >= 8, raw[0] != 0, raw.count >= (Int(raw[0]) + 1) * 4 else { throw XzStateError("a queued block's header is malformed") }
            let headerBytes = UnsafeRawBufferPointer(rebasing: raw[0..<((Int(raw[0]) + 1) * 4)])
            let header = try XzBlockHeader(headerBytes, memoryLimit: memoryLimit)
            guard XzBlockJob.qualifies(header) else { throw XzStateError("a queued block does not declare both sizes") }
            let job = XzBlockJob(
                offset: saved.offset, headerBytes: headerBytes, header: header, checkKind: checkKind,
                blockNumber: number, streamNumber: streamsDone &+ 1)
            job.gather(UnsafeRawBufferPointer(rebasing: raw[headerBytes.count...]))
            guard job.gathered == raw.count, job.isGathered == whole else { throw XzStateError("a queued block has the wrong length") }
            return job
        }
    }
}

func xzCRC32(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
    UInt32(crc32(0, bytes.baseAddress?.assumingMemoryBound(to: Bytef.self), UInt32(bytes.count)))
}

extension StageKind {
    static let unxz = StageKind.transform(
        "unxz", options: [.size("memlimit", "largest dictionary accepted (default 256MiB)", in: 1...(1 << 40))],
        summary: "transform: .xz decompression (LZMA2, delta, x86, ARM64; CRC32/CRC64/SHA-256 checked)",
        // CPU per input byte, all decoding threads: 39–45 ns for xz -6 of mixed data, one
        // block or 24 MiB blocks (release, 2026-12-02). CheckpointPacing spaces window
        // checkpoints by it: a faster decoder must lower it, or they cost more than 3%.
        cost: { _ in StageCost(nsPerByte: 40, expansion: 3.5) }, state: XzState.self
    ) { spec, next, context, saved in
        try XzDecoder(
            next: next, memoryLimit: spec.option("memlimit").flatMap(UInt64.init) ?? (256 << 20),
            decoders: XzDecoder.decoderThreads(context.options), restoring: saved)
    }
}

extension XzDecoder {
    /// Threads for sized blocks: one per core (the stage's own thread is one of them, so the
    /// process keeps no more decoding threads busy than cores), at most four; one when the
    /// pipeline runs on a single thread.
    static func decoderThreads(_ options: PipelineOptions, cores: Int = ProcessInfo.processInfo.activeProcessorCount) -> Int {
        options.threaded ? min(max(cores, 1), 4) : 1
    }
}
