/// Where a source stood at a cut, and how to tell whether the remote changed since.
public struct SourceState: Codable, Sendable, Equatable {
    /// The source stage's word: `fetch`, `read` or `stdin`.
    public var kind: String
    /// URL or path as given in the spec.
    public var location: String
    /// Bytes of the source already delivered downstream.
    public var offset: UInt64
    /// Validators as first seen; a resume checks them.
    public var etag: String?
    public var lastModified: String?
    public var totalLength: UInt64?

    public init(kind: String, location: String, offset: UInt64 = 0,
                etag: String? = nil, lastModified: String? = nil, totalLength: UInt64? = nil) {
        self.kind = kind
        self.location = location
        self.offset = offset
        self.etag = etag
        self.lastModified = lastModified
        self.totalLength = totalLength
    }
}

/// A transform's or sink's exact state at a cut, tagged with the stage it belongs to.
public enum StageState: Sendable, Equatable {
    case verify(SHA256State)
    case gunzip(GzipState)
    case file(FileSinkState)
    case stdout(StdoutSinkState)

    /// Bytes the stage had taken in and passed on at the cut.
    public var position: (input: UInt64, output: UInt64) {
        switch self {
        case .verify(let s): return (s.bytesHashed, s.bytesHashed)
        case .gunzip(let s): return (s.compressedOffset, s.outputOffset)
        case .file(let s): return (s.bytesWritten, s.bytesWritten)
        case .stdout(let s): return (s.bytesWritten, s.bytesWritten)
        }
    }

    /// The stage word this state belongs to.
    public var stageName: String {
        switch self {
        case .verify: return "verify"
        case .gunzip: return "gunzip"
        case .file: return "file"
        case .stdout: return "stdout"
        }
    }
}

extension StageState: Codable {
    private enum Key: String, CodingKey { case stage, state }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        switch try c.decode(String.self, forKey: .stage) {
        case "verify": self = .verify(try c.decode(SHA256State.self, forKey: .state))
        case "gunzip": self = .gunzip(try c.decode(GzipState.self, forKey: .state))
        case "file": self = .file(try c.decode(FileSinkState.self, forKey: .state))
        case "stdout": self = .stdout(try c.decode(StdoutSinkState.self, forKey: .state))
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .stage, in: c, debugDescription: "unknown stage '\(other)'")
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(stageName, forKey: .stage)
        switch self {
        case .verify(let s): try c.encode(s, forKey: .state)
        case .gunzip(let s): try c.encode(s, forKey: .state)
        case .file(let s): try c.encode(s, forKey: .state)
        case .stdout(let s): try c.encode(s, forKey: .state)
        }
    }
}
