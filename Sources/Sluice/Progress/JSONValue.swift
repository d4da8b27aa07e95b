/// A JSON value for the lines Sluice writes by hand — progress events and `inspect --json` —
/// serialized exactly as Foundation's `JSONSerialization` did with `.sortedKeys` (keys in
/// byte order, which for these lower-case ASCII keys is the order it used; `/` written as
/// `\/`; a whole-valued double without its `.0`), so those outputs did not change when Sluice
/// stopped linking the full Foundation.
indirect enum JSONValue {
    case string(String)
    /// A number's text, already in JSON form.
    case number(String)
    /// A double that is NaN or infinite: JSON has no text for it, so nothing is written.
    case unwritable
    case array([JSONValue])
    case object([String: JSONValue])

    static func integer(_ value: some BinaryInteger) -> JSONValue { .number("\(value)") }

    static func double(_ value: Double) -> JSONValue {
        guard value.isFinite else { return .unwritable }
        let text = value.description
        return .number(text.hasSuffix(".0") ? String(text.dropLast(2)) : text)
    }

    /// The text, or nil when a number in it has none. `pretty`: one member per line,
    /// indented by two, with ` : ` between key and value.
    func serialized(pretty: Bool = false) -> String? {
        var out = ""
        return write(to: &out, pretty: pretty, indent: 0) ? out : nil
    }

    private func write(to out: inout String, pretty: Bool, indent: Int) -> Bool {
        switch self {
        case .string(let text):
            Self.writeString(text, to: &out)
        case .number(let text):
            out += text
        case .unwritable:
            return false
        case .array(let elements):
            out += pretty ? "[\n" : "["
            for (index, element) in elements.enumerated() {
                if index > 0 { out += pretty ? ",\n" : "," }
                if pretty { out += String(repeating: " ", count: indent + 2) }
                guard element.write(to: &out, pretty: pretty, indent: indent + 2) else { return false }
            }
            if pretty { out += "\n" + String(repeating: " ", count: indent) }
            out += "]"
        case .object(let members):
            out += pretty ? "{\n" : "{"
            for (index, key) in members.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).enumerated() {
                if index > 0 { out += pretty ? ",\n" : "," }
                if pretty { out += String(repeating: " ", count: indent + 2) }
                Self.writeString(key, to: &out)
                out += pretty ? " : " : ":"
                guard members[key]?.write(to: &out, pretty: pretty, indent: indent + 2) ?? false else { return false }
            }
            if pretty { out += "\n" + String(repeating: " ", count: indent) }
            out += "}"
        }
        return true
    }

    private static func writeString(_ text: String, to out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "/": out += "\\/"
            case "\u{8}": out += "\\b"
            case "\u{C}": out += "\\f"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{0}"..."\u{1F}":
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}
