/// A zstd frame header (RFC 8878 §3.1.1.1), from the descriptor to the content size.
struct ZstdFrameHeader {
    static let magic: UInt32 = 0xFD2F_B528
    /// Skippable frames use magics 0x184D2A50 … 0x184D2A5F.
    static func isSkippable(_ magic: UInt32) -> Bool { magic & 0xFFFF_FFF0 == 0x184D_2A50 }

    let windowSize: UInt64
    let contentSize: UInt64?
    let hasChecksum: Bool

    /// The largest block content in this frame: min(window size, 128 KiB).
    var blockMaximum: Int { Int(min(windowSize, 128 * 1024)) }

    /// The header's length in bytes given its first byte (the descriptor).
    static func size(descriptor: UInt8) -> Int {
        let single = descriptor & 0x20 != 0
        return 1 + (single ? 0 : 1) + dictionaryIdSize(descriptor) + contentSizeSize(descriptor)
    }

    private static func dictionaryIdSize(_ descriptor: UInt8) -> Int { [0, 1, 2, 4][Int(descriptor & 3)] }

    private static func contentSizeSize(_ descriptor: UInt8) -> Int {
        let flag = Int(descriptor >> 6)
        return flag == 0 ? (descriptor & 0x20 != 0 ? 1 : 0) : [0, 2, 4, 8][flag]
    }

    /// Parses a complete header; refuses reserved bits, dictionaries and windows over `windowLimit`.
    init(_ bytes: [UInt8], windowLimit: UInt64) throws {
        guard let descriptor = bytes.first, bytes.count == Self.size(descriptor: descriptor) else {
            throw ZstdFormatError("frame header has the wrong length")
        }
        guard descriptor & 0x08 == 0 else { throw ZstdFormatError("frame header descriptor has its reserved bit set") }
        let single = descriptor & 0x20 != 0
        var at = 1
        var window: UInt64 = 0
        if !single {
            let exponent = UInt64(bytes[at] >> 3), mantissa = UInt64(bytes[at] & 7)
            let base: UInt64 = 1 << (10 + exponent)
            window = base + (base / 8) * mantissa
            at += 1
        }
        let idSize = Self.dictionaryIdSize(descriptor)
        let dictionaryId = Self.littleEndian(bytes[at..<(at + idSize)])
        at += idSize
        guard dictionaryId == 0 else {
            throw ZstdFormatError("the frame needs dictionary \(dictionaryId), and unzstd takes no dictionaries")
        }
        let sizeSize = Self.contentSizeSize(descriptor)
        var content: UInt64? = nil
        if sizeSize > 0 {
            let raw = Self.littleEndian(bytes[at..<(at + sizeSize)])
            content = sizeSize == 2 ? raw + 256 : raw
        }
        if single, let content { window = content }
        guard window <= windowLimit else {
            throw DecoderLimitExceeded(what: "window", needed: window, limit: windowLimit, option: "memlimit")
        }
        windowSize = window
        contentSize = content
        hasChecksum = descriptor & 0x04 != 0
    }

    private static func littleEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        bytes.reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }
}

/// Why zstd input was refused; the decoder adds where.
struct ZstdFormatError: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
