import CZstdDecoder
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `unzstd`: decompresses Zstandard (RFC 8878) with Sluice's own decoder, so that its exact
/// state can be saved at any input byte and resumed in another process — libzstd cannot.
/// Frames follow one another; skippable frames are passed over; each frame's content size
/// and checksum (XXH64) are checked when present. Input is taken a unit at a time (magic,
/// header, block, checksum): a unit's bytes are buffered until complete, then decoded whole,
/// so the output passed on always ends at a block boundary and a checkpoint holds at most
/// one partial block of input.
///
/// A compressed block is decoded in two halves: its literals and sequences (entropy
/// decoding, which needs only earlier blocks' tables) are planned on a worker thread up to
/// `ahead` blocks in front of the one the stage executes into the window. At a barrier, at
/// a frame's last block and before an error is reported, every block in flight is executed
/// first, so checkpoints and error offsets are exactly those of one block at a time.
public final class ZstdDecoder: ForwardingSink {
    public let next: ByteSink
    /// `next` when it lends its buffers (see `pass`).
    private let lender: BufferLendingSink?
    public let windowLimit: UInt64
    private let planner: ZstdBlockPlanner
    private var blocks: ZstdBlockDecoder { planner.blocks }
    private let window = ZstdWindow()
    /// Jobs executed and free for reuse.
    private var spareJobs: [ZstdBlockJob] = []
    /// Blocks planned ahead of the one being executed.
    private let ahead: Int
    /// With a worker: twelve blocks (~1.2 ms of planning) ride out the scheduler giving a
    /// core to the fetch or file thread for a while; the worker is woken once four blocks
    /// wait, not for each. Four ahead, woken per block: the stage's thread slept waiting for
    /// a plan ~1,500 times per run and the worker ~3,000; now ~400 and ~600 (+3 MiB RSS).
    static let planAheadBlocks = 12
    static let wakeBatch = 4

    private var phase: ZstdState.Phase = .magic
    private var compressedOffset: UInt64 = 0
    private var outputOffset: UInt64 = 0
    private var framesDone = 0
    private var skipRemaining: UInt64 = 0
    private var frame: ZstdFrameHeader?
    private var frameHeaderBytes: [UInt8] = []
    private var frameOutput: UInt64 = 0
    private var blockHeader: UInt32?
    private var checksum = ZstdChecksum()

    /// The unit being read, with the padding the block decoder may read around it.
    private var pending: UnsafeMutableRawPointer
    private var pendingCount = 0
    /// Bytes the current unit needs in all.
    private var need = 4

    private static let front = Int(ZSD_INPUT_FRONT_PAD)
    private static let pendingCapacity = Int(ZSD_BLOCK_MAX)

    /// `planAhead`: whether a worker thread decodes blocks' entropy-coded halves ahead
    /// (default: when there is more than one core).
    public init(
        next: ByteSink, windowLimit: UInt64 = 128 << 20, restoring state: ZstdState? = nil,
        planAhead: Bool = ProcessInfo.processInfo.activeProcessorCount > 1
    ) throws {
        self.next = next
        lender = next as? BufferLendingSink
        self.windowLimit = windowLimit
        planner = ZstdBlockPlanner(useWorker: planAhead, wakeBatch: Self.wakeBatch)
        ahead = planAhead ? Self.planAheadBlocks : 0
        pending = ZstdBlockJob.makeBuffer()
        // Every job there can be (`ahead` queued plus the one just submitted), made now: the
        // footprint is fixed from the first block, and decoding allocates nothing after it.
        spareJobs = (0...ahead).map { _ in ZstdBlockJob() }
        if let state {
            do {
                try restore(state)
            } catch let error as ZstdFormatError {
                throw StateRejected("its unzstd state is unusable: \(error.reason)")
            } catch let limit as DecoderLimitExceeded {
                throw StateRejected("its unzstd state is unusable: \(limit.refusal)")
            }
        }
    }

    deinit {
        planner.shutdown()
        pending.deallocate()
    }

    /// Blocks read but not yet executed (tests).
    var blocksInFlight: Int { planner.count }
    /// Whether any block was queued for planning rather than decoded at once (tests).
    var queuedAnyBlock: Bool { planner.everQueued }

