/// A pipeline spec: `SOURCE | TRANSFORM… | SINK`, parsed from text and printed back in
/// one canonical form (which is what a checkpoint records and compares).
///
/// The words each stage takes come from its `StageKind` in `StageRegistry`.
public struct PipelineSpec: Equatable, Sendable, CustomStringConvertible {
    public let stages: [StageSpec]

    /// Builds a spec from stage values, checking the same rules as the parser.
    public init(stages: [StageSpec]) throws(SpecError) {
        var checked: [(StageSpec, SpecToken)] = []
        for stage in stages {
            let words = stage.words.map { SpecToken(text: $0, line: 1, column: 1) }
            checked.append((try Self.stage(from: words, kinds: StageRegistry.all), words[0]))
        }
        try Self.checkOrder(checked, endOfText: SpecToken(text: "", line: 1, column: 1), kinds: StageRegistry.all)
        self.stages = checked.map(\.0)
    }

    /// Parses spec text: stages separated by `|`, words by blanks or newlines, `'…'` or
    /// `"…"` quote a word, `#` at the start of a word comments out the rest of the line.
    public init(parsing text: String) throws(SpecError) {
        try self.init(parsing: text, kinds: StageRegistry.all)
    }

    /// Parses with the grammar of `kinds` (tests give stages of their own).
    init(parsing text: String, kinds: [StageKind]) throws(SpecError) {
        let tokens = try SpecLexer.tokens(of: text)
        var parsed: [(StageSpec, SpecToken)] = []
        var words: [SpecToken] = []
        func flush(at separator: SpecToken) throws(SpecError) {
            guard let first = words.first else {
                throw SpecError(parsed.isEmpty ? "a stage is missing before '|'" : "a stage is missing between '|' and '|'", at: separator)
            }
            guard parsed.count < StageRegistry.maximumStages else {
                throw SpecError("too many stages: a pipeline has at most \(StageRegistry.maximumStages)", at: first)
            }
            parsed.append((try Self.stage(from: words, kinds: kinds), first))
            words = []
        }
        for token in tokens {
            if token.isSeparator { try flush(at: token) } else { words.append(token) }
        }
        let end = SpecLexer.endToken(of: text)
        guard !(tokens.isEmpty) else { throw SpecError("the pipeline spec is empty; expected e.g. 'read in.gz | gunzip | file out'", at: end) }
        if words.isEmpty { throw SpecError("a stage is missing after the last '|'", at: end) }
        try flush(at: end)
        try Self.checkOrder(parsed, endOfText: end, kinds: kinds)
        stages = parsed.map(\.0)
    }

    public var source: StageSpec { stages[0] }
    public var sink: StageSpec { stages[stages.count - 1] }
    public var transforms: ArraySlice<StageSpec> { stages.dropFirst().dropLast() }

    /// The canonical text, e.g. `read 'a b.gz' | gunzip | untar out strip=1`.
    public var description: String {
        stages.map { $0.words.map(SpecLexer.quoteIfNeeded).joined(separator: " ") }.joined(separator: " | ")
    }

    /// One stage from its words, by its kind's grammar: positional arguments first, then
    /// `name=value` options.
    private static func stage(from words: [SpecToken], kinds: [StageKind]) throws(SpecError) -> StageSpec {
        let head = words[0]
        guard let kind = kinds.first(where: { $0.word == head.text }) else {
            let words = kinds.map(\.word)
            let guess = TypoSuggestion.closest(to: head.text, among: words).map { "did you mean '\($0)'? " } ?? ""
            throw SpecError("unknown stage '\(head.text)' (\(guess)stages are: \(words.joined(separator: ", ")))", at: head)
        }
        var rest = words.dropFirst()
        var arguments: [String] = []
        for rule in kind.arguments {
            // `untar strip=1` lacks its DIR: an option word is not taken for the argument.
            guard let word = rest.first, !kind.options.contains(where: { word.text.hasPrefix($0.name + "=") }) else {
                throw SpecError("'\(kind.word)' needs \(rule.what)", at: rest.first ?? head)
            }
            rest = rest.dropFirst()
            arguments.append(try check(word) { text throws(StageWordError) in try rule.check(text) })
        }
        var options: [String: String] = [:]
        for word in rest {
            guard let equals = word.text.firstIndex(of: "="),
                let rule = kind.options.first(where: { $0.name == word.text[..<equals] })
            else {
                throw SpecError(unexpected(word.text, for: kind), at: word)
            }
            guard options[rule.name] == nil else {
                throw SpecError("'\(kind.word)' was given \(rule.name)= twice", at: word)
            }
            let value = String(word.text[word.text.index(after: equals)...])
            options[rule.name] = try check(word) { _ throws(StageWordError) in try rule.check(value) }
        }
        return StageSpec(kind.word, arguments, options: options, role: kind.role)
    }

    private static func check(_ word: SpecToken, _ rule: (String) throws(StageWordError) -> String) throws(SpecError) -> String {
        do {
            return try rule(word.text)
        } catch {
            throw SpecError(error.message, at: word)
        }
    }

    private static func unexpected(_ word: String, for kind: StageKind) -> String {
        if kind.options.isEmpty {
            return kind.arguments.isEmpty
                ? "'\(kind.word)' takes no argument; unexpected '\(word)'"
                : "'\(kind.word)' takes \(kind.arguments.count == 1 ? "one argument" : "\(kind.arguments.count) arguments"); unexpected '\(word)'"
        }
        let names = kind.options.map { "\($0.name)=\($0.valueName)" }.joined(separator: ", ")
        return "'\(kind.word)' does not take '\(word)' (its options: \(names))"
    }

    private static func checkOrder(
        _ stages: [(StageSpec, SpecToken)], endOfText: SpecToken,
        kinds: [StageKind]
    ) throws(SpecError) {
        guard let (first, firstToken) = stages.first else {
            throw SpecError("the pipeline spec is empty", at: endOfText)
        }
        let sources = kinds.filter { $0.role == .source }.map(\.word).joined(separator: ", ")
        guard first.role == .source else {
            throw SpecError("a pipeline starts with a source (\(sources)), not '\(first.name)'", at: firstToken)
        }
        for (stage, token) in stages.dropFirst() where stage.role == .source {
            throw SpecError("only one source is allowed; '\(stage.name)' is a second one", at: token)
        }
        for (stage, token) in stages.dropLast() where stage.role == .sink {
            throw SpecError("the sink '\(stage.name)' must be the last stage", at: token)
        }
        guard stages.count <= StageRegistry.maximumStages else {
            throw SpecError("too many stages: a pipeline has at most \(StageRegistry.maximumStages)", at: stages[StageRegistry.maximumStages].1)
        }
        guard let (last, _) = stages.last, last.role == .sink else {
            let sinks = kinds.filter { $0.role == .sink }.map(\.synopsis).joined(separator: ", ")
            throw SpecError("a pipeline ends with a sink (\(sinks))", at: endOfText)
        }
    }
}
