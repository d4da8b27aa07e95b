/// Everything the pipeline knows about one kind of stage: its word, its role, the words
/// it takes, what it costs, the type of its checkpoint state, and how to build it.
///
/// Each stage file declares its kind (`extension StageKind { static let gunzip = … }`)
/// and `StageRegistry.all` lists them: the spec parser, `--help`, `inspect`, the thread
/// plan and the checkpoint coder all read that list, so adding a stage touches nothing else.
public struct StageKind: Sendable {
    public enum Role: Sendable { case source, transform, sink }

    public let word: String
    public let role: Role
    /// Positional arguments, all required, in order.
    public let arguments: [StageArgument]
    /// `name=value` options, all optional.
    public let options: [StageOption]
    /// One line for `--help`.
    public let summary: String
    /// What the stage costs per byte it takes in, for the thread plan.
    let cost: @Sendable (PipelineOptions) -> StageCost
    /// The type of the stage's checkpoint state (nil for sources, which record a `SourceState`).
    public let stateType: (any StageStateValue.Type)?
    let factory: Factory

    enum Factory: Sendable {
        /// `resumable`: whether a rerun can continue this source at all (stdin cannot);
        /// `input`: the local file it reads, if it reads one (`read PATH`).
        case source(
            @Sendable (StageSpec, StageContext, SourceState?) throws -> ByteSource, resumable: Bool,
            input: @Sendable (StageSpec) -> String?)
        case transform(@Sendable (StageSpec, ByteSink, StageContext, (any StageStateValue)?) throws -> ByteSink)
        case sink(
            @Sendable (StageSpec, StageContext, (any StageStateValue)?) throws -> ByteSink,
            output: @Sendable (StageSpec) -> OutputTarget?)
    }

    /// `fetch URL connections=N`: how the stage is written, for `--help` and messages.
    public var synopsis: String {
        ([word] + arguments.map(\.name) + options.map { "[\($0.name)=\($0.valueName)]" }).joined(separator: " ")
    }

    /// What the sink leaves on disk (nil for stdout and for non-sinks).
    func output(_ spec: StageSpec) -> OutputTarget? {
        if case .sink(_, let output) = factory { return output(spec) }
        return nil
    }

    /// Whether a rerun can resume this source at all (stdin cannot); true for other roles.
    public var resumable: Bool {
        if case .source(_, let resumable, _) = factory { return resumable }
        return true
    }

    /// The local file a source reads (nil for other sources and other roles), which the
    /// run checks before it starts: it must not be the output or the checkpoint.
    func input(_ spec: StageSpec) -> String? {
        if case .source(_, _, let input) = factory { return input(spec) }
        return nil
    }
}

extension StageKind {
    /// `input`: which local file the source reads, given its spec (`read PATH`: its argument).
    static func source(
        _ word: String, arguments: [StageArgument] = [], options: [StageOption] = [],
        summary: String, nsPerByte: Double, resumable: Bool = true,
        input: @escaping @Sendable (StageSpec) -> String? = { _ in nil },
        make: @escaping @Sendable (StageSpec, StageContext, SourceState?) throws -> ByteSource
    ) -> StageKind {
        StageKind(
            word: word, role: .source, arguments: arguments, options: options, summary: summary,
            cost: { _ in StageCost(nsPerByte: nsPerByte) }, stateType: nil,
            factory: .source(make, resumable: resumable, input: input))
    }

    static func transform<State: StageStateValue>(
        _ word: String, arguments: [StageArgument] = [], options: [StageOption] = [], summary: String,
        cost: @escaping @Sendable (PipelineOptions) -> StageCost, state: State.Type,
        make: @escaping @Sendable (StageSpec, ByteSink, StageContext, State?) throws -> ByteSink
    ) -> StageKind {
        StageKind(
            word: word, role: .transform, arguments: arguments, options: options, summary: summary,
            cost: cost, stateType: state,
            factory: .transform { spec, next, context, saved in
                try make(spec, next, context, try typed(saved, as: State.self))
            })
    }

