/// A word or `|` of spec text, with where it starts.
struct SpecToken: Equatable, Sendable {
    var text: String
    var line: Int
    var column: Int
    var isSeparator = false
}

/// Splits spec text into words and `|` separators.
enum SpecLexer {
    static func tokens(of rawText: String) throws(SpecError) -> [SpecToken] {
        // Spec files written on Windows: "\r\n" is one Character in Swift, never "\n".
        let text = rawText.replacingAll("\r\n", with: "\n")
        var tokens: [SpecToken] = []
        var line = 1, column = 0
        var current: SpecToken?
        var quote: Character?
        var inComment = false
        func end() {
            if let word = current { tokens.append(word) }
            current = nil
        }
        for ch in text {
            column += 1
            if ch == "\n" {
                if let q = quote {
                    throw SpecError("unterminated \(q)quote\(q)", at: current ?? SpecToken(text: "", line: line, column: column))
                }
                end()
                inComment = false
                line += 1
                column = 0
                continue
            }
            if inComment { continue }
            if let q = quote {
                if ch == q { quote = nil } else { current!.text.append(ch) }
                continue
            }
            switch ch {
            case " ", "\t", "\r":
                end()
            case "|":
                end()
                tokens.append(SpecToken(text: "|", line: line, column: column, isSeparator: true))
            case "#" where current == nil:
                inComment = true
            case "'", "\"":
                if current == nil { current = SpecToken(text: "", line: line, column: column) }
                quote = ch
            default:
                if current == nil { current = SpecToken(text: "", line: line, column: column) }
                current!.text.append(ch)
            }
        }
        if let q = quote {
            throw SpecError("unterminated \(q)quote\(q)", at: current ?? SpecToken(text: "", line: line, column: column))
        }
        end()
        return tokens
    }

    /// Where "the end of the text" is, for errors about something missing.
    static func endToken(of text: String) -> SpecToken {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        return SpecToken(text: "", line: lines.count, column: (lines.last?.count ?? 0) + 1)
    }

    /// The word as spec text that lexes back to it (the canonical text is parsed again by
    /// `inspect` and shown for the user to copy).
    static func quoteIfNeeded(_ word: String) -> String {
        let special: Set<Character> = [" ", "\t", "\r", "\n", "|", "'", "\"", "#"]
        guard word.isEmpty || word.contains(where: { special.contains($0) }) else { return word }
        if !word.contains("'") { return "'" + word + "'" }
        if !word.contains("\"") { return "\"" + word + "\"" }
        // Both marks: single-quoted runs with each ' double-quoted between them; quoted parts
        // that touch are one word.
        return word.split(separator: "'", omittingEmptySubsequences: false).map { "'" + $0 + "'" }.joined(separator: "\"'\"")
    }
}
