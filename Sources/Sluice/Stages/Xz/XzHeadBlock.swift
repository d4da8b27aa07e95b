import CXz
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// The oldest sized block not yet handed on, decoded on the stage's own thread one LZMA2
/// chunk at a time straight into the next stage (as a block without sizes is), while
/// worker threads decode the blocks after it whole. Between chunks its state is exact —
/// the model, the window, the filters, the running check — so a cut inside it loses no
/// decoding, and only the window (not the block's output) is held.
final class XzHeadBlock {
    /// The block's gathered bytes, header through check (a var only for the uniqueness check).
    private(set) var job: XzBlockJob
    private let lzma2: Lzma2Decoder
    private let filters: XzFilterChain
    private var check: XzCheck
    /// LZMA2 bytes decoded so far (chunks, and the end byte once read).
    private(set) var compressedSize: UInt64 = 0
    /// Output handed on so far.
    private(set) var uncompressedSize: UInt64 = 0
    /// The end of the LZMA2 data, the padding and the check were read and are right.
    private(set) var isDone = false
    /// The job's bytes below this were given back to the system (decoded, never read again).
    private var released: Int
    /// Where the chunk or field being checked begins in the block (for errors): a step that
    /// decodes the last chunk goes on to the end, padding and check.
    private var checking = 0

    /// The head's window slides after 2 MiB past its dictionary and a chunk (12 MiB for
    /// `xz -6`), not the default's dictionary size (18 MiB): it is held beside a worker's
    /// block, and the ~3 more slides of a 24 MiB block cost ~1 ms each (8 MiB moved).
    static let slideRoom = 2 << 20

    /// `lzma2` is the stage's decoder, whose window memory is reused block after block.
    init(_ job: XzBlockJob, lzma2: Lzma2Decoder) {
        self.job = job
        self.lzma2 = lzma2
        filters = XzFilterChain(job.header.filters)
        check = XzCheck(job.checkKind)
        released = job.header.size
        lzma2.startBlock(dictionarySize: job.header.dictionarySize, slideRoom: Self.slideRoom)
    }

    /// The next byte of the job to decode.
    var position: Int { job.header.size + Int(compressedSize) }

    /// Whether the head has decoded less of its bytes than `other` has gathered of its own
    /// less `lead` bytes, in proportion (so the head keeps pace with the input that follows it).
    func lags(behind other: XzBlockJob, lead: Int = 0) -> Bool {
        !isDone && position * other.count < max(other.gathered - lead, 0) * job.count
    }

    /// Decodes the next chunk, or at the end of the LZMA2 data checks sizes, padding and
    /// check; `emit` gets the output. Damage is a corrupt-data error at its input offset.
    func advance(_ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        do {
            try step(emit)
        } catch let error as XzFormatError {
            throw SluiceError.corruptData(format: "xz", offset: job.offset &+ UInt64(checking), reason: error.reason)
        }
        releaseDecoded()
    }

    /// Gives the pages of bytes already decoded back to the system, a megabyte at a time:
    /// the head's bytes then shrink as the block after it is gathered, so the two hold
    /// about one block's compressed bytes between them. (The header, in the first page,
    /// stays for snapshots.) Not while a checkpoint not yet written still refers to the
    /// job's bytes (taken while it was being gathered, see `XzBlockJob.bytes`).
    private func releaseDecoded() {
        guard position - released >= 1 << 20, isKnownUniquelyReferenced(&job), let base = job.raw.baseAddress else { return }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let start = (Int(bitPattern: base) + released + page - 1) / page * page
        let end = (Int(bitPattern: base) + position) / page * page
        if end > start, let from = UnsafeMutableRawPointer(bitPattern: start) {
            // Advice only: if it is not taken the memory simply stays.
            _ = madvise(from, end - start, MADV_DONTNEED)
        }
        released = position
    }

    private func step(_ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        let raw = job.raw
        let declared = Int(job.header.compressedSize ?? 0)
        let end = job.header.size + declared
        let at = position
        checking = at
        guard at < end else { throw XzFormatError("the block is longer than its header's compressed size \(declared)") }
        if raw[at] == 0 {
            compressedSize &+= 1
            try deliver(filters.run(UnsafeRawBufferPointer(start: nil, count: 0), final: true), emit)
            try finishBlock(end: end)
            return
        }
        let headerLength = try Lzma2Decoder.headerLength(control: raw[at])
        guard end - at >= headerLength else { throw XzFormatError("the block is longer than its header's compressed size \(declared)") }
        let chunkLength = headerLength + Lzma2Decoder.payloadLength(header: UnsafeRawBufferPointer(rebasing: raw[at...]))
        guard end - at >= chunkLength else { throw XzFormatError("the block is longer than its header's compressed size \(declared)") }
        // The job's buffer has CXZ_INPUT_SLACK readable bytes past its end, as decode wants.
        let produced = try lzma2.decode(chunk: UnsafeRawBufferPointer(rebasing: raw[at..<(at + chunkLength)]))
        compressedSize &+= UInt64(chunkLength)
        try deliver(filters.isEmpty ? produced : filters.run(produced, final: false), emit)
        // All the output is out: the end comes at once, so a saved head always owes output
        // (dropping it from a checkpoint then shows in the queue's anchor).
        if !isDone && uncompressedSize == job.header.uncompressedSize && position < end && raw[position] == 0 { try step(emit) }
    }

