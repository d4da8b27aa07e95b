import CXz
#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A block whose header declares both its sizes (as `xz -T` writes them), read whole so
/// that any thread can decode it on its own: blocks are independent. Its raw bytes run
/// from the block header through the check; the output is the whole block, handed on at once.
final class XzBlockJob: @unchecked Sendable {
    /// Blocks larger than this (either size) are decoded sequentially, so memory stays bounded.
    static let largestBlock: UInt64 = 64 << 20
    /// Nor are blocks with more compressed bytes than this: a cut stores the queued blocks'
    /// raw bytes, and 64 MiB blocks of barely compressible data made every checkpoint carry
    /// ~100 MB (a run 1.9x slower). Such blocks are mostly stored LZMA2 chunks, which
    /// decode at copying speed on one core anyway.
    static let largestCompressedBlock: UInt64 = 16 << 20

    /// Input offset of the block header.
    let offset: UInt64
    let header: XzBlockHeader
    let checkKind: XzCheck.Kind
    /// For messages: the block's number in its stream, and the stream's.
    let blockNumber: UInt64
    let streamNumber: UInt64
    /// The block's bytes, then CXZ_INPUT_SLACK bytes the LZMA decoder may read past them.
    let raw: UnsafeMutableRawBufferPointer
    /// Bytes of the block: header, compressed data, padding, check.
    let count: Int
    /// Bytes gathered so far (the stage's thread only, until the job is queued).
    private(set) var gathered = 0

    // Written by the thread that decodes the job, read by the stage's thread once
    // `XzBlockPool` has marked it done (under the pool's lock).
    private(set) var output: UnsafeMutableRawBufferPointer?
    /// Bytes mapped for `output` (`cxz_map`).
    private var outputMapped = 0
    private(set) var failure: SluiceError?
    /// Where a worker writes the output ahead of its turn, if anywhere: the file behind the
    /// next stage, at the block's offset in the writer's coordinate (set by the stage's thread
    /// before the job is queued; only blocks without filters besides LZMA2).
    var aheadTarget: (writer: AheadWriter, offset: UInt64)?
    /// The output went out ahead (`aheadTarget`): its size and CRC-64, to be announced in
    /// order (`AheadWritingSink.advance`); `output` is nil then.
    private(set) var writtenAhead: (count: UInt64, crc64: UInt64)?
    /// Output written ahead goes out in pieces of at least this many bytes.
    static let aheadPiece = 1 << 20
    /// `raw` is `cxz_map`'d (else allocated: small, or the system refused the mapping).
    private let rawMapped: Bool

    /// Whether a header qualifies: both sizes declared, neither too large.
    static func qualifies(_ header: XzBlockHeader) -> Bool {
        guard let compressed = header.compressedSize, let uncompressed = header.uncompressedSize else { return false }
        return compressed <= largestCompressedBlock && uncompressed <= largestBlock
    }

    /// `headerBytes`: the whole block header, which `header` parses and must qualify.
    init(
        offset: UInt64, headerBytes: UnsafeRawBufferPointer, header: XzBlockHeader, checkKind: XzCheck.Kind,
        blockNumber: UInt64, streamNumber: UInt64
    ) {
        self.offset = offset
        self.header = header
        self.checkKind = checkKind
        self.blockNumber = blockNumber
        self.streamNumber = streamNumber
        let compressed = Int(header.compressedSize ?? 0)
        count = header.size + compressed + (4 - compressed % 4) % 4 + checkKind.size
        let length = count + Int(CXZ_INPUT_SLACK)
        // Mapped when large, so that its pages go back to the system when it is freed; a
        // small one is allocated (a mapping per block cost two system calls each, 1 s for a
        // file of 105,000 tiny blocks).
        if length >= 1 << 20, let mapped = cxz_map(length) {
            raw = UnsafeMutableRawBufferPointer(start: mapped, count: length)
            rawMapped = true
        } else {
            raw = .allocate(byteCount: length, alignment: 16)
            rawMapped = false
        }
        UnsafeMutableRawBufferPointer(rebasing: raw[count...]).initializeMemory(as: UInt8.self, repeating: 0)
        gather(headerBytes)
    }