    private var unit: UnsafeMutableRawPointer { pending + Self.front }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard var at = bytes.baseAddress else { return }
        let end = at + bytes.count
        while at < end {
            if phase == .skippableContent {
                let take = Int(min(skipRemaining, UInt64(end - at)))
                at += take
                compressedOffset &+= UInt64(take)
                skipRemaining -= UInt64(take)
                if skipRemaining == 0 { endFrame() }
                continue
            }
            let take = min(need - pendingCount, end - at)
            (unit + pendingCount).copyMemory(from: at, byteCount: take)
            pendingCount += take
            at += take
            compressedOffset &+= UInt64(take)
            if pendingCount == need { try completeUnit() }
        }
    }

    /// The unit in `pending` is complete: act on it and set up the next one.
    private func completeUnit() throws {
        let unitStart = compressedOffset - UInt64(pendingCount)
        do {
            try complete()
        } catch let error as ZstdFormatError {
            try settle()  // a corrupt block still in flight comes first, with its own offset
            throw SluiceError.corruptData(format: "zstd", offset: unitStart, reason: error.reason)
        } catch let limit as DecoderLimitExceeded {
            try settle()
            throw limit.error(format: "zstd", offset: unitStart)
        }
    }

    private func complete() throws {
        let bytes = UnsafeRawBufferPointer(start: unit, count: pendingCount)
        switch phase {
        case .magic:
            let magic = littleEndian(bytes, 4)
            if magic == ZstdFrameHeader.magic {
                begin(.frameHeader, need: 1)
            } else if ZstdFrameHeader.isSkippable(magic) {
                begin(.skippableSize, need: 4)
            } else {
                throw ZstdFormatError(
                    framesDone == 0
                        ? "not zstd data (it starts with \(hexBytes(bytes)))"
                        : "trailing garbage after frame \(framesDone) (bytes \(hexBytes(bytes)))")
            }
        case .frameHeader:
            let size = ZstdFrameHeader.size(descriptor: bytes[0])
            if pendingCount < size {
                need = size
                return
            }
            frameHeaderBytes = Array(bytes)
            let header = try ZstdFrameHeader(frameHeaderBytes, windowLimit: windowLimit)
            frame = header
            frameOutput = 0
            try window.start(windowSize: header.windowSize)
            blocks.resetFrame()
            checksum = ZstdChecksum()
            begin(.blockHeader, need: 3)
        case .skippableSize:
            skipRemaining = UInt64(littleEndian(bytes, 4))
            begin(.skippableContent, need: 0)
            if skipRemaining == 0 { endFrame() }
        case .skippableContent:
            break
        case .blockHeader:
            try startBlock(UInt32(truncatingIfNeeded: littleEndian(bytes, 3)))
        case .block:
            try submitBlock()
        case .checksum:
            let stored = littleEndian(bytes, 4)
            let computed = checksum.low32
            guard stored == computed else {
                throw ZstdFormatError("content checksum mismatch in frame \(framesDone + 1) (stored \(hex32(stored)), computed \(hex32(computed)))")
            }
            try endDataFrame()
        }
    }

    private func begin(_ next: ZstdState.Phase, need: Int) {
        phase = next
        self.need = need
        pendingCount = 0
    }

    /// Block header fields: last block, type (0 raw, 1 RLE, 2 compressed), size.
    private static func fields(_ header: UInt32) -> (last: Bool, type: UInt32, size: Int) {
        (header & 1 != 0, (header >> 1) & 3, Int(header >> 3))
    }

    private func startBlock(_ header: UInt32) throws {
        guard let frame else { throw ZstdFormatError("block outside a frame") }
        let (_, type, size) = Self.fields(header)
        guard type != 3 else { throw ZstdFormatError("block type 3 is reserved") }
        guard size <= frame.blockMaximum else {
            throw ZstdFormatError("block of \(Counted.bytes(size)) exceeds the frame's maximum of \(frame.blockMaximum)")
        }
        blockHeader = header
        begin(.block, need: type == 1 ? 1 : size)
        if need == 0 { try submitBlock() }
    }

    /// The block in `pending` is complete: hand it to the planner (the job takes the buffer)
    /// and execute the blocks before it that are planned far enough ahead.
    private func submitBlock() throws {
        guard let frame, let header = blockHeader else { throw ZstdFormatError("block outside a frame") }
        let job = spareJobs.popLast() ?? ZstdBlockJob()
        swap(&pending, &job.buffer)
        job.header = header
        job.count = pendingCount
        job.unitStart = compressedOffset - UInt64(pendingCount)
        job.blockMaximum = frame.blockMaximum
        blockHeader = nil
        let last = header & 1 != 0
        if last {
            begin(frame.hasChecksum ? .checksum : .blockHeader, need: frame.hasChecksum ? 4 : 3)
        } else {
            begin(.blockHeader, need: 3)
        }
        // A tiny block is not worth two thread hand-offs: with nothing in flight, it is
        // planned and executed here. (A stream of empty blocks, 3 bytes each, otherwise
        // decodes at ~1 MB/s, every block a round trip through the worker.)
        if job.count < Self.inlineBlockLimit && planner.count == 0 {
            planner.planHere(job)
            try run(job)
        } else {
            try planner.submit(job)
        }
        if last {
            try settle()
            if !frame.hasChecksum { try endDataFrame() }
        } else {
            while planner.count > ahead { try executeHead() }
        }
    }

    /// Executes every block in flight, in order (a barrier, a frame's end, an error, the end).
    func settle() throws {
        while planner.count > 0 { try executeHead() }
    }

    /// Executes the oldest block in flight into the window and passes its output on.
    private func executeHead() throws {
        guard let job = planner.takeHead() else { return }
        try run(job)
    }

    /// Blocks with fewer compressed bytes than this are decoded on the stage's thread when
    /// no block is in flight.
    static let inlineBlockLimit = 1024

    private func run(_ job: ZstdBlockJob) throws {
        defer { spareJobs.append(job) }
        do {
            try execute(job)
        } catch let error as ZstdFormatError {
            throw SluiceError.corruptData(format: "zstd", offset: job.unitStart, reason: error.reason)
        }
    }

    private func execute(_ job: ZstdBlockJob) throws {
        if let failure = job.failure { throw ZstdFormatError(failure) }
        guard let frame else { throw ZstdFormatError("block outside a frame") }
        let size = Self.fields(job.header).size
        let produced: UnsafeRawBufferPointer
        switch job.type {
        case 0:
            let room = window.rawRoom(size)
            if size > 0 { room.copyMemory(from: job.content, byteCount: size) }
            produced = window.commit(size)
        case 1:
            window.rawRoom(size).initializeMemory(as: UInt8.self, repeating: job.content.load(as: UInt8.self), count: size)
            produced = window.commit(size)
        default:
            var output = window.prepareBlock(limit: frame.blockMaximum)
            let start = output.op!
            guard zsd_execute_plan(job.plan, &output) == 0 else {
                throw ZstdFormatError(String(cString: zsd_plan_message(job.plan)))
            }
            produced = window.commit(output.op! - start)
        }
        frameOutput += UInt64(produced.count)
        if let expected = frame.contentSize, frameOutput > expected {
            throw ZstdFormatError("frame \(framesDone + 1) decodes to more than its declared \(Counted.bytes(expected))")
        }
        outputOffset &+= UInt64(produced.count)
        try pass(produced, hashing: frame.hasChecksum)
    }

    /// Passes a block's output on and adds it to the checksum. When the next stage lends
    /// its buffers (a relay to another thread), the bytes are hashed while they are copied
    /// into them, read once instead of twice.
    private func pass(_ bytes: UnsafeRawBufferPointer, hashing: Bool) throws {
        guard let lender else {
            if hashing { checksum.update(bytes) }
            if !bytes.isEmpty { try next.write(bytes) }
            return
        }
        var rest = bytes
        while let base = rest.baseAddress, !rest.isEmpty {
            let room = try lender.borrowBuffer()
            guard room.count > 0 else {  // a lender with no room: the ordinary way
                lender.commitBorrowed(0)
                if hashing { checksum.update(rest) }
                try next.write(rest)
                return
            }
            let count = min(room.count, rest.count)
            let piece = UnsafeRawBufferPointer(start: base, count: count)
            if let destination = room.baseAddress {
                if hashing {
                    checksum.update(piece, copyingTo: destination)
                } else {
                    destination.copyMemory(from: base, byteCount: count)
                }
            }
            lender.commitBorrowed(count)
            rest = UnsafeRawBufferPointer(rebasing: rest[count...])
        }
    }

    private func endDataFrame() throws {
        if let expected = frame?.contentSize, frameOutput != expected {
            throw ZstdFormatError("frame \(framesDone + 1) decoded to \(Counted.bytes(frameOutput)), its header says \(expected)")
        }
        frame = nil
        endFrame()
    }

    private func endFrame() {
        framesDone += 1
        begin(.magic, need: 4)
    }

    public func finish() throws {
        try settle()
        guard phase == .magic, pendingCount == 0, framesDone > 0 else {
            let whereItStopped: String
            switch phase {
            case .magic:
                whereItStopped =
                    framesDone == 0
                    ? (pendingCount == 0 ? "no zstd data at all" : "only \(Counted.bytes(pendingCount)), too short for a zstd frame")
                    : "\(Counted.bytes(pendingCount)) of trailing garbage after frame \(framesDone)"
            case .frameHeader: whereItStopped = "the stream ends inside a frame header"
            case .skippableSize, .skippableContent: whereItStopped = "the stream ends inside a skippable frame"
            case .blockHeader, .block: whereItStopped = "the stream ends inside frame \(framesDone + 1) (truncated)"
            case .checksum: whereItStopped = "the stream ends inside a frame's checksum"
            }
            throw SluiceError.corruptData(format: "zstd", offset: compressedOffset, reason: "unexpected end of data: \(whereItStopped)")
        }
        try next.finish()
    }

    // MARK: Checkpoints

    /// The blocks in flight are executed first: the state recorded is one block at a time's.
    public func barrier(_ cut: Cut) throws {
        try settle()
        try cut.record(spilling: snapshot(spillingTo:))
        try next.barrier(cut)
    }

    /// Exact only with no block in flight: `barrier` settles first.
    public func snapshot() -> ZstdState {
        snapshot(spillingTo: nil)
    }

    /// The window goes to `spill` (written from the ring, not copied in memory) when there
    /// is one; a failed write is left in `spill.failure` for the barrier to throw.
    func snapshot(spillingTo spill: CheckpointSpill?) -> ZstdState {
        var frameState: ZstdFrameState?
        if frame != nil {
            frameState = ZstdFrameState(
                header: Data(frameHeaderBytes), frameOutput: frameOutput, blockHeader: blockHeader,
                window: Data(), repeatOffsets: blocks.repeatOffsets, huffmanTree: blocks.huffmanTree,
                sequenceTables: blocks.sequenceTables, checksum: frame!.hasChecksum ? checksum.saved : nil)
            frameState?.$window = CheckpointBlob(joining: window.pieces, spill: spill)
        }
        return ZstdState(
            version: ZstdState.currentVersion, phase: phase, compressedOffset: compressedOffset,
            outputOffset: outputOffset, framesDone: framesDone,
            pending: Data(bytes: unit, count: pendingCount), skipRemaining: skipRemaining, frame: frameState)
    }

    private func restore(_ state: ZstdState) throws {
        guard state.version == ZstdState.currentVersion else {
            throw ZstdFormatError("it has version \(state.version), this build reads version \(ZstdState.currentVersion)")
        }
        // A frame takes at least 8 bytes (an empty skippable frame: magic and size; a data
        // frame takes 9): a count beyond that is forged, and would overflow `framesDone + 1`.
        guard state.framesDone >= 0, UInt64(state.framesDone) <= state.compressedOffset / 8,
            state.compressedOffset >= UInt64(state.pending.count)
        else {
            throw ZstdFormatError("its offsets are inconsistent")
        }
        phase = state.phase
        compressedOffset = state.compressedOffset
        outputOffset = state.outputOffset
        framesDone = state.framesDone
        skipRemaining = state.skipRemaining
        let inFrame = [.frameHeader, .blockHeader, .block, .checksum].contains(state.phase) && state.phase != .frameHeader
        guard inFrame == (state.frame != nil) else { throw ZstdFormatError("its frame state does not match phase \(state.phase.rawValue)") }
        if let saved = state.frame { try restoreFrame(saved) }
        // The unit's full size, as the running decoder would have set it.
        switch phase {
        case .magic, .checksum, .skippableSize: need = 4
        case .frameHeader: need = state.pending.isEmpty ? 1 : ZstdFrameHeader.size(descriptor: state.pending[state.pending.startIndex])
        case .skippableContent:
            need = 0
            guard skipRemaining > 0 else { throw ZstdFormatError("it passes over an empty skippable frame") }
        case .blockHeader: need = 3
        case .block:
            guard let header = blockHeader, let frame else { throw ZstdFormatError("its block has no header") }
            let (_, type, size) = Self.fields(header)
            guard type != 3, size <= frame.blockMaximum else { throw ZstdFormatError("its block header is invalid") }
            need = type == 1 ? 1 : size
        }
        guard state.pending.count < max(need, 1), state.pending.count <= Self.pendingCapacity,
            phase != .skippableContent || state.pending.isEmpty
        else {
            throw ZstdFormatError("it holds \(Counted.text(state.pending.count, "pending byte")) for a \(need)-byte unit")
        }
        pendingCount = state.pending.count
        state.pending.withUnsafeBytes { if $0.count > 0 { unit.copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
    }

    private func restoreFrame(_ saved: ZstdFrameState) throws {
        let header = try ZstdFrameHeader(Array(saved.header), windowLimit: windowLimit)
        let expectedWindow = min(header.windowSize, saved.frameOutput)
        guard UInt64(saved.window.count) == expectedWindow else {
            throw ZstdFormatError("its window holds \(Counted.bytes(saved.window.count)), not \(expectedWindow)")
        }
        if let content = header.contentSize, saved.frameOutput > content {
            throw ZstdFormatError("it has decoded more than the frame's content size")
        }
        guard outputOffset >= saved.frameOutput else { throw ZstdFormatError("its output offsets are inconsistent") }
        if header.hasChecksum {
            guard let sum = saved.checksum, sum.totalLength == saved.frameOutput else {
                throw ZstdFormatError("its checksum state is missing or does not match the frame's output")
            }
            checksum = try ZstdChecksum(restoring: sum)
        } else if saved.checksum != nil {
            throw ZstdFormatError("it has a checksum state for a frame without a checksum")
        }
        if phase == .checksum && !header.hasChecksum { throw ZstdFormatError("it reads a checksum the frame does not have") }
        if phase == .block && saved.blockHeader == nil { throw ZstdFormatError("its block has no header") }
        try blocks.restore(
            repeatOffsets: saved.repeatOffsets, huffmanTree: saved.huffmanTree,
            sequenceTables: saved.sequenceTables)
        frame = header
        frameHeaderBytes = Array(saved.header)
        frameOutput = saved.frameOutput
        blockHeader = phase == .block ? saved.blockHeader : nil
        try window.start(windowSize: header.windowSize, restored: saved.window)
    }
}

private func littleEndian(_ bytes: UnsafeRawBufferPointer, _ count: Int) -> UInt32 {
    (0..<count).reversed().reduce(0) { $0 << 8 | UInt32(bytes[$1]) }
}

private func hex32(_ value: UInt32) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 8 - digits.count) + digits
}

