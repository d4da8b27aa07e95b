import CIsal
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Raw inflate on Intel ISA-L. Its `inflate_state` is public and self-contained once a
/// call has consumed all its input (the 32 KiB history lives in the state, not in our
/// output buffer), so a snapshot is the struct itself with its pointers cleared. The
/// layout belongs to the library version, which the snapshot records and restore checks.
///
/// A restored state is untrusted memory that the library will index with: every field is
/// checked against the range ISA-L can take (`IsalStateCheck`), and the state sits behind
/// a guard zone as large as the deflate window, so even a history copy that a damaged
/// state sends too far back stays inside memory we own.
final class IsalInflater: DeflateEngine {
    static let layout = "isal-\(ISAL_MAJOR_VERSION).\(ISAL_MINOR_VERSION).\(ISAL_PATCH_VERSION)/\(MemoryLayout<inflate_state>.size)"
    private static let guardZone = 32768 + 4096

    private let memory: UnsafeMutableRawPointer
    private let state: UnsafeMutablePointer<inflate_state>
    /// The lookup tables as last checked by `checkTables` (zeroed: no table yet).
    private let checkedTables: UnsafeMutableRawPointer
    private static let tablesOffset = MemoryLayout<inflate_state>.offset(of: \.lit_huff_code) ?? 0
    private static let tablesSize =
        (MemoryLayout<inflate_state>.offset(of: \.dist_huff_code) ?? 0)
        + MemoryLayout<inflate_huff_code_small>.size - tablesOffset

    init() throws {
        let size = Self.guardZone + MemoryLayout<inflate_state>.size
        memory = .allocate(byteCount: size, alignment: 64)
        memory.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        state = (memory + Self.guardZone).bindMemory(to: inflate_state.self, capacity: 1)
        checkedTables = .allocate(byteCount: Self.tablesSize, alignment: 64)
        checkedTables.initializeMemory(as: UInt8.self, repeating: 0, count: Self.tablesSize)
        isal_inflate_init(state)
        state.pointee.crc_flag = UInt32(ISAL_DEFLATE)
    }

    /// Ready for a new member, as `init()` leaves it (the memory stays allocated; the
    /// library resets its counts, so nothing of the last member can be reached).
    func reset() {
        isal_inflate_reset(state)
        state.pointee.crc_flag = UInt32(ISAL_DEFLATE)
    }

    /// Rebuilds the engine of a member that has produced `memberLength` bytes so far.
    convenience init(restoring saved: IsalInflateState, memberLength: UInt64) throws {
        try self.init()
        guard saved.layout == Self.layout else {
            throw StateRejected("its ISA-L inflate state comes from \(saved.layout), this build links \(Self.layout)")
        }
        guard saved.blob.count == MemoryLayout<inflate_state>.size else {
            throw StateRejected("its ISA-L inflate state has \(Counted.bytes(saved.blob.count)), not \(MemoryLayout<inflate_state>.size)")
        }
        saved.blob.withUnsafeBytes { blob in
            UnsafeMutableRawBufferPointer(start: UnsafeMutableRawPointer(state), count: blob.count).copyMemory(from: blob)
        }
        clearPointers()
        if let problem = IsalStateCheck.problem(in: state, memberLength: memberLength) {
            throw StateRejected("its ISA-L inflate state is damaged (\(problem))")
        }
    }

    deinit {
        memory.deallocate()
        checkedTables.deallocate()
    }

    func inflate(_ input: UnsafeRawBufferPointer, into output: InflateOutput) throws -> InflateProgress {
        guard let base = input.baseAddress, input.count > 0 else { return .needsInput(consumed: 0) }
        state.pointee.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self))
        state.pointee.avail_in = UInt32(input.count)
        defer { clearPointers() }
        while true {
            let room = try output.room()
            guard let out = room.baseAddress, room.count > 0 else { throw GzipFormatError("no room to inflate into") }
            state.pointee.next_out = out.assumingMemoryBound(to: UInt8.self)
            state.pointee.avail_out = UInt32(room.count)
            let availableBefore = state.pointee.avail_in
            let rc = isal_inflate(state)
            let produced = room.count - Int(state.pointee.avail_out)
            try output.filled(produced)
            guard rc >= 0 else { throw GzipFormatError(Self.describe(rc)) }
            // A sound state always takes input or gives output; a damaged one could spin.
            guard
                produced > 0 || availableBefore == 0 || state.pointee.avail_in < availableBefore
                    || state.pointee.block_state == ISAL_BLOCK_FINISH
            else {
                throw GzipFormatError("the inflate engine made no progress")
            }
            try checkTables()
            if state.pointee.block_state == ISAL_BLOCK_FINISH {
                return finished(inputCount: input.count)
            }
            if state.pointee.avail_in == 0 && state.pointee.avail_out > 0 { return .needsInput(consumed: input.count) }
        }
    }

    /// ISA-L reads ahead into its bit buffer; whole bytes there lie past the stream's end.
    /// Those taken in this call are given back; older ones are handed on as `overread`.
    private func finished(inputCount: Int) -> InflateProgress {
        let bitsLeft = Int(state.pointee.read_in_length)
        let readAhead = bitsLeft / 8
        let takenHere = inputCount - Int(state.pointee.avail_in)
        let older = max(0, readAhead - takenHere)
        let skip = UInt64(bitsLeft % 8)
        let overread = (0..<older).map { UInt8(truncatingIfNeeded: state.pointee.read_in >> (skip + 8 * UInt64($0))) }
        return .finished(consumed: max(0, takenHere - readAhead), overread: overread)
    }

    /// ISA-L accepts a dynamic block whose Huffman codes leave some codes unused when the
    /// data never needs them; zlib, gzip and pigz reject such a block. Checked from the
    /// lookup tables ISA-L built, for the block in progress when a call returns and for a
    /// member's last block. ISA-L decodes many blocks in one call and says nothing about
    /// those in between, so a block that starts and ends inside one call, and is not a
    /// member's last, is not checked (see README, "Engines").
    private func checkTables() throws {
        let blockState = state.pointee.block_state
        guard blockState == ISAL_BLOCK_CODED || blockState == ISAL_BLOCK_FINISH else { return }
        // Identical tables get the same verdict: compare with the last ones checked (a
        // memcmp of ~20 KiB) and walk them only when they differ.
        let tables = UnsafeRawPointer(state) + Self.tablesOffset
        guard memcmp(tables, checkedTables, Self.tablesSize) != 0 else { return }
        if let problem = IsalStateCheck.incompleteCode(in: state) { throw GzipFormatError(problem) }
        checkedTables.copyMemory(from: tables, byteCount: Self.tablesSize)
    }

    func snapshot() -> DeflateState {
        .isal(IsalInflateState(layout: Self.layout, blob: Data(bytes: state, count: MemoryLayout<inflate_state>.size)))
    }

    /// CRC-32 (gzip polynomial) continued over `bytes`, ISA-L's (folding, tens of GB/s).
    static func crc32(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
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
