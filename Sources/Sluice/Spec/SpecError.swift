/// A malformed spec, pointing at the offending word.
public struct SpecError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    /// 1-based position of the offending word in the spec text.
    public let line: Int
    public let column: Int
    /// The offending word ("" at the end of the text).
    public let word: String

    /// A word longer than this is shown shortened: a spec file may hold a megabyte-long
    /// word, and the error is one line on stderr, not the word back.
    static let shownWordLimit = 80
    static let messageLimit = 600

    init(_ message: String, at token: SpecToken) {
        var message = message
        if token.text.count > Self.shownWordLimit {
            message = message.replacingAll(token.text, with: String(token.text.prefix(Self.shownWordLimit)) + "…")
        }
        if message.count > Self.messageLimit { message = String(message.prefix(Self.messageLimit)) + "…" }
        self.message = message
        self.line = token.line
        self.column = token.column
        self.word = token.text
    }

    public var description: String {
        "spec error at line \(line), column \(column): \(message)"
    }
}