    private func deliver(_ bytes: UnsafeRawBufferPointer, _ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard !bytes.isEmpty else { return }
        let declared = job.header.uncompressedSize ?? 0
        uncompressedSize &+= UInt64(bytes.count)
        guard uncompressedSize <= declared else {
            throw XzFormatError("the block decodes to more than its header's uncompressed size \(declared)")
        }
        check.update(bytes)
        try emit(bytes)
    }

    private func finishBlock(end: Int) throws {
        let compressed = Int(job.header.compressedSize ?? 0)
        guard position == end else { throw XzFormatError("the block is shorter than its header's compressed size \(compressed)") }
        let declared = job.header.uncompressedSize ?? 0
        guard uncompressedSize == declared else {
            throw XzFormatError("the block decodes to \(uncompressedSize) bytes, its header says \(declared)")
        }
        let padding = (4 - compressed % 4) % 4
        checking = end
        guard UnsafeRawBufferPointer(rebasing: job.raw[end..<(end + padding)]).allSatisfy({ $0 == 0 }) else {
            throw XzFormatError("block padding is not zero")
        }
        checking = end + padding
        guard UnsafeRawBufferPointer(rebasing: job.raw[(end + padding)..<job.count]).elementsEqual(check.finalBytes()) else {
            throw XzFormatError("\(check.name) mismatch in block \(job.blockNumber) of stream \(job.streamNumber)")
        }
        isDone = true
    }

    // MARK: State

    func snapshot(spillingTo spill: CheckpointSpill?) -> XzHeadState {
        let raw = job.raw
        return XzHeadState(
            offset: job.offset,
            block: XzBlockState(
                header: Data(UnsafeRawBufferPointer(rebasing: raw[0..<job.header.size])), compressedSize: compressedSize,
                uncompressedSize: uncompressedSize, check: check.snapshot(), lzma: lzma2.snapshot(spillingTo: spill),
                filters: filters.snapshot()),
            rest: job.bytes(from: position))
    }

    /// A head saved inside its block: the header parsed again (it must qualify), the bytes
    /// not yet decoded placed where they belong, and every decoder field range-checked.
    static func restoring(
        _ s: XzHeadState, memoryLimit: UInt64, checkKind: XzCheck.Kind, blockNumber: UInt64, streamNumber: UInt64, lzma2: Lzma2Decoder
    ) throws -> XzHeadBlock {
        let saved = s.block
        guard saved.header.count >= 8, saved.header.count <= 1024, saved.header.count % 4 == 0,
            Int(saved.header[saved.header.startIndex]) * 4 + 4 == saved.header.count
        else {
            throw XzStateError("the head block's header is malformed")
        }
        let job = try saved.header.withUnsafeBytes { headerBytes in
            let header = try XzBlockHeader(headerBytes, memoryLimit: memoryLimit)
            guard XzBlockJob.qualifies(header) else { throw XzStateError("the head block does not declare both sizes") }
            return XzBlockJob(
                offset: s.offset, headerBytes: headerBytes, header: header, checkKind: checkKind,
                blockNumber: blockNumber, streamNumber: streamNumber)
        }
        // The end byte of the LZMA2 data finishes a head at once, and so does its last output
        // (an empty block is finished as it becomes the head): a saved one owes both.
        guard saved.compressedSize < job.header.compressedSize ?? 0, saved.uncompressedSize < job.header.uncompressedSize ?? 0 else {
            throw XzStateError("the head block is past its declared sizes")
        }
        job.skip(Int(saved.compressedSize))
        s.rest.withUnsafeBytes { _ = job.gather($0) }
        guard job.isGathered, job.header.size + Int(saved.compressedSize) + s.rest.count == job.count else {
            throw XzStateError("the head block's remaining bytes have the wrong length")
        }
        let head = XzHeadBlock(job, lzma2: lzma2)
        try lzma2.restore(saved.lzma)
        try head.filters.restore(saved.filters)
        head.check = try XzCheck(restoring: saved.check, kind: checkKind)
        head.compressedSize = saved.compressedSize
        head.uncompressedSize = saved.uncompressedSize
        return head
    }
}

/// The head block in a checkpoint: where its header began in the input, the decoders'
/// state inside it, and its bytes not yet decoded (raw in the checkpoint's appendix).
public struct XzHeadState: Codable, Sendable, Equatable {
    var offset: UInt64
    var block: XzBlockState
    @CheckpointBlob var rest: XzRawBytes
}
