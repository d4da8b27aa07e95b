import CCurl
#if canImport(Glibc)
import Glibc
#endif

/// The status line and header fields of one response, collected line by line from
/// libcurl's header callback.
///
/// libcurl passes every response of a request through that callback: interim 1xx
/// responses, then the final one (and, for chunked bodies, trailers after it). A status
/// line starts a new head, so only the final response's fields survive. file:// has no
/// status line: libcurl sends `Content-Length` and `Last-Modified` only, and `status`
/// stays nil.
struct HTTPResponseHead {
    private(set) var status: Int?
    private(set) var reasonPhrase = ""
    /// Lowercased names; the first occurrence wins (validators must not be merged).
    private(set) var fields: [String: String] = [:]
    /// Names of the fields that appeared more than once.
    private(set) var repeated: Set<String> = []

    enum LineResult {
        /// More lines belong to this head (or a 1xx interim response just ended).
        case needMore
        /// The blank line after the final response's fields.
        case complete
    }

    /// Feeds one line as libcurl delivers it, CR LF included.
    mutating func consume(_ raw: String) -> LineResult {
        let line = raw.droppingLineEnd()
        if line.hasPrefix("HTTP/") {
            self = HTTPResponseHead()
            let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            status = parts.count > 1 ? HTTPNumber.parse(parts[1]).flatMap { $0 < 1000 ? Int($0) : nil } : nil
            reasonPhrase = parts.count > 2 ? String(parts[2]) : ""
            if status == nil { status = 0 }  // unparseable: never mistaken for file://
            return .needMore
        }
        if line.isEmpty {
            if let status, (100..<200).contains(status) { return .needMore }
            return .complete
        }
        guard let colon = line.firstIndex(of: ":") else { return .needMore }
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].strippingBlanks()
        if fields[name] == nil { fields[name] = value } else { repeated.insert(name) }
        return .needMore
    }

    subscript(name: String) -> String? { fields[name] }

    /// "404 Not Found": the code with the server's phrase, or a standard one (HTTP/2 has none).
    var statusText: String {
        guard let status else { return "(no status)" }
        let phrase = reasonPhrase.isEmpty ? Self.standardPhrase(status) : DisplayText.quoted(reasonPhrase, limit: 80)
        return phrase.isEmpty ? "\(status)" : "\(status) \(phrase)"
    }

    /// Body length; ignored when a Transfer-Encoding frames the body (RFC 9112 §6.3).
    var contentLength: UInt64? {
        guard fields["transfer-encoding"] == nil else { return nil }
        return fields["content-length"].flatMap(HTTPNumber.parse)
    }

    /// Why this head's framing cannot be trusted, or nil. A repeated or unparseable
    /// Content-Length (RFC 9112 §6.3: the message must be discarded), or a repeated
    /// Content-Range, leaves no single answer to which bytes the body holds.
    var framingProblem: String? {
        for name in ["content-length", "content-range"] where repeated.contains(name) {
            return "sent \(name == "content-length" ? "Content-Length" : "Content-Range") more than once"
        }
        if fields["transfer-encoding"] == nil, let text = fields["content-length"], HTTPNumber.parse(text) == nil {
            return "sent an invalid Content-Length '\(DisplayText.quoted(text))'"
        }
        return nil
    }
    var location: String? { fields["location"] }
    var contentRange: ContentRange? { fields["content-range"].flatMap(ContentRange.init) }
    /// The total length Content-Range states, even when its range does not fit it (a server
    /// that ignores If-Range answers the range asked for against a now shorter total): it
    /// still tells which version answered. Nil for `*` or no such field.
    var statedTotal: UInt64? { fields["content-range"].flatMap(ContentRange.statedTotal) }

    /// The validators this response carries; `totalLength` is the caller's to fill in,
    /// since where it comes from depends on the status.
    var validators: FetchValidators {
        FetchValidators(
            etag: fields["etag"], lastModified: fields["last-modified"],
            lastModifiedIsStrong: lastModifiedIsStrong)
    }

    /// RFC 9110 §8.8.2.2: a Last-Modified at least one second older than the response's Date
    /// is strong (the file cannot have changed twice within that second unnoticed).
    var lastModifiedIsStrong: Bool {
        guard let modified = fields["last-modified"].flatMap(Self.seconds), let date = fields["date"].flatMap(Self.seconds)
        else { return false }
        let (age, overflow) = date.subtractingReportingOverflow(modified)
        return !overflow && age >= 1
    }

    /// An HTTP date as seconds since the epoch (parsed by libcurl), nil when unreadable.
    private static func seconds(_ text: String) -> Int? {
        guard text.utf8.count <= 64 else { return nil }
        let value = text.withCString { curl_getdate($0, nil) }
        return value >= 0 ? Int(value) : nil
    }

    /// `Retry-After` as seconds from now: delta-seconds or an HTTP date (parsed by libcurl).
    var retryAfter: Double? {
        guard let value = fields["retry-after"], value.utf8.count <= 64 else { return nil }
        if value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            // Too many digits for any number is still "a very long time": the caller caps it.
            return HTTPNumber.parse(value).map { Double($0) } ?? Double(HTTPNumber.maximum)
        }
        let date = value.withCString { curl_getdate($0, nil) }
        guard date >= 0 else { return nil }
        let (delta, overflow) = date.subtractingReportingOverflow(time(nil))
        return overflow ? nil : max(0, Double(delta))
    }

    private static func standardPhrase(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 206: return "Partial Content"
        case 301: return "Moved Permanently"
        case 302: return "Found"
        case 303: return "See Other"
        case 304: return "Not Modified"
        case 307: return "Temporary Redirect"
        case 308: return "Permanent Redirect"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 410: return "Gone"
        case 416: return "Range Not Satisfiable"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        default: return ""
        }
    }
}

