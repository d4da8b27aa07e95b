import CIsal

/// Checks on an ISA-L `inflate_state` (the layout of the version `IsalInflater.layout`
/// names): whether a restored one stays inside what the library can take, and whether
/// the Huffman codes of the current block are complete, as zlib demands.
///
/// The lookup tables are checked rather than rebuilt: ISA-L does not say where a block's
/// header lies, so there is nothing to rebuild them from. Their entries are read with the
/// library's own layout — a short table indexed by the next 12 (literal/length) or 10
/// (distance) bits whose entries hold a symbol and its code length, or, flagged, the
/// start and width of a run in the long table for longer codes.
enum IsalStateCheck {
    // Large (literal/length) table entries.
    private static let largeFlag: UInt32 = 1 << 25
    private static let largeIndexMask: UInt32 = (1 << 25) - 1
    private static let largeShortBits = Int(ISAL_DECODE_LONG_BITS)
    // Small (distance) table entries.
    private static let smallFlag: UInt16 = 1 << 10
    private static let smallShortBits = Int(ISAL_DECODE_SHORT_BITS)

    /// What is out of range in a restored state, or nil. `memberLength` is what the
    /// member has produced so far by the gzip state that holds it.
    static func problem(in state: UnsafePointer<inflate_state>, memberLength: UInt64) -> String? {
        let s = UnsafeRawPointer(state)
        func field<T>(_ path: KeyPath<inflate_state, T>, _: T.Type) -> T {
            s.load(fromByteOffset: MemoryLayout<inflate_state>.offset(of: path) ?? 0, as: T.self)
        }
        let tmpIn = Int(ISAL_DEF_MAX_HDR_SIZE)
        let blockState = field(\.block_state, isal_block_state.self)
        let readInLength = field(\.read_in_length, Int32.self)
        let tmpOutValid = field(\.tmp_out_valid, Int32.self)
        let states: [isal_block_state] = [
            ISAL_BLOCK_NEW_HDR, ISAL_BLOCK_HDR, ISAL_BLOCK_TYPE0, ISAL_BLOCK_CODED,
            ISAL_BLOCK_INPUT_DONE, ISAL_BLOCK_FINISH,
        ]
        let checks: [(Bool, String)] = [
            (states.contains(blockState), "block_state"),
            ((0...64).contains(readInLength), "read_in_length"),
            // read_in's bits above read_in_length are not checked: states ISA-L produced itself
            // carry stale ones there (decompress's cut tests met them), and they cannot reach memory.
            ((0...Int32(tmpIn)).contains(Int32(field(\.tmp_in_size, Int16.self))), "tmp_in_size"),
            // tmp_out_buffer: 2 × 32 KiB of history plus ISAL_LOOK_AHEAD (288).
            ((0...Int32(2 * 32768 + 288)).contains(tmpOutValid), "tmp_out_valid"),
            ((0...max(0, tmpOutValid)).contains(field(\.tmp_out_processed, Int32.self)), "tmp_out_processed"),
            (field(\.total_out, UInt32.self) == UInt32(truncatingIfNeeded: memberLength), "total_out"),
            (field(\.bfinal, UInt32.self) <= 1, "bfinal"),
            (field(\.hist_bits, UInt32.self) <= 15, "hist_bits"),
            (field(\.dict_length, UInt32.self) <= 32768, "dict_length"),
            ((0...65535).contains(state.pointee.type0_block_len), "type0_block_len"),
            ((0...258).contains(field(\.copy_overflow_length, Int32.self)), "copy_overflow_length"),
            ((0...32768).contains(field(\.copy_overflow_distance, Int32.self)), "copy_overflow_distance"),
            ((0...258).contains(field(\.write_overflow_len, Int32.self)), "write_overflow_len"),
            (field(\.wrapper_flag, Int16.self) == 0, "wrapper_flag"),
            (field(\.crc_flag, UInt32.self) == UInt32(ISAL_DEFLATE), "crc_flag"),
        ]
        if let failed = checks.first(where: { !$0.0 }) { return failed.1 }
        guard blockState == ISAL_BLOCK_CODED else { return nil }
        if !large(s).indexesInRange || !literalEntriesInRange(large(s)) { return "literal/length lookup table" }
        if !small(s).indexesInRange || !distanceEntriesInRange(small(s)) { return "distance lookup table" }
        return nil
    }

