import CXz

/// The next head block, started on the stage's thread while a worker still decodes the
/// block before it: instead of waiting for that worker, this thread decodes the first
/// chunks of the block as they are gathered and holds their output back in its window
/// until the block before has gone on (`XzDecoder.gatherEarly`). Only for blocks without
/// filters, whose output is the window's last bytes.
///
/// Nothing of it is handed on, and no state of it is saved, before it becomes the head: a
/// cut in the meantime records the block as being gathered (its raw bytes from its header
/// on, which the head then does not give back), and a restore decodes it again.
final class XzEarlyHead {
    let head: XzHeadBlock
    private let lzma2: Lzma2Decoder
    /// Output decoded and not handed on: the window's last `held` bytes.
    private(set) var held = 0

    init(_ job: XzBlockJob, lzma2: Lzma2Decoder) {
        self.lzma2 = lzma2
        head = XzHeadBlock(job, lzma2: lzma2)
    }

    static func suits(_ header: XzBlockHeader) -> Bool { header.filters.isEmpty }

    /// Decodes the next chunk if its bytes (and the decoder's slack) are gathered and its
    /// output may be held: a chunk that resets the dictionary would drop the held output,
    /// one past the dictionary's size would lose it to a slide (which keeps a dictionary),
    /// and the block's last output would end the block. Whatever does not qualify waits for
    /// the block's turn, where damage is reported as a head's. Returns whether it decoded.
    func advance() throws -> Bool {
        let job = head.job
        let raw = job.raw
        let at = head.position
        let end = job.header.size + Int(job.header.compressedSize ?? 0)
        guard at < min(end, job.gathered), raw[at] != 0, let headerLength = try? Lzma2Decoder.headerLength(control: raw[at]),
            end - at >= headerLength, job.gathered - at >= headerLength
        else { return false }
        let chunkHeader = UnsafeRawBufferPointer(rebasing: raw[at..<(at + headerLength)])
        let chunkLength = headerLength + Lzma2Decoder.payloadLength(header: chunkHeader)
        let output = Lzma2Decoder.outputLength(header: chunkHeader)
        let resets = raw[at] == 0x01 || raw[at] >= 0xE0
        let declared = job.header.uncompressedSize ?? 0
        guard end - at >= chunkLength, job.gathered - at >= chunkLength + Int(CXZ_INPUT_SLACK), !resets || held == 0,
            UInt64(held + output) <= job.header.dictionarySize, head.uncompressedSize + UInt64(output) < declared
        else { return false }
        try head.advance { held += $0.count }
        return true
    }

    /// The output held back, in order; it is handed on as the block becomes the head.
    var heldOutput: UnsafeRawBufferPointer {
        guard held > 0, let base = lzma2.windowBase else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: base + lzma2.outputCount - held, count: held)
    }
}