/// `1f 8b 08`: how a message shows bytes it did not expect.
func hexBytes(_ bytes: UnsafeRawBufferPointer) -> String {
    bytes.map { byte in
        let digits = String(byte, radix: 16)
        return digits.count == 1 ? "0" + digits : digits
    }.joined(separator: " ")
}

extension StageOption {
    /// `memlimit=SIZE`: the largest zstd window accepted (the name `zstd -d --memory=` and unxz use).
    static let zstdWindowLimit = StageOption.size("memlimit", "largest zstd window accepted (default 128MiB)", in: 1...(1 << 42))
}

extension ZstdDecoder {
    /// The window limit a spec asks for, else the default (128 MiB, as `zstd -d`).
    static func windowLimit(_ spec: StageSpec) -> UInt64 {
        spec.option("memlimit").flatMap(UInt64.init) ?? (128 << 20)
    }

    /// Whether blocks are planned on a worker thread: in a threaded pipeline on more than one core.
    static func planAhead(_ options: PipelineOptions, cores: Int = ProcessInfo.processInfo.activeProcessorCount) -> Bool {
        options.threaded && cores > 1
    }
}

extension StageKind {
    static let unzstd = StageKind.transform(
        "unzstd", options: [.zstdWindowLimit],
        summary: "transform: zstd decompression (multi-frame, skippable frames, XXH64 and content size checked)",
        // Measured 6 ns (zstd -19 on mixed data) to 15 ns (a source tree at 13:1) per input
        // byte; CheckpointPacing spaces window checkpoints by it, so too low a figure
        // spaces them too far apart for the resume bar.
        cost: { _ in StageCost(nsPerByte: 8, expansion: 4) }, state: ZstdState.self
    ) { spec, next, context, saved in
        try ZstdDecoder(
            next: next, windowLimit: ZstdDecoder.windowLimit(spec), restoring: saved,
            planAhead: ZstdDecoder.planAhead(context.options))
    }
}
