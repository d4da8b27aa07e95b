import CZlib
import Foundation

/// Builds gzip members with exactly the features a test wants: header fields (FEXTRA,
/// FNAME, FCOMMENT, FHCRC), stored blocks (level 0), any compression level.
struct GzipMember {
    var data: [UInt8]
    var level: Int32 = 6
    var name: String?
    var comment: String?
    var extra: [UInt8]?
    var headerCRC = false

    func encoded() -> [UInt8] {
        var flags: UInt8 = 0
        if headerCRC { flags |= 2 }
        if extra != nil { flags |= 4 }
        if name != nil { flags |= 8 }
        if comment != nil { flags |= 16 }
        var out: [UInt8] = [0x1f, 0x8b, 8, flags, 0x78, 0x56, 0x34, 0x12, 0, 3]
        if let extra {
            out += [UInt8(extra.count & 0xff), UInt8(extra.count >> 8)] + extra
        }
        if let name { out += Array(name.utf8) + [0] }
        if let comment { out += Array(comment.utf8) + [0] }
        if headerCRC {
            let crc = UInt32(crc32(0, out, uInt(out.count)))
            out += [UInt8(crc & 0xff), UInt8((crc >> 8) & 0xff)]
        }
        out += rawDeflate(data, level: level)
        let crc = data.isEmpty ? 0 : UInt32(crc32(0, data, uInt(data.count)))
        out += littleEndian(crc) + littleEndian(UInt32(truncatingIfNeeded: data.count))
        return out
    }
}

func littleEndian(_ v: UInt32) -> [UInt8] {
    [UInt8(v & 0xff), UInt8((v >> 8) & 0xff), UInt8((v >> 16) & 0xff), UInt8(v >> 24)]
}

func rawDeflate(_ data: [UInt8], level: Int32) -> [UInt8] {
    var stream = z_stream()
    precondition(sluice_deflateInit2(&stream, level, -15) == Z_OK)
    defer { deflateEnd(&stream) }
    var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(data.count))) + 64)
    var input = data
    let produced: Int = input.withUnsafeMutableBufferPointer { inBuf in
        output.withUnsafeMutableBufferPointer { outBuf in
            stream.next_in = inBuf.baseAddress
            stream.avail_in = uInt(inBuf.count)
            stream.next_out = outBuf.baseAddress
            stream.avail_out = uInt(outBuf.count)
            let rc = deflate(&stream, Z_FINISH)
            precondition(rc == Z_STREAM_END)
            return outBuf.count - Int(stream.avail_out)
        }
    }
    return Array(output.prefix(produced))
}

/// Reproducible randomness for property tests (SplitMix64).
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}
