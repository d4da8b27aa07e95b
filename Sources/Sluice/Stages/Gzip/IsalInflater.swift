import CIsal
import Foundation

/// Raw inflate on Intel ISA-L. Its `inflate_state` is public and self-contained once a
/// call has consumed all its input (the 32 KiB history lives in the state, not in our
/// output buffer), so a snapshot is the struct itself with its pointers cleared. The
/// layout belongs to the library version, which the snapshot records and restore checks.
final class IsalInflater: DeflateEngine {
    static let layout = "isal-\(ISAL_MAJOR_VERSION).\(ISAL_MINOR_VERSION).\(ISAL_PATCH_VERSION)/\(MemoryLayout<inflate_state>.size)"

    private let state: UnsafeMutablePointer<inflate_state>
    private(set) var overread: [UInt8] = []

    init() throws {
        state = .allocate(capacity: 1)
        isal_inflate_init(state)
        state.pointee.crc_flag = UInt32(ISAL_DEFLATE)
    }

    convenience init(restoring saved: DeflateState) throws {
        try self.init()
        guard saved.engine == .isal, let blob = saved.blob else {
            throw SluiceError.checkpointRefused(path: "(gunzip stage)", reason: "the ISA-L inflate state is missing")
        }
        guard saved.layout == Self.layout else {
            throw SluiceError.checkpointRefused(
                path: "(gunzip stage)",
                reason: "its ISA-L inflate state comes from \(saved.layout ?? "an unknown version"), this build links \(Self.layout)")
        }
        guard blob.count == MemoryLayout<inflate_state>.size else {
            throw SluiceError.checkpointRefused(path: "(gunzip stage)", reason: "its ISA-L inflate state has \(blob.count) bytes, not \(MemoryLayout<inflate_state>.size)")
        }
        blob.withUnsafeBytes { UnsafeMutableRawPointer(state).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        clearPointers()
        // The state is library memory we did not write: check every length and index
        // ISA-L trusts before it touches them.
        guard let problem = Self.implausibleField(state.pointee) else { return }
        throw SluiceError.checkpointRefused(path: "(gunzip stage)", reason: "its ISA-L inflate state is damaged (\(problem))")
    }

    deinit {
        state.deallocate()
    }

    private static func implausibleField(_ s: inflate_state) -> String? {
        let tmpIn = MemoryLayout.size(ofValue: s.tmp_in_buffer)
        // tmp_out_buffer is 2 × 32 KiB of history plus ISAL_LOOK_AHEAD (288); too large for
        // Swift to import, so its size is spelled out here.
        let tmpOut = 2 * 32768 + 288
        let checks: [(Bool, String)] = [
            ((0...64).contains(s.read_in_length), "read_in_length"),
            ((0...Int32(tmpIn)).contains(Int32(s.tmp_in_size)), "tmp_in_size"),
            ((0...Int32(tmpOut)).contains(s.tmp_out_valid), "tmp_out_valid"),
            ((0...s.tmp_out_valid).contains(s.tmp_out_processed), "tmp_out_processed"),
            (s.block_state.rawValue <= ISAL_GZIP_HCRC.rawValue, "block_state"),
            (s.bfinal <= 1, "bfinal"),
            (s.hist_bits <= 15, "hist_bits"),
            (s.dict_length <= 32768, "dict_length"),
            ((0...258).contains(s.copy_overflow_length), "copy_overflow_length"),
            ((0...32768).contains(s.copy_overflow_distance), "copy_overflow_distance"),
            ((0...258).contains(s.write_overflow_len), "write_overflow_len"),
            (s.crc_flag == UInt32(ISAL_DEFLATE), "crc_flag"),
        ]
        return checks.first { !$0.0 }?.1
    }

    func inflate(_ input: UnsafeRawBufferPointer, into output: InflateOutput) throws -> (consumed: Int, finished: Bool) {
        guard let base = input.baseAddress, input.count > 0 else { return (0, false) }
        state.pointee.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self))
        state.pointee.avail_in = UInt32(input.count)
        defer { clearPointers() }
        while true {
            let room = try output.room()
            state.pointee.next_out = room.baseAddress!.assumingMemoryBound(to: UInt8.self)
            state.pointee.avail_out = UInt32(room.count)
            let rc = isal_inflate(state)
            let produced = room.count - Int(state.pointee.avail_out)
            try output.filled(produced)
            guard rc >= 0 else { throw GzipFormatError(Self.describe(rc)) }
            if state.pointee.block_state == ISAL_BLOCK_FINISH {
                // ISA-L reads ahead into its bit buffer; whole bytes there belong to the trailer.
                let readAhead = Int(state.pointee.read_in_length) / 8
                let takenHere = input.count - Int(state.pointee.avail_in)
                let carried = max(0, readAhead - takenHere)
                let skip = Int(state.pointee.read_in_length) % 8
                overread = (0..<carried).map { UInt8(truncatingIfNeeded: state.pointee.read_in >> UInt64(skip + 8 * $0)) }
                return (max(0, takenHere - readAhead), true)
            }
            if state.pointee.avail_in == 0 && state.pointee.avail_out > 0 { return (input.count, false) }
        }
    }

    func snapshot() -> DeflateState {
        let blob = Data(bytes: state, count: MemoryLayout<inflate_state>.size)
        return DeflateState(engine: .isal, layout: Self.layout, blob: blob)
    }

    func crc32(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress else { return crc }
        return crc32_gzip_refl(crc, base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    private func clearPointers() {
        state.pointee.next_in = nil
        state.pointee.avail_in = 0
        state.pointee.next_out = nil
        state.pointee.avail_out = 0
    }

    private static func describe(_ rc: Int32) -> String {
        switch rc {
        case ISAL_INVALID_BLOCK: return "invalid deflate block"
        case ISAL_INVALID_SYMBOL: return "invalid deflate symbol"
        case ISAL_INVALID_LOOKBACK: return "invalid deflate distance (too far back)"
        default: return "inflate error \(rc)"
        }
    }
}
