#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The unxz decoder's exact state after any input byte: where it stands in the container,
/// the bytes of the unit it is gathering (a header, an LZMA2 chunk…), and inside a block
/// the LZMA2 model, window, filters and running check. Restored values are untrusted:
/// `XzDecoder(restoring:)` checks every field.
public struct XzState: StageStateValue {
    public static let stage = "unxz"
    /// Bumped when the meaning of a field changes; other versions are refused.
    public static let currentVersion = 3

    public enum Phase: String, Codable, Sendable, CaseIterable {
        case streamHeader, blockStart, blockHeader, chunk, blockPadding, check, index, streamFooter, streamPadding
        /// Gathering a block whose header declares its sizes, to decode it whole (`gathering`).
        case blockBody
    }

    public var version: Int
    public var phase: Phase
    public var inputOffset: UInt64
    public var outputOffset: UInt64
    /// The bytes of the unit being gathered (up to an LZMA2 chunk; raw in the checkpoint's appendix).
    @CheckpointBlob public var pending: Data
    public var streamsDone: UInt64
    /// Stream padding bytes since the last stream footer.
    public var paddingRun: UInt64
    /// The current stream's flags (its check ID), as its header gave them.
    public var streamFlags: UInt8
    public var blocks: XzRecordSummary
    public var index: XzIndexParser?
    public var block: XzBlockState?
    /// The oldest sized block not yet handed on whole, decoded on the stage's thread chunk by
    /// chunk: exact inside it, like `block`. Absent when there is none.
    public var head: XzHeadState?
    /// Whole blocks read after the head, whose output has not gone on yet, in input order
    /// (decoded again on restore); absent when there are none.
    public var queued: [XzRawBlock]?
    /// In `blockBody`: the block being gathered, its bytes so far.
    public var gathering: XzRawBlock?
    /// Output of the current stream's blocks handed on so far (the head's part included).
    /// With `blocks` (which counts the head and queued blocks too) it anchors the queue: a
    /// queue that lost a block does not add up. Required since version 2 (optional only so
    /// that its absence gets a clear refusal).
    public var streamOutput: UInt64?

    public var position: StagePosition { StagePosition(input: inputOffset, output: outputOffset) }
}

/// Inside a block: its header (parsed again on restore), how far it got, and the decoders.
public struct XzBlockState: Codable, Sendable, Equatable {
    var header: Data
    var compressedSize: UInt64
    var uncompressedSize: UInt64
    var check: XzCheckState
    var lzma: LzmaState
    var filters: [XzFilterState]
}

/// Raw bytes of queued blocks in a checkpoint (stored as appendix blobs, see `XzRawBlock`).
public typealias XzRawBytes = Data

/// A block of sized blocks' path in a checkpoint: where it began in the input, and its
/// bytes from the block header on (through the check when whole).
public struct XzRawBlock: Codable, Sendable, Equatable {
    var offset: UInt64
    @CheckpointBlob var bytes: XzRawBytes
}
