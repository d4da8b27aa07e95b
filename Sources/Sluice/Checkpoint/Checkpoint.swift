import CCrypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// One consistent cut of a run, as stored on disk: a line of JSON, then a binary appendix
/// holding the states' large byte fields (`CheckpointBlob`) back to back.
public struct Checkpoint: Codable, Sendable, Equatable {
    /// Bumped whenever the meaning of a field changes; other versions are refused.
    /// 2: snake_case keys, as in `inspect --json` and the progress events; stage states by registry.
    /// 3: the JSON is followed by a newline and the binary appendix of blobs.
    public static let currentVersion = 3
    public static let formatName = "sluice-checkpoint"

    public var format: String = Checkpoint.formatName
    public var version: Int = Checkpoint.currentVersion
    /// The canonical spec of the run that wrote it; a resume must match it exactly.
    public var spec: String
    public var writtenAt: Date
    public var source: SourceState
    /// The state of every stage after the source, in pipeline order.
    public var stages: [StageState]
    /// `hmac-sha256:HEX`, under the user's `CheckpointKey`, of the checkpoint's JSON without
    /// this field, a newline and the appendix: a checkpoint someone else wrote or changed is
    /// not trusted.
    public var mac: String?

    public init(spec: String, writtenAt: Date = Date(), source: SourceState, stages: [StageState]) {
        self.spec = spec
        self.writtenAt = writtenAt
        self.source = source
        self.stages = stages
    }

    static let macScheme = "hmac-sha256:"

    /// The whole file to store, sealed with `key`.
    func encoded(key: CheckpointKey) throws -> Data {
        try sealed(key: key).bytes
    }

    /// The file to store, sealed with `key`, as its parts (the blobs are not copied).
    func sealed(key: CheckpointKey) throws -> CheckpointFile {
        let unsealed = try unsealedParts()
        let mac = Self.macScheme + hex(try key.mac(parts: [.memory(unsealed.json), .memory(CheckpointFile.separator)] + unsealed.blobs))
        // The MAC goes in front rather than through a second encoding, which would cost as
        // much again: key order means nothing to a reader, and the check re-encodes anyway.
        guard unsealed.json.first == UInt8(ascii: "{"), unsealed.json.count > 2 else {
            throw SluiceError.io(path: "", operation: "encode checkpoint", errno: EINVAL)
        }
        var json = Data("{\"mac\":\"\(mac)\",".utf8)
        json.append(unsealed.json.dropFirst())
        return CheckpointFile(json: json, blobs: unsealed.blobs)
    }

