#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// A large byte field of a stage state — a decoder's dictionary window — stored raw in the
/// checkpoint's binary appendix instead of as base64 inside its JSON: `@CheckpointBlob var
/// window: Data`. The JSON holds `{"offset": O, "length": L}` into the appendix.
///
/// Outside a checkpoint (an encoder or decoder without an appendix in its `userInfo`) the
/// bytes are plain base64, like any `Data`.
@propertyWrapper
public struct CheckpointBlob: Codable, Sendable, Equatable {
    public var wrappedValue: Data

    public init(wrappedValue: Data) {
        self.wrappedValue = wrappedValue
    }

    public func encode(to encoder: Encoder) throws {
        guard let collector = encoder.userInfo[.checkpointBlobs] as? CheckpointBlobCollector else {
            var container = encoder.singleValueContainer()
            try container.encode(wrappedValue)
            return
        }
        try collector.add(wrappedValue).encode(to: encoder)
    }

    public init(from decoder: Decoder) throws {
        guard let appendix = decoder.userInfo[.checkpointBlobs] as? CheckpointAppendix else {
            wrappedValue = try decoder.singleValueContainer().decode(Data.self)
            return
        }
        let reference = try CheckpointBlobReference(from: decoder)
        guard let bytes = appendix.bytes(at: reference) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: decoder.codingPath,
                    debugDescription:
                        "it refers to \(reference.length) bytes at offset \(reference.offset) of the appendix, which holds \(appendix.count)"
                ))
        }
        wrappedValue = bytes
    }
}

/// Where a blob lies in the appendix. Unsigned, so a negative number does not decode.
struct CheckpointBlobReference: Codable, Equatable {
    var offset: UInt64
    var length: UInt64
}

extension CodingUserInfoKey {
    /// A `CheckpointBlobCollector` (encoding) or a `CheckpointAppendix` (decoding).
    static let checkpointBlobs = CodingUserInfoKey(rawValue: "sluice.checkpointBlobs")!
}

/// Gathers the blobs of one encoding, in order, without copying them: the appendix is
/// their concatenation, written and hashed piece by piece.
final class CheckpointBlobCollector: @unchecked Sendable {
    // Used by one encoding on one thread.
    private(set) var blobs: [Data] = []
    private(set) var length: UInt64 = 0

    func add(_ bytes: Data) -> CheckpointBlobReference {
        let reference = CheckpointBlobReference(offset: length, length: UInt64(bytes.count))
        blobs.append(bytes)
        length += UInt64(bytes.count)
        return reference
    }
}

/// The appendix of a checkpoint being read: hands out the bytes a reference names, after
/// checking the range lies inside it (the file is untrusted until its MAC is checked).
struct CheckpointAppendix: Sendable {
    private let bytes: Data

    init(_ bytes: Data) {
        self.bytes = bytes
    }

    var count: Int { bytes.count }

    func bytes(at reference: CheckpointBlobReference) -> Data? {
        guard reference.offset <= UInt64(bytes.count), reference.length <= UInt64(bytes.count) - reference.offset else { return nil }
        let start = bytes.startIndex + Int(reference.offset)
        return Data(bytes[start..<(start + Int(reference.length))])
    }
}
