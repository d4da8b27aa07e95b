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
    /// `fetch`: true when Last-Modified was a strong validator (at least a second older than
    /// the response's Date, RFC 9110 §8.8.2.2), so it may go into If-Range. Absent: not known.
    public var lastModifiedIsStrong: Bool?

    public init(
        kind: String, location: String, offset: UInt64 = 0,
        etag: String? = nil, lastModified: String? = nil, totalLength: UInt64? = nil,
        lastModifiedIsStrong: Bool? = nil
    ) {
        self.kind = kind
        self.location = location
        self.offset = offset
        self.etag = etag
        self.lastModified = lastModified
        self.totalLength = totalLength
        self.lastModifiedIsStrong = lastModifiedIsStrong
    }
}

/// Bytes a stage had taken in and passed on at a cut. Consecutive stages must agree:
/// what one passed on is what the next took in.
public struct StagePosition: Sendable, Equatable {
    public var input: UInt64
    public var output: UInt64

    public init(input: UInt64, output: UInt64) {
        self.input = input
        self.output = output
    }
}

/// A transform's or sink's exact state at a cut: a plain value the checkpoint stores
/// under the stage's word, and from which the stage is rebuilt on resume.
///
/// A restored value is untrusted input (a checkpoint is a file anyone with access can
/// edit): the stage that restores it checks every field before using it.
public protocol StageStateValue: Codable, Sendable, Equatable {
    /// The stage word this state belongs to, e.g. `gunzip`.
    static var stage: String { get }
    /// Bytes taken in and passed on at the cut.
    var position: StagePosition { get }
    /// Why a rerun could not continue from this state given what is on disk now (for
    /// `sluice inspect`), or nil when nothing speaks against it.
    func resumeProblem() -> String?
}

extension StageStateValue {
    public func resumeProblem() -> String? { nil }

    fileprivate func isEqual(to other: any StageStateValue) -> Bool {
        (other as? Self) == self
    }
}

/// One stage's state at a cut, whatever the stage: the word it belongs to and its value.
/// Encoded as `{"stage": WORD, "state": {…}}`; the registry knows each word's type.
public struct StageState: Sendable, Equatable {
    public let value: any StageStateValue

    public init(_ value: some StageStateValue) {
        self.value = value
    }

    /// The stage word this state belongs to.
    public var stageName: String { type(of: value).stage }

    /// Bytes the stage had taken in and passed on at the cut.
    public var position: StagePosition { value.position }

    /// The value as a given stage's state type, or nil when it belongs to another stage.
    public func `as`<State: StageStateValue>(_: State.Type) -> State? {
        value as? State
    }

    public static func == (lhs: StageState, rhs: StageState) -> Bool {
        lhs.value.isEqual(to: rhs.value)
    }
}

extension StageState: Codable {
    private enum Key: String, CodingKey { case stage, state }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        let word = try c.decode(String.self, forKey: .stage)
        guard let type = StageRegistry.kind(named: word)?.stateType else {
            throw DecodingError.dataCorruptedError(forKey: .stage, in: c, debugDescription: "unknown stage '\(word)'")
        }
        value = try Self.decode(type, from: c)
    }

    private static func decode<State: StageStateValue>(_: State.Type, from c: KeyedDecodingContainer<Key>) throws -> State {
        try c.decode(State.self, forKey: .state)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(stageName, forKey: .stage)
        try c.encode(value, forKey: .state)
    }
}
