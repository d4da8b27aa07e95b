/// One stage as written in a spec: its word, its arguments and its `name=value` options,
/// each already checked by the stage's grammar (see `StageKind`).
public struct StageSpec: Equatable, Sendable {
    public let name: String
    public let arguments: [String]
    /// Options as given, by name; printed back sorted by name.
    public let options: [String: String]
    /// Source, transform or sink; nil until the spec is checked against the registry.
    public let role: StageKind.Role?

    /// Builds a stage value from outside the parser; checked when the pipeline spec is built.
    public init(_ name: String, _ arguments: [String] = [], options: [String: String] = [:]) {
        self.init(name, arguments, options: options, role: nil)
    }

    init(_ name: String, _ arguments: [String], options: [String: String], role: StageKind.Role?) {
        self.name = name
        self.arguments = arguments
        self.options = options
        self.role = role
    }

    /// The registry's descriptor for this stage's word.
    public var kind: StageKind? { StageRegistry.kind(named: name) }

    public static func == (lhs: StageSpec, rhs: StageSpec) -> Bool {
        lhs.name == rhs.name && lhs.arguments == rhs.arguments && lhs.options == rhs.options
    }

    /// The first argument (URL, path, `sha256:HEX`…), if the stage takes one.
    public var argument: String? { arguments.first }

    /// The option's value, or nil when it was not given.
    public func option(_ name: String) -> String? { options[name] }

    /// The canonical words: name, arguments, options sorted by name.
    var words: [String] {
        [name] + arguments + options.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
    }
}

extension StageSpec {
    // The built-in stages, for library users building a spec from values.
    public static func fetch(url: String) -> StageSpec { StageSpec("fetch", [url]) }
    public static func read(path: String) -> StageSpec { StageSpec("read", [path]) }
    public static let stdin = StageSpec("stdin")
    /// `hex`: 64 hex digits (the parser lowercases them; so does the verifier).
    public static func verify(sha256 hex: String) -> StageSpec { StageSpec("verify", ["sha256:" + hex.lowercased()]) }
    public static let gunzip = StageSpec("gunzip")
    public static func file(path: String) -> StageSpec { StageSpec("file", [path]) }
    public static let stdout = StageSpec("stdout")
}
