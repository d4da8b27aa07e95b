import Foundation

/// One consistent cut of a run, as stored on disk (JSON).
public struct Checkpoint: Codable, Sendable, Equatable {
    /// Bumped whenever the meaning of a field changes; other versions are refused.
    public static let currentVersion = 1
    public static let formatName = "sluice-checkpoint"

    public var format: String = Checkpoint.formatName
    public var version: Int = Checkpoint.currentVersion
    /// The canonical spec of the run that wrote it; a resume must match it exactly.
    public var spec: String
    public var writtenAt: Date
    public var source: SourceState
    /// The state of every stage after the source, in pipeline order.
    public var stages: [StageState]

    public init(spec: String, writtenAt: Date = Date(), source: SourceState, stages: [StageState]) {
        self.spec = spec
        self.writtenAt = writtenAt
        self.source = source
        self.stages = stages
    }

    func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(self)
    }

    /// Decodes a checkpoint, refusing other formats and versions before reading the rest.
    static func decode(_ data: Data, path: String) throws -> Checkpoint {
        struct Header: Decodable { var format: String?; var version: Int? }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        guard let header = try? decoder.decode(Header.self, from: data), header.format == formatName else {
            throw SluiceError.checkpointRefused(path: path, reason: "it is not a sluice checkpoint (it does not parse)")
        }
        guard header.version == currentVersion else {
            throw SluiceError.checkpointRefused(
                path: path,
                reason: "it has format version \(header.version.map(String.init) ?? "?"), this sluice reads version \(currentVersion)")
        }
        do {
            return try decoder.decode(Checkpoint.self, from: data)
        } catch {
            throw SluiceError.checkpointRefused(path: path, reason: "it is damaged (\(Self.describe(error)))")
        }
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
