#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The zstd decoder's state at a cut: a plain, versioned value. Everything in it is
/// re-validated on restore (the frame header is re-parsed, the entropy tables are rebuilt
/// from their descriptions by the same code that reads them from a block).
public struct ZstdState: StageStateValue {
    public static let stage = "unzstd"
    public static let currentVersion = 1

    public enum Phase: String, Codable, Sendable {
        /// Reading the 4-byte magic number of the next frame (or expecting the end).
        case magic
        case frameHeader
        /// The 4-byte size of a skippable frame, then its content, which is passed over.
        case skippableSize, skippableContent
        case blockHeader
        case block
        /// The 4-byte content checksum after a frame's last block.
        case checksum
    }

    public var version: Int
    public var phase: Phase
    /// Compressed bytes taken in, and decompressed bytes passed on, over the whole stream.
    public var compressedOffset: UInt64
    public var outputOffset: UInt64
    /// Frames finished, skippable ones included.
    public var framesDone: Int
    /// The bytes of the unit being read (magic, header, block, …) that have arrived (up to a
    /// 128 KiB block; raw in the checkpoint's appendix).
    @CheckpointBlob public var pending: Data
    /// Bytes of a skippable frame still to pass over.
    public var skipRemaining: UInt64
    /// The frame being decoded (nil between frames and in skippable frames).
    public var frame: ZstdFrameState?

    public var position: StagePosition { StagePosition(input: compressedOffset, output: outputOffset) }
}

/// What a frame carries from block to block.
public struct ZstdFrameState: Codable, Sendable, Equatable {
    /// The frame header as read (descriptor to content size), parsed again on restore.
    public var header: Data
    /// Bytes this frame has produced so far.
    public var frameOutput: UInt64
    /// The 3-byte header of the block being read (phase `block`), as a number.
    public var blockHeader: UInt32?
    /// The last min(window size, frame output) bytes of output: what matches may copy from
    /// (raw in the checkpoint's appendix).
    @CheckpointBlob public var window: Data
    public var repeatOffsets: [UInt32]
    /// The Huffman tree description in force (empty: none yet).
    public var huffmanTree: Data
    /// Literal lengths, offsets and match lengths tables, in that order.
    public var sequenceTables: [ZstdTableState]
    /// The running XXH64 of the frame's output, when the frame has a checksum.
    public var checksum: ZstdChecksumState?
}

/// One sequence table in force: how it was defined and, for a compressed one, its description.
public struct ZstdTableState: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case none, predefined, rle, compressed }
    public var kind: Kind
    public var symbol: UInt8?
    public var description: Data?

    public init(kind: Kind, symbol: UInt8? = nil, description: Data? = nil) {
        self.kind = kind
        self.symbol = symbol
        self.description = description
    }
}

/// A streaming XXH64: four lanes, the length so far, and the bytes short of a 32-byte stripe.
public struct ZstdChecksumState: Codable, Sendable, Equatable {
    public var lanes: [UInt64]
    public var totalLength: UInt64
    public var buffered: Data
}