    /// Why the current block's codes are incomplete, or nil. Like zlib, a code with a
    /// single symbol of length one is allowed incomplete, and a block may have no
    /// distance codes. ISA-L builds the fixed codes without their two unused symbols
    /// (literal/length 286 and 287, distance 30 and 31), which leaves those slots empty.
    static func incompleteCode(in state: UnsafePointer<inflate_state>) -> String? {
        let s = UnsafeRawPointer(state)
        let table = large(s)
        // The common case, a complete code, in one tight pass; the details only when not.
        guard table.hasEmptySlot || small(s).hasEmptySlot else { return nil }
        let literals = table.coverage()
        // No code built yet (only stored blocks so far): nothing to check.
        guard literals.holes < literals.span else { return nil }
        if literals.holes > 0 && !literals.isSingleLengthOne && !table.isFixedLiteralCode(holes: literals.holes) {
            return "invalid literal/lengths set (incomplete Huffman code)"
        }
        let distances = small(s).coverage()
        let fixed = distances.onlyLength == 5 && distances.holes == distances.span / 16
        if distances.holes > 0 && distances.holes < distances.span && !distances.isSingleLengthOne && !fixed {
            return "invalid distances set (incomplete Huffman code)"
        }
        return nil
    }

    /// Literal/length entries name symbols the decoder can act on: up to three packed
    /// symbols (8 bits each, the last up to 513: 256 ends the block, 257–513 are lengths
    /// with their extra bits folded in), and no symbol without a code length.
    private static func literalEntriesInRange(_ table: Table) -> Bool {
        for i in 0..<table.shortCount {
            let entry = table.short(i)
            guard table.run(entry) == nil else { continue }
            let symbols = entry & largeIndexMask
            switch (entry >> 26) & 3 {
            case 0: if entry != 0 { return false }
            case 1: if symbols > 513 { return false }
            case 2: if symbols >> 8 > 513 { return false }
            default: if symbols >> 16 > 513 { return false }
            }
        }
        for j in 0..<table.longCount where table.long(j) & 0x3ff > 513 {
            return false
        }
        return true
    }

    /// Distance entries name one of the 30 distance codes with the number of extra bits
    /// RFC 1951 gives it (0 for codes 0–3, then one more every two codes, up to 13).
    private static func distanceEntriesInRange(_ table: Table) -> Bool {
        func valid(_ entry: UInt32, length: UInt32) -> Bool {
            guard length > 0 else { return true }
            let symbol = entry & 0x1f, extra = (entry >> 5) & 0xf
            return symbol < 30 && extra == (symbol < 4 ? 0 : symbol / 2 - 1)
        }
        for i in 0..<table.shortCount {
            let entry = table.short(i)
            if table.run(entry) == nil && !valid(entry, length: entry >> 11) { return false }
        }
        for j in 0..<table.longCount {
            let entry = UInt32(table.long(j))
            if !valid(entry, length: entry >> 10) { return false }
        }
        return true
    }

    /// A lookup table read in place, with how to read its entries.
    struct Table {
        let base: UnsafeRawPointer
        let shortCount: Int
        let shortStride: Int
        let longCount: Int
        let shortBits: Int
        /// Literal/length (32-bit entries) or distance (16-bit entries).
        private var isLarge: Bool { shortStride == 4 }

        /// For a flagged short entry: the long run's start and the longest code length.
        @inline(__always) func run(_ entry: UInt32) -> (start: Int, maxLength: Int)? {
            if isLarge {
                return entry & largeFlag == 0 ? nil : (Int(entry & largeIndexMask), Int(entry >> 26))
            }
            return entry & UInt32(smallFlag) == 0 ? nil : (Int(entry & 0x1ff), Int((entry & 0xffff) >> 11))
        }

        @inline(__always) func shortLength(_ entry: UInt32) -> Int {
            isLarge ? Int(entry >> 28) : Int(entry >> 11)
        }

        @inline(__always) func symbol(_ entry: UInt32) -> UInt32 {
            isLarge ? entry & largeIndexMask : entry & 0x1f
        }

        @inline(__always) func short(_ i: Int) -> UInt32 {
            shortStride == 4
                ? base.load(fromByteOffset: 4 * i, as: UInt32.self)
                : UInt32(base.load(fromByteOffset: 2 * i, as: UInt16.self))
        }

        @inline(__always) func long(_ i: Int) -> UInt16 {
            base.load(fromByteOffset: shortStride * shortCount + 2 * i, as: UInt16.self)
        }

