/// A malformed spec, pointing at the offending word.
public struct SpecError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    /// 1-based position of the offending word in the spec text.
    public let line: Int
    public let column: Int
    /// The offending word ("" at the end of the text).
    public let word: String

    init(_ message: String, at token: SpecToken) {
        self.message = message
        self.line = token.line
        self.column = token.column
        self.word = token.text
    }

    public var description: String {
        "spec error at line \(line), column \(column): \(message)"
    }
}
