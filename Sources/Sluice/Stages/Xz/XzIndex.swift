import CXz
import CZlib

/// What a stream's blocks add up to, kept as sums and a hash so that comparing the blocks
/// seen with the index's records takes constant memory, however many blocks there are.
public struct XzRecordSummary: Codable, Sendable, Equatable {
    var count: UInt64 = 0
    var unpaddedTotal: UInt64 = 0
    var uncompressedTotal: UInt64 = 0
    var hash: UInt64 = 0

    mutating func add(unpadded: UInt64, uncompressed: UInt64) {
        count &+= 1
        unpaddedTotal &+= unpadded
        uncompressedTotal &+= uncompressed
        var record = (unpadded.littleEndian, uncompressed.littleEndian)
        hash = withUnsafeBytes(of: &record) { cxz_crc64(hash, $0.baseAddress!.assumingMemoryBound(to: UInt8.self), 16) }
    }
}

/// Reads a stream's index byte by byte (it may be split across writes and checkpoints):
/// the record count, the records, zero padding, CRC32.
public struct XzIndexParser: Codable, Sendable, Equatable {
    enum Field: String, Codable, Sendable { case count, unpadded, uncompressed, padding, crc }
    var field: Field = .count
    var varint = XzVarint()
    var remaining: UInt64 = 0
    var unpadded: UInt64 = 0
    var records = XzRecordSummary()
    /// Bytes of the index so far (the indicator byte included) and their CRC32.
    var size: UInt64 = 1
    var crc: UInt32 = UInt32(crc32(0, [0], 1))
    var crcBytes: [UInt8] = []

    var isDone: Bool { field == .crc && crcBytes.count == 4 }

    /// Consumes bytes up to the end of the index; returns how many it used.
    mutating func consume(_ input: UnsafeRawBufferPointer) throws -> Int {
        var used = 0
        while used < input.count && !isDone {
            let byte = input[used]
            used += 1
            if field == .crc {
                crcBytes.append(byte)
                if isDone {
                    let stored = UInt32(crcBytes[0]) | UInt32(crcBytes[1]) << 8 | UInt32(crcBytes[2]) << 16 | UInt32(crcBytes[3]) << 24
                    guard stored == crc else { throw XzFormatError("index CRC32 mismatch") }
                }
                continue
            }
            size &+= 1
            crc = withUnsafeBytes(of: byte) { UInt32(crc32(UInt(crc), $0.baseAddress!.assumingMemoryBound(to: Bytef.self), 1)) }
            switch field {
            case .count:
                if let value = try varint.add(byte) {
                    remaining = value
                    field = value == 0 ? .padding : .unpadded
                }
            case .unpadded:
                if let value = try varint.add(byte) {
                    guard value >= 5, value <= (1 << 63) - 4 else { throw XzFormatError("index record has an invalid unpadded size") }
                    unpadded = value
                    field = .uncompressed
                }
            case .uncompressed:
                if let value = try varint.add(byte) {
                    records.add(unpadded: unpadded, uncompressed: value)
                    remaining -= 1
                    field = remaining == 0 ? .padding : .unpadded
                }
            case .padding:
                guard byte == 0 else { throw XzFormatError("index padding is not zero") }
            case .crc: break
            }
            // The padding ends where the index reaches a multiple of four bytes.
            if field == .padding && size % 4 == 0 { field = .crc }
        }
        return used
    }

    /// Range checks for a restored parser.
    var isPlausible: Bool {
        varint.isPlausible && crcBytes.count < 4 && (field == .crc || crcBytes.isEmpty)
            && (field != .uncompressed && field != .unpadded || remaining > 0) && size >= 1
    }
}
