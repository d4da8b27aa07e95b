/// One stage as written in a spec.
public enum StageSpec: Equatable, Sendable {
    /// `connections`: the stage option `connections=N`; nil leaves it to `--connections` or the
    /// default rule. A transport choice, not part of the canonical text (a checkpoint resumes
    /// with any count).
    case fetch(url: String, connections: Int? = nil)
    case read(path: String)
    case stdin
    case verify(sha256: String)
    case gunzip
    case file(path: String)
    case stdout

    public enum Role: Sendable { case source, transform, sink }

    public var role: Role {
        switch self {
        case .fetch, .read, .stdin: return .source
        case .verify, .gunzip: return .transform
        case .file, .stdout: return .sink
        }
    }

    public var name: String {
        switch self {
        case .fetch: return "fetch"
        case .read: return "read"
        case .stdin: return "stdin"
        case .verify: return "verify"
        case .gunzip: return "gunzip"
        case .file: return "file"
        case .stdout: return "stdout"
        }
    }

    /// The stage's argument as written (URL, path, `sha256:HEX`), if it has one.
    public var argument: String? {
        switch self {
        case .fetch(let url, _): return url
        case .read(let path), .file(let path): return path
        case .verify(let hex): return "sha256:" + hex
        case .stdin, .gunzip, .stdout: return nil
        }
    }

    static let names = ["fetch", "read", "stdin", "verify", "gunzip", "file", "stdout"]
}

/// A pipeline spec: `SOURCE | TRANSFORM… | SINK`, parsed from text and printed back in
/// one canonical form (which is what a checkpoint records and compares).
public struct PipelineSpec: Equatable, Sendable, CustomStringConvertible {
    public let stages: [StageSpec]

    /// Builds a spec from stage values, checking the same rules as the parser.
    public init(stages: [StageSpec]) throws(SpecError) {
        try Self.checkOrder(stages.map { ($0, SpecToken(text: $0.name, line: 1, column: 1)) }, endOfText: SpecToken(text: "", line: 1, column: 1))
        self.stages = stages
    }

    /// Parses spec text: stages separated by `|`, words by blanks or newlines, `'…'` or
    /// `"…"` quote a word, `#` at the start of a word comments out the rest of the line.
    public init(parsing text: String) throws(SpecError) {
        let tokens = try SpecLexer.tokens(of: text)
        var parsed: [(StageSpec, SpecToken)] = []
        var words: [SpecToken] = []
        func flush(at separator: SpecToken) throws(SpecError) {
            guard let first = words.first else {
                throw SpecError(parsed.isEmpty ? "a stage is missing before '|'" : "a stage is missing between '|' and '|'", at: separator)
            }
            parsed.append((try Self.stage(from: words), first))
            words = []
        }
        for token in tokens {
            if token.isSeparator { try flush(at: token) } else { words.append(token) }
        }
        let end = SpecLexer.endToken(of: text)
        guard !(tokens.isEmpty) else { throw SpecError("the pipeline spec is empty; expected e.g. 'read in.gz | gunzip | file out'", at: end) }
        if words.isEmpty { throw SpecError("a stage is missing after the last '|'", at: end) }
        try flush(at: end)
        try Self.checkOrder(parsed, endOfText: end)
        stages = parsed.map(\.0)
    }

    public var source: StageSpec { stages[0] }
    public var sink: StageSpec { stages[stages.count - 1] }
    public var transforms: ArraySlice<StageSpec> { stages.dropFirst().dropLast() }

    /// The canonical text, e.g. `read 'a b.gz' | gunzip | stdout`.
    public var description: String {
        stages.map { stage in
            guard let arg = stage.argument else { return stage.name }
            return stage.name + " " + SpecLexer.quoteIfNeeded(arg)
        }.joined(separator: " | ")
    }

    private static func stage(from words: [SpecToken]) throws(SpecError) -> StageSpec {
        let head = words[0]
        let args = words.dropFirst()
        func one(_ what: String) throws(SpecError) -> SpecToken {
            guard let arg = args.first else { throw SpecError("'\(head.text)' needs \(what)", at: head) }
            if args.count > 1 { throw SpecError("'\(head.text)' takes one argument; unexpected '\(args[args.startIndex + 1].text)'", at: args[args.startIndex + 1]) }
            return arg
        }
        func none() throws(SpecError) {
            if let extra = args.first { throw SpecError("'\(head.text)' takes no argument; unexpected '\(extra.text)'", at: extra) }
        }
        switch head.text {
        case "fetch":
            guard let url = args.first else { throw SpecError("'fetch' needs a URL (http://, https:// or file://)", at: head) }
            try URLCheck.validate(url)
            return .fetch(url: url.text, connections: try FetchStageOptions.connections(from: args.dropFirst()))
        case "read":
            return .read(path: try path(one("a file path")))
        case "stdin":
            try none()
            return .stdin
        case "verify":
            let arg = try one("a digest, sha256:HEX")
            return .verify(sha256: try digest(arg))
        case "gunzip":
            try none()
            return .gunzip
        case "file":
            return .file(path: try path(one("a file path")))
        case "stdout":
            try none()
            return .stdout
        default:
            throw SpecError("unknown stage '\(head.text)' (stages are: \(StageSpec.names.joined(separator: ", ")))", at: head)
        }
    }

    private static func path(_ token: SpecToken) throws(SpecError) -> String {
        guard !token.text.isEmpty else { throw SpecError("an empty path", at: token) }
        guard !token.text.contains("\0") else { throw SpecError("a path cannot contain a NUL byte", at: token) }
        return token.text
    }

    private static func digest(_ token: SpecToken) throws(SpecError) -> String {
        let text = token.text
        guard text.lowercased().hasPrefix("sha256:") else {
            throw SpecError("'\(text)' is not a digest; expected sha256:HEX (64 hex digits)", at: token)
        }
        let hexDigits = String(text.dropFirst("sha256:".count))
        guard hexDigits.count == 64, hexDigits.allSatisfy(\.isHexDigit) else {
            throw SpecError("'\(text)' is not a SHA-256 digest: expected 64 hex digits, got \(hexDigits.count) characters\(hexDigits.allSatisfy(\.isHexDigit) ? "" : " with non-hex ones")", at: token)
        }
        return hexDigits.lowercased()
    }

    private static func checkOrder(_ stages: [(StageSpec, SpecToken)], endOfText: SpecToken) throws(SpecError) {
        guard let (first, firstToken) = stages.first else {
            throw SpecError("the pipeline spec is empty", at: endOfText)
        }
        guard first.role == .source else {
            throw SpecError("a pipeline starts with a source (fetch, read or stdin), not '\(first.name)'", at: firstToken)
        }
        for (stage, token) in stages.dropFirst() where stage.role == .source {
            throw SpecError("only one source is allowed; '\(stage.name)' is a second one", at: token)
        }
        for (stage, token) in stages.dropLast() where stage.role == .sink {
            throw SpecError("the sink '\(stage.name)' must be the last stage", at: token)
        }
        guard let (last, _) = stages.last, last.role == .sink else {
            throw SpecError("a pipeline ends with a sink (file PATH or stdout)", at: endOfText)
        }
    }
}
