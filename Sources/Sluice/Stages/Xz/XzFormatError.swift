/// Damage found inside the .xz data; `XzDecoder` turns it into `SluiceError.corruptData`
/// with the input offset where the damaged unit began.
struct XzFormatError: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// The .xz variable-length integer: 7 bits per byte, least significant first, at most
/// nine bytes, no superfluous zero byte at the end.
struct XzVarint: Codable, Sendable, Equatable {
    var value: UInt64 = 0
    var bytes: Int = 0

    /// Adds one byte; returns the value once it is complete.
    mutating func add(_ byte: UInt8) throws -> UInt64? {
        guard bytes < 9 else { throw XzFormatError("a variable-length integer is longer than 9 bytes") }
        if byte == 0 && bytes > 0 { throw XzFormatError("a variable-length integer ends in a zero byte") }
        value |= UInt64(byte & 0x7F) << (7 * UInt64(bytes))
        bytes += 1
        guard byte & 0x80 == 0 else { return nil }
        defer { self = XzVarint() }
        return value
    }

    /// Reads one integer from `bytes` at `offset`, which it advances.
    static func read(_ bytes: UnsafeRawBufferPointer, at offset: inout Int, limit: Int) throws -> UInt64 {
        var varint = XzVarint()
        while offset < limit {
            let byte = bytes[offset]
            offset += 1
            if let value = try varint.add(byte) { return value }
        }
        throw XzFormatError("a variable-length integer runs past the end of its field")
    }

    var isPlausible: Bool { bytes >= 0 && bytes < 9 && (bytes == 0 ? value == 0 : value < (1 << (7 * UInt64(bytes)))) }
}

func littleEndian32(_ bytes: UnsafeRawBufferPointer, at i: Int) -> UInt32 {
    UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24
}

func xzSize(_ bytes: UInt64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 { return "\(bytes >> 20) MiB" }
    if bytes >= 1 << 10 && bytes % (1 << 10) == 0 { return "\(bytes >> 10) KiB" }
    return "\(bytes) bytes"
}