    /// The encoding the MAC covers: everything but the MAC, and the blobs in order.
    private func unsealedParts() throws -> (json: Data, blobs: [CheckpointBytes]) {
        var unsealed = self
        unsealed.mac = nil
        let collector = CheckpointBlobCollector()
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys]
        encoder.userInfo[.checkpointBlobs] = collector
        let json = try encoder.encode(unsealed)
        return (json, collector.blobs)
    }

    /// Decodes a checkpoint, refusing other formats and versions before reading the rest,
    /// then checks its MAC with `key` (nil: this user has no key yet). An unauthenticated
    /// one throws `CheckpointDistrust`; nothing in it has been acted on.
    static func decode(_ data: Data, path: String, key: CheckpointKey?) throws -> Checkpoint {
        struct Header: Decodable {
            var format: String?
            var version: Int?
        }
        let (json, appendix) = CheckpointFile.split(data)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        guard let header = try? decoder.decode(Header.self, from: json), header.format == formatName else {
            throw SluiceError.checkpointRefused(path: path, reason: "it is not a sluice checkpoint (it does not parse)")
        }
        if let version = header.version, version < currentVersion {
            throw SluiceError.checkpointRefused(
                path: path,
                reason: "it was written by an older sluice (format version \(version); this one reads \(currentVersion)), so its states cannot be read")
        }
        guard header.version == currentVersion else {
            throw SluiceError.checkpointRefused(
                path: path,
                reason: "it has format version \(header.version.map(String.init) ?? "?"), this sluice reads version \(currentVersion)")
        }
        guard let appendix else {
            throw SluiceError.checkpointRefused(path: path, reason: "it is damaged (it ends inside its JSON, before the appendix)")
        }
        decoder.userInfo[.checkpointBlobs] = CheckpointAppendix(appendix)
        let checkpoint: Checkpoint
        do {
            checkpoint = try decoder.decode(Checkpoint.self, from: json)
        } catch {
            // Not yet authenticated: what the decoder quotes from the file (a value it could not
            // use) is escaped, so a planted file cannot put control sequences on the terminal.
            throw SluiceError.checkpointRefused(path: path, reason: "it is damaged (\(DisplayText.escaped(Self.describe(error))))")
        }
        try checkpoint.authenticate(with: key, path: path, appendixCount: appendix.count)
        return checkpoint
    }

    /// Checks the MAC over the values as decoded, encoded again: what a blob reference names
    /// is part of what is authenticated, so references moved around in the JSON do not match.
    private func authenticate(with key: CheckpointKey?, path: String, appendixCount: Int) throws {
        guard let key else {
            throw CheckpointDistrust(
                path: path,
                reason:
                    "there is no checkpoint key to check it with (\(CheckpointKey.directory())/key is missing: another machine or user wrote it, or the key was removed)"
            )
        }
        // Compared in constant time, so the comparison does not leak how much matched.
        guard let unsealed = try? unsealedParts(), unsealed.blobs.reduce(0, { $0 + $1.count }) == appendixCount else {
            throw CheckpointDistrust(path: path, reason: "its appendix holds bytes its states do not name (it was changed or damaged)")
        }
        guard let stored = mac.map({ Array($0.utf8) }),
            let computed = try? key.mac(parts: [.memory(unsealed.json), .memory(CheckpointFile.separator)] + unsealed.blobs),
            case let expected = Array((Self.macScheme + hex(computed)).utf8),
            stored.count == expected.count, CRYPTO_memcmp(stored, expected, expected.count) == 0
        else {
            throw CheckpointDistrust(path: path, reason: "its authentication code does not match (it was changed, damaged, or written with another key)")
        }
    }

    /// Whether the stages' positions fit together: each stage took in exactly what the
    /// one before it passed on. Returns what does not fit, or nil.
    var inconsistency: String? {
        var passedOn = source.offset
        var previous = source.kind
        for state in stages {
            let taken = state.position.input, output = state.position.output
            if taken != passedOn {
                return "\(state.stageName) took in \(Counted.bytes(taken)) but \(previous) passed on \(passedOn)"
            }
            passedOn = output
            previous = state.stageName
        }
        return nil
    }

    private static func describe(_ error: Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): return "field '\(key.stringValue)' is missing"
        case DecodingError.typeMismatch(_, let ctx), DecodingError.valueNotFound(_, let ctx), DecodingError.dataCorrupted(let ctx):
            let path = ctx.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? ctx.debugDescription : "field '\(path)': \(ctx.debugDescription)"
        default: return "\(error)"
        }
    }
}

/// A checkpoint file's layout: the sealed JSON (one line: the encoder escapes every newline
/// inside strings), a newline, then the appendix — the blobs back to back.
struct CheckpointFile {
    static let separator = Data([0x0A])

    var json: Data
    /// In memory, or in the cut's spill file (`CheckpointSpill`).
    var blobs: [CheckpointBytes]

    /// The whole file, joined (tests; the store writes the parts).
    var bytes: Data {
        get throws {
            var data = json
            data.append(Self.separator)
            for blob in blobs { data.append(try blob.loaded()) }
            return data
        }
    }

    /// Bytes in the appendix.
    var appendixCount: UInt64 { blobs.reduce(0) { $0 + UInt64($1.count) } }

    /// The JSON part and the appendix (nil when there is no newline: a file cut short, or
    /// one from before the appendix).
    static func split(_ data: Data) -> (json: Data, appendix: Data?) {
        // memchr: this scans whatever is at the checkpoint path, up to 512 MiB.
        let offset = data.withUnsafeBytes { raw -> Int? in
            guard let base = raw.baseAddress, let found = memchr(base, 0x0A, raw.count) else { return nil }
            return UnsafeRawPointer(found) - base
        }
        guard let offset else { return (data, nil) }
        let newline = data.startIndex + offset
        return (data[data.startIndex..<newline], data[(newline + 1)...])
    }
}
