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
///
/// A stage taking a cut may put the bytes in the cut's `CheckpointSpill` instead of in
/// memory (`$window = CheckpointBlob(joining:spill:)`); they are stored exactly the same.
/// A decoded checkpoint's blobs are always in memory.
@propertyWrapper
public struct CheckpointBlob: Codable, Sendable, Equatable {
    var bytes: CheckpointBytes

    /// The bytes; a spilled blob is read back (tests and comparisons: a run only encodes
    /// a cut's blobs, and only decoded ones are restored from).
    public var wrappedValue: Data {
        get { (try? bytes.loaded()) ?? Data() }
        set { bytes = .memory(newValue) }
    }

    /// The blob itself, so a stage can set a spilled one: `state.$window = blob`.
    public var projectedValue: CheckpointBlob {
        get { self }
        set { self = newValue }
    }

    public init(wrappedValue: Data) {
        bytes = .memory(wrappedValue)
    }

    private static func joined(_ pieces: [UnsafeRawBufferPointer]) -> Data {
        var data = Data(capacity: pieces.reduce(0) { $0 + $1.count })
        for piece in pieces { data.append(contentsOf: piece) }
        return data
    }

    /// `pieces` joined, written to `spill` when there is one and they are large; copied
    /// into memory otherwise. A failed write leaves the blob empty and the failure in
    /// `spill.failure`, which the stage's barrier throws.
    init(joining pieces: [UnsafeRawBufferPointer], spill: CheckpointSpill?) {
        let count = pieces.reduce(0) { $0 + $1.count }
        guard let spill, count >= CheckpointSpill.threshold else {
            bytes = .memory(Self.joined(pieces))
            return
        }
        if let spilled = spill.append(pieces) {
            bytes = .spilled(spilled)
        } else if spill.failure != nil {
            bytes = .memory(Data())
        } else {
            bytes = .memory(Self.joined(pieces))
        }
    }

    public func encode(to encoder: Encoder) throws {
        guard let collector = encoder.userInfo[.checkpointBlobs] as? CheckpointBlobCollector else {
            var container = encoder.singleValueContainer()
            try container.encode(try bytes.loaded())
            return
        }
        try collector.add(bytes).encode(to: encoder)
    }

    public init(from decoder: Decoder) throws {
        guard let appendix = decoder.userInfo[.checkpointBlobs] as? CheckpointAppendix else {
            bytes = .memory(try decoder.singleValueContainer().decode(Data.self))
            return
        }
        let reference = try CheckpointBlobReference(from: decoder)
        guard let found = appendix.bytes(at: reference) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: decoder.codingPath,
                    debugDescription:
                        "it refers to \(Counted.bytes(reference.length)) at offset \(reference.offset) of the appendix, which holds \(appendix.count)"
                ))
        }
        bytes = .memory(found)
    }
}

/// Where a blob's bytes are: in memory, or in a cut's spill file.
enum CheckpointBytes: Sendable, Equatable {
    case memory(Data)
    case spilled(SpilledBytes)

    var count: Int {
        switch self {
        case .memory(let data): return data.count
        case .spilled(let spilled): return spilled.count
        }
    }

    func loaded() throws -> Data {
        switch self {
        case .memory(let data): return data
        case .spilled(let spilled): return try spilled.loaded()
        }
    }

    /// Passes the bytes to `body` in order, in pieces of at most `SpilledBytes.chunk` when spilled.
    func forEachChunk(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        switch self {
        case .memory(let data): try data.withUnsafeBytes(body)
        case .spilled(let spilled): try spilled.forEachChunk(body)
        }
    }

    /// Appends the bytes to the file `fd` (named `path` in errors) at its position.
    func write(to fd: Int32, path: String) throws {
        switch self {
        case .memory(let data): try data.withUnsafeBytes { try POSIX.writeAll(fd, $0, path: path) }
        case .spilled(let spilled): try spilled.copy(to: fd, path: path)
        }
    }

    /// Equal bytes, wherever they are.
    static func == (lhs: CheckpointBytes, rhs: CheckpointBytes) -> Bool {
        if case .memory(let a) = lhs, case .memory(let b) = rhs { return a == b }
        guard lhs.count == rhs.count, let a = try? lhs.loaded(), let b = try? rhs.loaded() else { return false }
        return a == b
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
    private(set) var blobs: [CheckpointBytes] = []
    private(set) var length: UInt64 = 0

    func add(_ bytes: CheckpointBytes) -> CheckpointBlobReference {
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