/// A `Content-Range` response field (RFC 9110 §14.4): `bytes FIRST-LAST/TOTAL` (TOTAL may
/// be `*`), or `bytes */TOTAL` on a 416.
struct ContentRange: Equatable {
    enum Kind: Equatable {
        case bytes(first: UInt64, last: UInt64)
        case unsatisfied
    }
    let kind: Kind
    let total: UInt64?
    /// The field as received, for error messages.
    let text: String

    init?(_ text: String) {
        self.text = text
        guard let (range, totalText) = Self.parts(of: text) else { return nil }
        if totalText == "*" {
            total = nil
        } else {
            guard let parsed = HTTPNumber.parse(totalText) else { return nil }
            total = parsed
        }
        if range == "*" {
            guard total != nil else { return nil }
            kind = .unsatisfied
            return
        }
        let bounds = range.split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = HTTPNumber.parse(bounds[0]), let last = HTTPNumber.parse(bounds[1]),
            first <= last
        else { return nil }
        if let total, last >= total { return nil }
        kind = .bytes(first: first, last: last)
    }

    /// The number after the `/` of a `bytes …/TOTAL` field, whatever stands before it.
    static func statedTotal(_ text: String) -> UInt64? {
        parts(of: text).flatMap { HTTPNumber.parse($0.total) }
    }

    /// The range and the total of `bytes RANGE/TOTAL`, blanks stripped.
    private static func parts(of text: String) -> (range: String, total: String)? {
        let value = text.strippingBlanks()
        guard value.lowercased().hasPrefix("bytes "), let slash = value.firstIndex(of: "/") else { return nil }
        return (
            value[value.index(value.startIndex, offsetBy: 6)..<slash].strippingBlanks(),
            value[value.index(after: slash)...].strippingBlanks()
        )
    }
}

/// A decimal number taken from a response: ASCII digits only (no sign, no blanks, no
/// list), and at most `maximum`, the largest offset libcurl (curl_off_t) and the file
/// system take. Anything else is nil, so every sum of two such numbers fits a UInt64.
enum HTTPNumber {
    static let maximum = UInt64(Int64.max)

    static func parse<S: StringProtocol>(_ text: S) -> UInt64? {
        guard !text.isEmpty else { return nil }
        var value: UInt64 = 0
        for byte in text.utf8 {
            guard byte >= 0x30 && byte <= 0x39 else { return nil }
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(byte - 0x30))
            guard !o1, !o2 else { return nil }
            value = sum
        }
        return value <= maximum ? value : nil
    }
}

extension StringProtocol {
    // Scalars, not Characters: "\r\n" is one Character in Swift.
    fileprivate func droppingLineEnd() -> String {
        var scalars = Substring(self).unicodeScalars
        while let last = scalars.last, last == "\n" || last == "\r" { scalars.removeLast() }
        return String(scalars)
    }

    fileprivate func strippingBlanks() -> String {
        var scalars = Substring(self).unicodeScalars
        while let first = scalars.first, first == " " || first == "\t" { scalars.removeFirst() }
        while let last = scalars.last, last == " " || last == "\t" { scalars.removeLast() }
        return String(scalars)
    }
}
