import CZlib

/// A streaming parser for one gzip member header (RFC 1952 §2.3), resumable at any
/// byte: its whole state is these few fields.
struct GzipHeaderParser: Codable, Sendable, Equatable {
    enum Step: Int, Codable, Sendable {
        case id1, id2, method, flags, mtimeXflOS, xlen, extra, name, comment, headerCRC, done
    }

    var step: Step = .id1
    /// Bytes still to read in a fixed-length field (mtime/xfl/os, xlen, extra, hcrc).
    var remaining: Int = 0
    var flags: UInt8 = 0
    /// Little-endian field being assembled (xlen, the stored header CRC).
    var field: UInt32 = 0
    /// CRC-32 of every header byte so far, for FHCRC.
    var crc: UInt32 = 0

    static let ftext: UInt8 = 1, fhcrc: UInt8 = 2, fextra: UInt8 = 4, fname: UInt8 = 8, fcomment: UInt8 = 16

    var isDone: Bool { step == .done }

    /// Whether a restored state could have come from this parser (checkpoints are input too).
    var isPlausible: Bool {
        switch step {
        case .mtimeXflOS: return (1...6).contains(remaining)
        case .xlen, .headerCRC: return (1...2).contains(remaining) && field <= 0xffff
        case .extra: return (1...0xffff).contains(remaining)
        default: return remaining == 0 || step == .done
        }
    }

    /// Consumes header bytes from the front of `bytes`; returns how many it took.
    /// Stops right after the header's last byte.
    mutating func consume(_ bytes: UnsafeRawBufferPointer) throws(GzipFormatError) -> Int {
        var i = 0
        while i < bytes.count && step != .done {
            let byte = bytes[i]
            i += 1
            if step != .headerCRC { crc = updateCRC(crc, byte) }
            switch step {
            case .id1:
                guard byte == 0x1f else { throw .init("not in gzip format (bad magic bytes)") }
                step = .id2
            case .id2:
                guard byte == 0x8b else { throw .init("not in gzip format (bad magic bytes)") }
                step = .method
            case .method:
                guard byte == 8 else { throw .init("unknown compression method \(byte)") }
                step = .flags
            case .flags:
                guard byte & 0xe0 == 0 else { throw .init("reserved header flags set (0x\(String(byte, radix: 16)))") }
                flags = byte
                step = .mtimeXflOS
                remaining = 6
            case .mtimeXflOS:
                remaining -= 1
                if remaining == 0 { advancePastFixedFields() }
            case .xlen:
                field |= UInt32(byte) << (8 * UInt32(2 - remaining))
                remaining -= 1
                if remaining == 0 {
                    remaining = Int(field)
                    field = 0
                    if remaining > 0 { step = .extra } else { advanceToName() }
                }
            case .extra:
                remaining -= 1
                if remaining == 0 { advanceToName() }
            case .name:
                if byte == 0 { advanceToComment() }
            case .comment:
                if byte == 0 { advanceToHeaderCRC() }
            case .headerCRC:
                field |= UInt32(byte) << (8 * UInt32(2 - remaining))
                remaining -= 1
                if remaining == 0 {
                    guard field == crc & 0xffff else { throw .init("header CRC mismatch") }
                    step = .done
                }
            case .done:
                break
            }
        }
        return i
    }

    private mutating func advancePastFixedFields() {
        if flags & Self.fextra != 0 {
            step = .xlen
            remaining = 2
            field = 0
        } else {
            advanceToName()
        }
    }

    private mutating func advanceToName() {
        if flags & Self.fname != 0 { step = .name } else { advanceToComment() }
    }

    private mutating func advanceToComment() {
        if flags & Self.fcomment != 0 { step = .comment } else { advanceToHeaderCRC() }
    }

    private mutating func advanceToHeaderCRC() {
        if flags & Self.fhcrc != 0 {
            step = .headerCRC
            remaining = 2
            field = 0
        } else {
            step = .done
        }
    }

    private func updateCRC(_ crc: UInt32, _ byte: UInt8) -> UInt32 {
        var b = byte
        return UInt32(crc32(UInt(crc), &b, 1))
    }
}

/// What is wrong with a gzip stream, before the decoder adds the offset.
public struct GzipFormatError: Error, Sendable {
    public let reason: String
    init(_ reason: String) { self.reason = reason }
}