    static func sink<State: StageStateValue>(
        _ word: String, arguments: [StageArgument] = [], options: [StageOption] = [], summary: String,
        nsPerByte: Double, state: State.Type,
        output: @escaping @Sendable (StageSpec) -> OutputTarget?,
        make: @escaping @Sendable (StageSpec, StageContext, State?) throws -> ByteSink
    ) -> StageKind {
        StageKind(
            word: word, role: .sink, arguments: arguments, options: options, summary: summary,
            cost: { _ in StageCost(nsPerByte: nsPerByte) }, stateType: state,
            factory: .sink(
                { spec, context, saved in try make(spec, context, try typed(saved, as: State.self)) },
                output: output))
    }

    private static func typed<State: StageStateValue>(_ saved: (any StageStateValue)?, as: State.Type) throws -> State? {
        guard let saved else { return nil }
        guard let state = saved as? State else {
            throw StateRejected("its \(State.stage) stage holds the state of a \(type(of: saved).stage) stage")
        }
        return state
    }
}

/// Nanoseconds per input byte on the development machines, and how many bytes come out
/// per byte in (a decompressor's expansion), for `ThreadPlan`.
public struct StageCost: Sendable {
    public var nsPerByte: Double
    public var expansion: Double

    public init(nsPerByte: Double, expansion: Double = 1) {
        self.nsPerByte = nsPerByte
        self.expansion = expansion
    }
}

/// What a stage is built with besides its spec: the run's options and its control.
struct StageContext: Sendable {
    let options: PipelineOptions
    let control: RunControl
}

/// A positional argument of a stage: its name in the synopsis, what it is (for "needs …"
/// messages) and a check that returns the canonical value or throws a message.
public struct StageArgument: Sendable {
    public let name: String
    public let what: String
    let check: @Sendable (String) throws(StageWordError) -> String

    init(_ name: String, _ what: String, check: @escaping @Sendable (String) throws(StageWordError) -> String) {
        self.name = name
        self.what = what
        self.check = check
    }
}

/// A `name=value` option of a stage.
public struct StageOption: Sendable {
    public let name: String
    public let valueName: String
    public let summary: String
    /// Changes how bytes travel, not which bytes arrive: left out of the checkpoint's
    /// identity, so a rerun may change it (`fetch … connections=N`).
    public private(set) var isTransport = false
    let check: @Sendable (String) throws(StageWordError) -> String

    init(
        _ name: String, _ valueName: String, _ summary: String,
        check: @escaping @Sendable (String) throws(StageWordError) -> String
    ) {
        self.name = name
        self.valueName = valueName
        self.summary = summary
        self.check = check
    }

    /// This option, marked as a transport option (see `isTransport`).
    func transport() -> StageOption {
        var option = self
        option.isTransport = true
        return option
    }
}

/// Why a stage's word was refused; the parser adds where the word stands.
public struct StageWordError: Error, Sendable {
    public let message: String
    init(_ message: String) { self.message = message }
}

extension StageArgument {
    /// A local path: not empty, no NUL.
    static let path = StageArgument("PATH", "a file path") { text throws(StageWordError) in
        guard !text.isEmpty else { throw StageWordError("an empty path") }
        guard !text.contains("\0") else { throw StageWordError("a path cannot contain a NUL byte") }
        return text
    }
}

extension StageOption {
    /// An integer option in `range`.
    static func integer(_ name: String, _ summary: String, in range: ClosedRange<Int>) -> StageOption {
        StageOption(name, "N", summary) { text throws(StageWordError) in
            guard text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int(text), range.contains(value) else {
                throw StageWordError("\(name)=\(text): expected a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
            return String(value)
        }
    }

    /// A size option (`64MiB`, `1G`, `4096`) in `range` bytes; canonical value in bytes.
    static func size(_ name: String, _ summary: String, in range: ClosedRange<UInt64>) -> StageOption {
        StageOption(name, "SIZE", summary) { text throws(StageWordError) in
            guard let value = ByteSize.parse(text), range.contains(value) else {
                throw StageWordError("\(name)=\(text): expected a size from \(range.lowerBound) to \(range.upperBound) bytes, e.g. 256MiB")
            }
            return String(value)
        }
    }
}
