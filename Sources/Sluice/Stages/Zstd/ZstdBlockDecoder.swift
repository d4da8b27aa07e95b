import CZstdDecoder
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Owns the C block decoder (entropy tables, repeat offsets) and converts what carries
/// over between blocks to and from the checkpoint's plain values.
final class ZstdBlockDecoder {
    private let decoder: OpaquePointer

    init() {
        guard let made = zsd_create() else { fatalError("out of memory allocating the zstd block decoder") }
        decoder = made
    }

    deinit { zsd_destroy(decoder) }

    func resetFrame() { zsd_reset_frame(decoder) }

    /// Decodes a compressed block (padded as ZSD_INPUT_*_PAD require) into `plan`: its
    /// literals and resolved sequences, ready for `zsd_execute_plan`.
    func plan(_ block: UnsafeRawPointer, count: Int, blockMaximum: Int, into plan: OpaquePointer) throws(ZstdFormatError) {
        guard zsd_plan_block(decoder, block.assumingMemoryBound(to: UInt8.self), count, blockMaximum, plan) == 0 else {
            throw ZstdFormatError(String(cString: zsd_message(decoder)))
        }
    }

    var repeatOffsets: [UInt32] {
        var rep: (UInt32, UInt32, UInt32) = (0, 0, 0)
        withUnsafeMutableBytes(of: &rep) { zsd_repeat_offsets(decoder, $0.baseAddress!.assumingMemoryBound(to: UInt32.self)) }
        return [rep.0, rep.1, rep.2]
    }

    var huffmanTree: Data {
        var length = 0
        let bytes = zsd_huffman_description(decoder, &length)!
        return Data(bytes: bytes, count: length)
    }

    var sequenceTables: [ZstdTableState] {
        (0..<3).map { which in
            var symbol: UInt8 = 0
            var description: UnsafePointer<UInt8>?
            var length = 0
            switch Int(zsd_sequence_table(decoder, Int32(which), &symbol, &description, &length)) {
            case Int(ZSD_TABLE_PREDEFINED): return ZstdTableState(kind: .predefined)
            case Int(ZSD_TABLE_RLE): return ZstdTableState(kind: .rle, symbol: symbol)
            case Int(ZSD_TABLE_COMPRESSED):
                return ZstdTableState(kind: .compressed, description: Data(bytes: description!, count: length))
            default: return ZstdTableState(kind: .none)
            }
        }
    }

    /// Rebuilds the frame's entropy state from a checkpoint; throws a message naming what is wrong.
    func restore(repeatOffsets: [UInt32], huffmanTree: Data, sequenceTables: [ZstdTableState]) throws(ZstdFormatError) {
        resetFrame()
        guard repeatOffsets.count == 3, sequenceTables.count == 3 else {
            throw ZstdFormatError("it needs 3 repeat offsets and 3 sequence tables")
        }
        let ok =
            repeatOffsets.withUnsafeBufferPointer { zsd_set_repeat_offsets(decoder, $0.baseAddress!) == 0 }
            && huffmanTree.withUnsafeBytes {
                zsd_restore_huffman(decoder, $0.baseAddress?.assumingMemoryBound(to: UInt8.self), $0.count) == 0
            }
        guard ok else { throw ZstdFormatError(String(cString: zsd_message(decoder))) }
        for (which, table) in sequenceTables.enumerated() {
            let kind: Int32
            switch table.kind {
            case .none: kind = Int32(ZSD_TABLE_NONE)
            case .predefined: kind = Int32(ZSD_TABLE_PREDEFINED)
            case .rle: kind = Int32(ZSD_TABLE_RLE)
            case .compressed: kind = Int32(ZSD_TABLE_COMPRESSED)
            }
            if table.kind == .rle && table.symbol == nil { throw ZstdFormatError("an RLE table has no symbol") }
            let description = table.description ?? Data()
            let result = description.withUnsafeBytes {
                zsd_restore_sequence_table(
                    decoder, Int32(which), kind, table.symbol ?? 0,
                    $0.baseAddress?.assumingMemoryBound(to: UInt8.self), $0.count)
            }
            guard result == 0 else { throw ZstdFormatError(String(cString: zsd_message(decoder))) }
        }
    }
}

/// The content checksum (XXH64 of the frame's output), convertible to a checkpoint value.
struct ZstdChecksum {
    private var state = ZsdXXH64()

    init() { zsd_xxh64_reset(&state) }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        zsd_xxh64_update(&state, base.assumingMemoryBound(to: UInt8.self), bytes.count)
    }

    /// `update`, copying the bytes to `destination` (room for `bytes.count`) on the way.
    mutating func update(_ bytes: UnsafeRawBufferPointer, copyingTo destination: UnsafeMutableRawPointer) {
        guard let base = bytes.baseAddress else { return }
        zsd_xxh64_update_copy(
            &state, destination.assumingMemoryBound(to: UInt8.self), base.assumingMemoryBound(to: UInt8.self), bytes.count)
    }

    var digest: UInt64 {
        var copy = state
        return zsd_xxh64_digest(&copy)
    }

    /// The low 32 bits of the digest, which is what a frame stores.
    var low32: UInt32 { UInt32(truncatingIfNeeded: digest) }

    var saved: ZstdChecksumState {
        let lanes = [state.lanes.0, state.lanes.1, state.lanes.2, state.lanes.3]
        let buffered = withUnsafeBytes(of: state.buffer) { Data($0.prefix(Int(min(state.buffered, 31)))) }
        return ZstdChecksumState(lanes: lanes, totalLength: state.total, buffered: buffered)
    }

    init(restoring saved: ZstdChecksumState) throws(ZstdFormatError) {
        guard saved.lanes.count == 4, saved.buffered.count < 32,
            saved.totalLength % 32 == UInt64(saved.buffered.count)
        else {
            throw ZstdFormatError("its checksum state is inconsistent")
        }
        state.lanes = (saved.lanes[0], saved.lanes[1], saved.lanes[2], saved.lanes[3])
        state.total = saved.totalLength
        state.buffered = UInt32(saved.buffered.count)
        _ = withUnsafeMutableBytes(of: &state.buffer) { saved.buffered.copyBytes(to: $0) }
    }
}