        /// Whether the only empty slots are those of fixed-code symbols 286 and 287 (8-bit
        /// codes 1100011x, so every index whose first 7 bits are that prefix) and the table
        /// starts like the fixed code (0000000 is symbol 256, 7 bits long).
        func isFixedLiteralCode(holes: Int) -> Bool {
            let prefix = 0b1100011
            guard holes == shortCount / 128, shortLength(short(0)) == 7, symbol(short(0)) == 256 else { return false }
            var i = prefix
            while i < shortCount {
                if run(short(i)) != nil || shortLength(short(i)) != 0 { return false }
                i += 128
            }
            return true
        }

        /// Every flagged short entry sends the decoder to a run inside the long table.
        var indexesInRange: Bool {
            for i in 0..<shortCount {
                guard let run = run(short(i)) else { continue }
                guard run.maxLength > shortBits, run.maxLength <= 21,
                    run.start + (1 << (run.maxLength - shortBits)) <= longCount
                else { return false }
            }
            return true
        }

        struct Coverage {
            var holes = 0
            var span = 0
            /// The one code length every code has, or nil (several, or none).
            var onlyLength: Int?
            var mixedLengths = false
            var firstSymbol: UInt32?
            var mixedSymbols = false
            var isSingleLengthOne: Bool { onlyLength == 1 && !mixedLengths && !mixedSymbols }

            mutating func saw(length: Int, symbol: UInt32?) {
                if let only = onlyLength, only != length { mixedLengths = true }
                if onlyLength == nil { onlyLength = length }
                guard let symbol else {
                    mixedSymbols = true
                    return
                }
                if let first = firstSymbol, first != symbol { mixedSymbols = true }
                if firstSymbol == nil { firstSymbol = symbol }
            }
        }

        /// Whether any slot of the short table, or of a long run, is empty.
        var hasEmptySlot: Bool {
            var empty = false
            if isLarge {
                let entries = base.assumingMemoryBound(to: UInt32.self)
                for i in 0..<shortCount {
                    let entry = entries[i]
                    empty = empty || entry & 0xF200_0000 == 0  // no code length, not a run
                }
            } else {
                let entries = base.assumingMemoryBound(to: UInt16.self)
                for i in 0..<shortCount {
                    let entry = entries[i]
                    empty = empty || entry & 0xFC00 == 0
                }
            }
            if empty { return true }
            for i in 0..<shortCount {
                guard let run = run(short(i)) else { continue }
                let end = min(longCount, run.start + (1 << max(0, min(20, run.maxLength - shortBits))))
                var j = min(run.start, end)
                while j < end {
                    if long(j) >> 10 == 0 { return true }
                    j += 1
                }
            }
            return false
        }

        /// Counts the slots no code fills, over the whole code space (long runs included).
        func coverage() -> Coverage {
            var c = Coverage()
            c.span = shortCount
            for i in 0..<shortCount {
                let entry = short(i)
                if let run = run(entry) {
                    let end = min(longCount, run.start + (1 << max(0, min(20, run.maxLength - shortBits))))
                    var j = min(run.start, end)
                    while j < end {
                        if long(j) >> 10 == 0 { c.holes += 1 }
                        j += 1
                    }
                    c.saw(length: run.maxLength, symbol: nil)
                } else {
                    let length = shortLength(entry)
                    if length == 0 { c.holes += 1 } else { c.saw(length: length, symbol: symbol(entry)) }
                }
            }
            if c.mixedLengths { c.onlyLength = nil }
            return c
        }
    }

    private static func large(_ s: UnsafeRawPointer) -> Table {
        table(in: s, at: \.lit_huff_code, size: MemoryLayout<inflate_huff_code_large>.size, stride: 4, bits: largeShortBits)
    }

    private static func small(_ s: UnsafeRawPointer) -> Table {
        table(in: s, at: \.dist_huff_code, size: MemoryLayout<inflate_huff_code_small>.size, stride: 2, bits: smallShortBits)
    }

    /// A table of `size` bytes: 2^`bits` short entries of `stride` bytes, then 16-bit long entries.
    private static func table<T>(in s: UnsafeRawPointer, at field: KeyPath<inflate_state, T>, size: Int, stride: Int, bits: Int) -> Table {
        let shortCount = 1 << bits
        return Table(
            base: s + (MemoryLayout<inflate_state>.offset(of: field) ?? 0), shortCount: shortCount,
            shortStride: stride, longCount: (size - stride * shortCount) / 2, shortBits: bits)
    }
}
