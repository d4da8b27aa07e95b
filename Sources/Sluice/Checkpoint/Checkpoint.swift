import CCrypto
import Foundation

/// One consistent cut of a run, as stored on disk (JSON).
public struct Checkpoint: Codable, Sendable, Equatable {
    /// Bumped whenever the meaning of a field changes; other versions are refused.
    /// 2: snake_case keys, as in `inspect --json` and the progress events; stage states by registry.
    public static let currentVersion = 2
    public static let formatName = "sluice-checkpoint"

    public var format: String = Checkpoint.formatName
    public var version: Int = Checkpoint.currentVersion
    /// The canonical spec of the run that wrote it; a resume must match it exactly.
    public var spec: String
    public var writtenAt: Date
    public var source: SourceState
    /// The state of every stage after the source, in pipeline order.
    public var stages: [StageState]
    /// `hmac-sha256:HEX` of the checkpoint's JSON without this field, under the user's
    /// `CheckpointKey`: a checkpoint someone else wrote or changed is not trusted.
    public var mac: String?

    public init(spec: String, writtenAt: Date = Date(), source: SourceState, stages: [StageState]) {
        self.spec = spec
        self.writtenAt = writtenAt
        self.source = source
        self.stages = stages
    }

    static let macScheme = "hmac-sha256:"

    /// The JSON to store, sealed with `key`.
    func encoded(key: CheckpointKey) throws -> Data {
        var sealed = self
        sealed.mac = Self.macScheme + hex(key.mac(try unsealedBytes()))
        return try Self.encoder.encode(sealed)
    }

    /// The encoding the MAC covers: everything but the MAC.
    private func unsealedBytes() throws -> [UInt8] {
        var unsealed = self
        unsealed.mac = nil
        return [UInt8](try Self.encoder.encode(unsealed))
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }

    /// Decodes a checkpoint, refusing other formats and versions before reading the rest,
    /// then checks its MAC with `key` (nil: this user has no key yet). An unauthenticated
    /// one throws `CheckpointDistrust`; nothing in it has been acted on.
    static func decode(_ data: Data, path: String, key: CheckpointKey?) throws -> Checkpoint {
        struct Header: Decodable {
            var format: String?
            var version: Int?
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        guard let header = try? decoder.decode(Header.self, from: data), header.format == formatName else {
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
        let checkpoint: Checkpoint
        do {
            checkpoint = try decoder.decode(Checkpoint.self, from: data)
        } catch {
            throw SluiceError.checkpointRefused(path: path, reason: "it is damaged (\(Self.describe(error)))")
        }
        try checkpoint.authenticate(with: key, path: path)
        return checkpoint
    }

    private func authenticate(with key: CheckpointKey?, path: String) throws {
        guard let key else {
            throw CheckpointDistrust(
                path: path,
                reason:
                    "there is no checkpoint key to check it with (\(CheckpointKey.directory())/key is missing: another machine or user wrote it, or the key was removed)"
            )
        }
        // Compared in constant time, so the comparison does not leak how much matched.
        guard let stored = mac.map({ Array($0.utf8) }), let unsealed = try? unsealedBytes(),
            case let expected = Array((Self.macScheme + hex(key.mac(unsealed))).utf8),
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
                return "\(state.stageName) took in \(taken) bytes but \(previous) passed on \(passedOn)"
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