    deinit {
        if rawMapped { cxz_unmap(raw.baseAddress, raw.count) } else { raw.deallocate() }
        dropOutput()
    }

    var isGathered: Bool { gathered == count }

    /// Takes up to the rest of the block from `input`; returns how many bytes it took.
    @discardableResult
    func gather(_ input: UnsafeRawBufferPointer) -> Int {
        let take = min(count - gathered, input.count)
        if take > 0 { (raw.baseAddress! + gathered).copyMemory(from: input.baseAddress!, byteCount: take) }
        gathered += take
        return take
    }

    /// Passes over `count` bytes that are not there (zeros in their place): a restored head
    /// block keeps only the bytes it has not decoded yet.
    func skip(_ count: Int) {
        let take = min(self.count - gathered, max(count, 0))
        UnsafeMutableRawBufferPointer(rebasing: raw[gathered..<(gathered + take)]).initializeMemory(as: UInt8.self, repeating: 0)
        gathered += take
    }

    /// The bytes gathered so far, for a checkpoint.
    /// Not a copy: bytes once gathered never change (decoding only reads them), so the
    /// checkpoint refers to them and keeps the job's buffer alive until it is written.
    var bytes: XzRawBytes { bytes(from: 0) }

    /// The bytes gathered from `start` on, not copied either (the head's undecoded rest:
    /// `XzHeadBlock` gives no page back while a checkpoint refers to its job).
    func bytes(from start: Int) -> XzRawBytes {
        guard gathered > start, start >= 0, let base = raw.baseAddress else { return XzRawBytes() }
        return XzRawBytes(bytesNoCopy: base + start, count: gathered - start, deallocator: .custom { [self] _, _ in withExtendedLifetime(self) {} })
    }

    /// Frees the output once it has been handed on (a checkpoint may still hold the job).
    /// Hands the output's mapping over (to be reused for a later block) once it is handed on.
    func takeOutputMapping() -> UnsafeMutableRawBufferPointer? {
        defer {
            output = nil
            outputMapped = 0
        }
        return output.map { UnsafeMutableRawBufferPointer(start: $0.baseAddress, count: outputMapped) }
    }

    func dropOutput() {
        cxz_unmap(output?.baseAddress, outputMapped)
        output = nil
        outputMapped = 0
    }

    /// What the index records of this block, from its declared sizes (decoding checks them).
    var unpaddedSize: UInt64 { UInt64(header.size) &+ (header.compressedSize ?? 0) &+ UInt64(checkKind.size) }

    // MARK: Decoding (any thread)

    /// Decodes the block — chunks, filters, sizes, padding, check — and keeps the output or
    /// the failure (with the offset of the chunk or field at fault). `stopped` is asked
    /// between chunks, so a stop never waits for a whole block. `awaiting(n)` returns once
    /// the first n bytes are gathered (the block may still be coming in), or false if they
    /// never will be.
    /// `reusing`: an earlier block's output mapping to decode into (see `takeOutputMapping`);
    /// `room(n)` returns once its first n bytes may be overwritten (the next stage may still
    /// be writing it out), or false if they never will be.
    /// `writingAhead`: write the output to `aheadTarget` as it is decoded (a block without
    /// filters only), keeping in memory only the dictionary's reach behind the decoder.
    func decode(
        with lzma2: Lzma2Decoder, reusing spare: UnsafeMutableRawBufferPointer? = nil, room: (Int) -> Bool = { _ in true },
        writingAhead: Bool = false, stopped: () -> Bool, awaiting: (Int) -> Bool
    ) {
        var position = header.size
        var ahead = writingAhead && header.filters.isEmpty ? aheadTarget.map { XzAheadOutput($0.writer, at: $0.offset) } : nil
        do {
            output = try run(
                lzma2, spare, stopped, { n in if !awaiting(min(n, count)) { throw SluiceError.cancelled } },
                room: { n in if !room(n) { throw SluiceError.cancelled } }, ahead: &ahead, at: &position)
            if var done = ahead {
                writtenAhead = (UInt64(done.written), done.checksum.value)
                done.releaseAll(of: output)
            }
        } catch let error as XzFormatError {
            failure = .corruptData(format: "xz", offset: offset &+ UInt64(position), reason: error.reason)
        } catch {
            failure = error as? SluiceError ?? .cancelled
        }
    }

