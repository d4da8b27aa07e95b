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
    /// SHA-256 of the checkpoint's JSON without this field: a damaged or edited checkpoint
    /// is refused instead of being fed to an inflater.
    public var digest: String?

    public init(spec: String, writtenAt: Date = Date(), source: SourceState, stages: [StageState]) {
        self.spec = spec
        self.writtenAt = writtenAt
        self.source = source
        self.stages = stages
    }

    func encoded() throws -> Data {
        var sealed = self
        sealed.digest = try Self.digest(of: self)
        return try Self.encoder.encode(sealed)
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }

    /// The digest of `checkpoint` encoded without its digest field.
    private static func digest(of checkpoint: Checkpoint) throws -> String {
        var unsealed = checkpoint
        unsealed.digest = nil
        let bytes = [UInt8](try encoder.encode(unsealed))
        var digest = [UInt8](repeating: 0, count: 32)
        _ = SHA256(bytes, bytes.count, &digest)
        return hex(digest)
    }

    /// Decodes a checkpoint, refusing other formats and versions before reading the rest.
    static func decode(_ data: Data, path: String) throws -> Checkpoint {
        struct Header: Decodable { var format: String?; var version: Int? }
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
        guard let stored = checkpoint.digest, stored == (try? digest(of: checkpoint)) else {
            throw SluiceError.checkpointRefused(path: path, reason: "it is damaged or was edited (its digest does not match its content)")
        }
        return checkpoint
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
