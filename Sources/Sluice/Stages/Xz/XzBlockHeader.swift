import CZlib

/// A parsed block header: the declared sizes, the filter chain and LZMA2's dictionary size.
struct XzBlockHeader {
    /// A filter that precedes LZMA2 in the chain.
    struct Filter: Equatable {
        var kind: UInt32  // CXZ_FILTER_*
        var parameter: UInt32  // delta distance, or branch start offset
    }

    let size: Int
    let compressedSize: UInt64?
    let uncompressedSize: UInt64?
    /// In encoding order (the decoder runs them last to first).
    let filters: [Filter]
    let dictionarySize: UInt64

    /// `bytes` is the whole header: its size byte through its CRC32.
    init(_ bytes: UnsafeRawBufferPointer, memoryLimit: UInt64) throws {
        size = bytes.count
        let crcAt = bytes.count - 4
        let stored = littleEndian32(bytes, at: crcAt)
        let computed = UInt32(crc32(0, bytes.baseAddress!.assumingMemoryBound(to: Bytef.self), UInt32(crcAt)))
        guard stored == computed else { throw XzFormatError("block header CRC32 mismatch") }
        let flags = bytes[1]
        guard flags & 0x3C == 0 else { throw XzFormatError("block header has reserved flag bits set") }
        var at = 2
        compressedSize = flags & 0x40 != 0 ? try XzVarint.read(bytes, at: &at, limit: crcAt) : nil
        uncompressedSize = flags & 0x80 != 0 ? try XzVarint.read(bytes, at: &at, limit: crcAt) : nil
        if let compressedSize, compressedSize == 0 || compressedSize > (1 << 62) {
            throw XzFormatError("block header declares an invalid compressed size \(compressedSize)")
        }
        let count = Int(flags & 3) + 1
        var chain: [Filter] = []
        var dictionary: UInt64?
        for n in 0..<count {
            let id = try XzVarint.read(bytes, at: &at, limit: crcAt)
            let propertiesSize = try XzVarint.read(bytes, at: &at, limit: crcAt)
            guard propertiesSize <= UInt64(crcAt - at) else { throw XzFormatError("filter properties run past the block header") }
            let properties = UnsafeRawBufferPointer(rebasing: bytes[at..<(at + Int(propertiesSize))])
            at += Int(propertiesSize)
            let isLast = n == count - 1
            switch id {
            case 0x21:
                guard isLast else { throw XzFormatError("LZMA2 is not the last filter of the chain") }
                guard properties.count == 1, properties[0] & 0xC0 == 0, properties[0] <= 40 else {
                    throw XzFormatError("invalid LZMA2 properties")
                }
                dictionary = Self.dictionarySize(properties[0])
            case 0x03, 0x04, 0x0A:
                guard !isLast else { throw XzFormatError("the filter chain does not end with LZMA2") }
                chain.append(try Self.filter(id: UInt32(id), properties))
            default:
                throw XzFormatError("the block uses the \(Self.filterName(id)) filter, which unxz does not support (only LZMA2, delta, x86, ARM64)")
            }
        }
        guard let dictionary else { throw XzFormatError("the filter chain does not end with LZMA2") }
        guard dictionary <= memoryLimit else {
            throw DecoderLimitExceeded(what: "dictionary", needed: dictionary, limit: memoryLimit, option: "memlimit")
        }
        guard bytes[at..<crcAt].allSatisfy({ $0 == 0 }) else { throw XzFormatError("block header padding is not zero") }
        filters = chain
        dictionarySize = dictionary
    }

    private static func filter(id: UInt32, _ properties: UnsafeRawBufferPointer) throws -> Filter {
        if id == 0x03 {
            guard properties.count == 1 else { throw XzFormatError("invalid delta filter properties") }
            return Filter(kind: id, parameter: UInt32(properties[0]) + 1)
        }
        switch properties.count {
        case 0: return Filter(kind: id, parameter: 0)
        case 4:
            let start = littleEndian32(properties, at: 0)
            if id == 0x0A && start % 4 != 0 { throw XzFormatError("ARM64 filter start offset is not a multiple of 4") }
            return Filter(kind: id, parameter: start)
        default: throw XzFormatError("invalid \(filterName(UInt64(id))) filter properties")
        }
    }

    /// The dictionary size an LZMA2 properties byte encodes: 2 or 3 times a power of two.
    static func dictionarySize(_ code: UInt8) -> UInt64 {
        code == 40 ? 0xFFFF_FFFF : UInt64(2 | (code & 1)) << (UInt64(code) / 2 + 11)
    }

    static func filterName(_ id: UInt64) -> String {
        switch id {
        case 0x03: "delta"
        case 0x04: "x86"
        case 0x05: "PowerPC"
        case 0x06: "IA-64"
        case 0x07: "ARM"
        case 0x08: "ARM-Thumb"
        case 0x09: "SPARC"
        case 0x0A: "ARM64"
        case 0x0B: "RISC-V"
        case 0x21: "LZMA2"
        case 0x4000_0000_0000_0001: "LZMA1"
        default: "unknown (ID 0x\(String(id, radix: 16)))"
        }
    }
}
