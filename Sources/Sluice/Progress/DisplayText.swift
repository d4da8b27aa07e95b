/// Text Sluice prints but did not write itself: server strings made harmless for a terminal,
/// and URLs with their secrets taken out. Every message that quotes a server or a URL goes
/// through here, so a hostile server cannot move the cursor or rewrite the screen, and a
/// presigned URL's signature never lands in a log.
public enum DisplayText {
    /// `text` with every control character and invisible formatting scalar (C0, DEL, C1,
    /// bidirectional overrides, zero-width marks) written as `\xNN` or `\u{NNNN}`. Printable
    /// text, backslashes included, is left as it is, so escaping twice changes nothing more.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = ""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            let hex = String(scalar.value, radix: 16, uppercase: true)
            out +=
                scalar.value < 0x100
                ? "\\x" + String(repeating: "0", count: 2 - hex.count) + hex
                : "\\u{" + hex + "}"
        }
        return out
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: return true
        // Line/paragraph separators, bidi embeddings/overrides/isolates, zero-width and BOM.
        case 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x206F, 0xFEFF: return true
        default: return scalar.properties.generalCategory == .format
        }
    }

    /// Marks what was taken out of a URL.
    public static let redactedMark = "***"

    /// `url` with its userinfo (`user:password@`) replaced by `***@` and every query value
    /// (and a fragment) by `***`; names of query parameters stay, so a reader can still tell
    /// which URL it was. A string that is not URL-shaped is returned unchanged.
    public static func redactedURL(_ url: String) -> String {
        guard let schemeEnd = url.firstRange(of: "://") else { return url }
        let afterScheme = url[schemeEnd.upperBound...]
        let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? afterScheme.endIndex
        var authority = String(afterScheme[..<authorityEnd])
        if let at = authority.lastIndex(of: "@") {
            authority = redactedMark + authority[at...]
        }
        var rest = afterScheme[authorityEnd...]
        var fragment = ""
        if let hash = rest.firstIndex(of: "#") {
            fragment = "#" + redactedMark
            rest = rest[..<hash]
        }
        var path = String(rest)
        if let mark = rest.firstIndex(of: "?") {
            path = String(rest[..<mark])
            let query = rest[rest.index(after: mark)...]
            let pairs = query.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
                if pair.isEmpty { return "" }
                guard let equals = pair.firstIndex(of: "=") else { return redactedMark }
                return pair[..<equals] + "=" + redactedMark
            }
            path += "?" + pairs.joined(separator: "&")
        }
        return url[..<schemeEnd.upperBound] + authority + path + fragment
    }

    /// True when `redactedURL` would take something out of `url`.
    static func hasSecrets(_ url: String) -> Bool { redactedURL(url) != url }

    /// For messages: the URL redacted, then escaped.
    public static func url(_ url: String) -> String { escaped(redactedURL(url)) }

    /// For messages: a server-controlled string, escaped (and shortened past `limit` characters,
    /// so one header cannot fill a terminal).
    static func quoted(_ text: String, limit: Int = 200) -> String {
        let short = text.count > limit ? String(text.prefix(limit)) + "…" : text
        return escaped(short)
    }
}

extension PipelineSpec {
    /// The canonical text with every `fetch` URL redacted (`DisplayText.redactedURL`): what
    /// a checkpoint stores and compares, and what progress and `inspect` print. Two specs that
    /// differ only in a URL's query values or password have the same redacted text, which is
    /// what lets a refreshed presigned URL resume (the server's validators decide).
    public var redactedDescription: String {
        redacted(keepingTransportOptions: true)
    }

    /// What a checkpoint stores and a resume compares: the redacted text without the options
    /// that change how bytes travel but not which bytes arrive (`fetch … connections=N`), so
    /// a rerun may use another number of connections.
    public var checkpointIdentity: String {
        redacted(keepingTransportOptions: false)
    }

    private func redacted(keepingTransportOptions: Bool) -> String {
        stages.map { stage in
            let arguments = stage.name != StageKind.fetch.word ? stage.arguments : stage.arguments.map(DisplayText.redactedURL)
            let transport = Set(stage.kind?.options.filter(\.isTransport).map(\.name) ?? [])
            let options = keepingTransportOptions ? stage.options : stage.options.filter { !transport.contains($0.key) }
            let shown = StageSpec(stage.name, arguments, options: options, role: stage.role)
            return shown.words.map(SpecLexer.quoteIfNeeded).joined(separator: " ")
        }.joined(separator: " | ")
    }
}