    /// Decodes the bytes gathered so far of a block the input ended inside, on the calling
    /// thread: the damage in them, if any (nil when they are sound as far as they go).
    func damageSoFar(with lzma2: Lzma2Decoder) -> SluiceError? {
        if failure == nil {
            let available = gathered
            decode(with: lzma2, stopped: { false }, awaiting: { $0 <= available })
        }
        if case .corruptData? = failure { return failure }
        return nil
    }

    /// `awaiting(n)`: the block's first n bytes are gathered; `room(n)`: the first n bytes of
    /// the output buffer are free. Each throws if that never comes.
    private func run(
        _ lzma2: Lzma2Decoder, _ spare: UnsafeMutableRawBufferPointer?, _ stopped: () -> Bool, _ awaiting: (Int) throws -> Void,
        room: (Int) throws -> Void, ahead: inout XzAheadOutput?, at position: inout Int
    ) throws -> UnsafeMutableRawBufferPointer {
        let compressed = Int(header.compressedSize ?? 0)
        let size = Int(header.uncompressedSize ?? 0)
        let end = header.size + compressed
        let filters = XzFilterChain(header.filters)
        // With filters the window is unmapped at the end, and a too small one at once: the
        // next stage must be done with all of it first.
        if !filters.isEmpty || (spare?.count ?? .max) < size + Int(CXZ_OUTPUT_SLACK) { try room(.max) }
        guard lzma2.startWholeBlock(dictionarySize: header.dictionarySize, size: size, reusing: spare) else {
            throw XzFormatError("out of memory for a block of \(xzSize(UInt64(size)))")
        }
        // With filters the window keeps LZMA's output and the filtered bytes go here.
        let filtered = filters.isEmpty ? nil : cxz_map(size + 64).map { UnsafeMutableRawBufferPointer(start: $0, count: size + 64) }
        if !filters.isEmpty && filtered == nil { throw XzFormatError("out of memory for a block of \(xzSize(UInt64(size)))") }
        var filteredCount = 0
        // Checked chunk by chunk, while the output is still in the cache.
        var check = XzCheck(checkKind)
        func keep(_ bytes: UnsafeRawBufferPointer) throws {
            guard let filtered, !bytes.isEmpty else { return }
            check.update(bytes)
            guard filteredCount + bytes.count <= size else {
                throw XzFormatError("the block decodes to more than its header's uncompressed size \(size)")
            }
            (filtered.baseAddress! + filteredCount).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            filteredCount += bytes.count
        }
        do {
            while true {
                if stopped() { throw SluiceError.cancelled }
                guard position < end else { throw XzFormatError("the block is longer than its header's compressed size \(compressed)") }
                try awaiting(position + 1)
                let control = raw[position]
                if control == 0 {
                    position += 1
                    break
                }
                let headerLength = try Lzma2Decoder.headerLength(control: control)
                guard end - position >= headerLength else { throw XzFormatError("the block is longer than its header's compressed size \(compressed)") }
                try awaiting(position + headerLength)
                let chunkLength = headerLength + Lzma2Decoder.payloadLength(header: UnsafeRawBufferPointer(rebasing: raw[position...]))
                guard end - position >= chunkLength else { throw XzFormatError("the block is longer than its header's compressed size \(compressed)") }
                // The decoder may read CXZ_INPUT_SLACK bytes past the chunk: they must not be
                // in the middle of being gathered.
                try awaiting(position + chunkLength + Int(CXZ_INPUT_SLACK))
                // Its output (and the slack match copies may scribble on) must be written out.
                let chunkHeader = UnsafeRawBufferPointer(rebasing: raw[position..<(position + headerLength)])
                try room(lzma2.outputCount + Lzma2Decoder.outputLength(header: chunkHeader) + Int(CXZ_OUTPUT_SLACK))
                let produced = try lzma2.decode(chunk: UnsafeRawBufferPointer(rebasing: raw[position..<(position + chunkLength)]))
                if filtered != nil { try keep(filters.run(produced, final: false)) } else { check.update(produced) }
                try ahead?.write(lzma2, dictionary: header.dictionarySize, final: false)
                position += chunkLength
            }
            guard position == end else { throw XzFormatError("the block is shorter than its header's compressed size \(compressed)") }
            if filtered != nil { try keep(filters.run(UnsafeRawBufferPointer(start: nil, count: 0), final: true)) }
            // Before the size is checked: written ahead is not counted (no advance) when the
            // block then fails, and the decoder never produced more than the size.
            try ahead?.write(lzma2, dictionary: header.dictionarySize, final: true)
        } catch {
            cxz_unmap(filtered?.baseAddress, size + 64)
            throw error
        }
        let (window, decoded, mapped) = lzma2.takeOutput()
        var result = UnsafeMutableRawBufferPointer(start: window, count: decoded)
        var resultMapped = mapped
        if let filtered {
            cxz_unmap(window, mapped)
            result = UnsafeMutableRawBufferPointer(start: filtered.baseAddress, count: filteredCount)
            resultMapped = filtered.count
        }
        // From here on `result` is the job's, unmapped with it.
        output = result
        outputMapped = resultMapped
        guard result.count == size else { throw XzFormatError("the block decodes to \(result.count) bytes, its header says \(size)") }
        let padding = (4 - compressed % 4) % 4
        try awaiting(count)
        guard UnsafeRawBufferPointer(rebasing: raw[end..<(end + padding)]).allSatisfy({ $0 == 0 }) else {
            throw XzFormatError("block padding is not zero")
        }
        position = end + padding
        guard UnsafeRawBufferPointer(rebasing: raw[position..<count]).elementsEqual(check.finalBytes()) else {
            throw XzFormatError("\(check.name) mismatch in block \(blockNumber) of stream \(streamNumber)")
        }
        return result
    }
}

