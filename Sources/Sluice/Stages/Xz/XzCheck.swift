import CCrypto
import CIsal
import CZlib

/// A block's integrity check as it runs over the block's output: None, CRC-32, CRC-64
/// or SHA-256, the four that xz writes.
struct XzCheck {
    enum Kind: UInt8, Codable, Sendable {
        case none = 0, crc32 = 1, crc64 = 4, sha256 = 10

        var size: Int {
            switch self {
            case .none: 0
            case .crc32: 4
            case .crc64: 8
            case .sha256: 32
            }
        }

        init(streamFlag id: UInt8) throws {
            guard let kind = Kind(rawValue: id) else {
                throw XzFormatError("the stream uses integrity check ID \(id), which unxz does not support (only None, CRC32, CRC64, SHA-256)")
            }
            self = kind
        }
    }

    let kind: Kind
    private var crc: UInt64 = 0
    private var sha = SHA256_CTX()
    private var length: UInt64 = 0

    init(_ kind: Kind) {
        self.kind = kind
        if kind == .sha256 { SHA256_Init(&sha) }
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        switch kind {
        case .none: break
        case .crc32:
            var value = UInt32(crc)
            var rest = bytes
            while !rest.isEmpty {  // zlib's length is 32 bits
                let n = min(rest.count, 1 << 30)
                value = UInt32(CZlib.crc32(UInt(value), rest.baseAddress!.assumingMemoryBound(to: Bytef.self), UInt32(n)))
                rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            }
            crc = UInt64(value)
        case .crc64:
            // ISA-L's folding CRC-64 (the same ECMA-182 reflected CRC as xz's): several times
            // faster than the table-driven cxz_crc64, which was 3.6% of a decode's time.
            crc = crc64_ecma_refl(crc, base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
        case .sha256:
            SHA256_Update(&sha, base, bytes.count)
            length &+= UInt64(bytes.count)
        }
    }

    /// The check field as the stream stores it.
    func finalBytes() -> [UInt8] {
        switch kind {
        case .none: return []
        case .crc32: return (0..<4).map { UInt8(truncatingIfNeeded: crc >> (8 * $0)) }
        case .crc64: return (0..<8).map { UInt8(truncatingIfNeeded: crc >> (8 * $0)) }
        case .sha256:
            var copy = sha
            var digest = [UInt8](repeating: 0, count: 32)
            SHA256_Final(&digest, &copy)
            return digest
        }
    }

    var name: String {
        switch kind {
        case .none: "None"
        case .crc32: "CRC32"
        case .crc64: "CRC64"
        case .sha256: "SHA-256"
        }
    }

    func snapshot() -> XzCheckState {
        switch kind {
        case .sha256: XzCheckState(kind: kind, crc: 0, sha256: SHA256State(context: sha, bytesHashed: length))
        default: XzCheckState(kind: kind, crc: crc, sha256: nil)
        }
    }

    init(restoring state: XzCheckState, kind expected: Kind) throws {
        guard state.kind == expected else { throw XzStateError("the check kind differs from the stream's") }
        self.init(expected)
        switch expected {
        case .none: guard state.crc == 0 else { throw XzStateError("a None check holds a value") }
        case .crc32:
            guard state.crc <= UInt32.max else { throw XzStateError("the CRC32 is out of range") }
            crc = state.crc
        case .crc64: crc = state.crc
        case .sha256:
            guard let saved = state.sha256, let context = SHA256_CTX(restoring: saved) else {
                throw XzStateError("the SHA-256 midstate is missing or malformed")
            }
            sha = context
            length = saved.bytesHashed
        }
    }
}

/// A check's running value in a checkpoint.
public struct XzCheckState: Codable, Sendable, Equatable {
    var kind: XzCheck.Kind
    var crc: UInt64
    var sha256: SHA256State?
}