/// A block's output written ahead as a worker decodes it: each piece (≥ `aheadPiece`) goes
/// to the writer at its place, into the running CRC-64, and the whole pages behind the
/// dictionary's reach (matches never look further back) go back to the system — so the
/// worker holds about a dictionary and a piece of its block, not the whole block.
struct XzAheadOutput {
    private let writer: AheadWriter
    private let offset: UInt64
    /// Output bytes written so far, and their checksum alone.
    private(set) var written = 0
    private(set) var checksum = OutputChecksum()
    /// Output bytes below this were given back (`madvise`), relative to the window's start.
    private var released = 0
    private static let page = Int(sysconf(Int32(_SC_PAGESIZE)))

    init(_ writer: AheadWriter, at offset: UInt64) {
        self.writer = writer
        self.offset = offset
    }

    /// Writes what the decoder produced since the last piece (all of it when `final`).
    mutating func write(_ lzma2: Lzma2Decoder, dictionary: UInt64, final: Bool) throws {
        let decoded = lzma2.outputCount
        guard decoded - written >= (final ? 1 : XzBlockJob.aheadPiece), let base = lzma2.windowBase else { return }
        let piece = UnsafeRawBufferPointer(start: base + written, count: decoded - written)
        let at = offset.addingReportingOverflowIfFits(UInt64(written)) ?? .max
        try XzWaits.time(.workerWritesAhead) { try writer.write(piece, at: at) }
        checksum.update(piece)
        written = decoded
        let reach = Int(min(dictionary, UInt64(decoded)))
        release(base, below: decoded - reach)
    }

    /// Gives back every page of the written output (the block is done).
    mutating func releaseAll(of output: UnsafeMutableRawBufferPointer?) {
        guard let base = output?.baseAddress else { return }
        release(base, below: written)
    }

    private mutating func release(_ base: UnsafeMutableRawPointer, below end: Int) {
        let limit = min(end, written)
        let start = (Int(bitPattern: base) + released + Self.page - 1) / Self.page * Self.page
        let stop = (Int(bitPattern: base) + limit) / Self.page * Self.page
        guard stop > start, let from = UnsafeMutableRawPointer(bitPattern: start) else { return }
        _ = madvise(from, stop - start, MADV_DONTNEED)
        released = stop - Int(bitPattern: base)
    }
}
