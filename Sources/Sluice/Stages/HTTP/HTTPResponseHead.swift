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
            status = parts.count > 1 ? Int(parts[1]) : nil
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
        if fields[name] == nil { fields[name] = value }
        return .needMore
    }

    subscript(name: String) -> String? { fields[name] }

    /// "404 Not Found": the code with the server's phrase, or a standard one (HTTP/2 has none).
    var statusText: String {
        guard let status else { return "(no status)" }
        let phrase = reasonPhrase.isEmpty ? Self.standardPhrase(status) : reasonPhrase
        return phrase.isEmpty ? "\(status)" : "\(status) \(phrase)"
    }

    /// Body length; ignored when a Transfer-Encoding frames the body (RFC 9112 §6.3).
    var contentLength: UInt64? {
        guard fields["transfer-encoding"] == nil else { return nil }
        return fields["content-length"].flatMap { UInt64($0) }
    }
    var location: String? { fields["location"] }
    var contentRange: ContentRange? { fields["content-range"].flatMap(ContentRange.init) }

    /// The validators this response carries; `totalLength` is the caller's to fill in,
    /// since where it comes from depends on the status.
    var validators: FetchValidators {
        FetchValidators(etag: fields["etag"], lastModified: fields["last-modified"])
    }

    /// `Retry-After` as seconds from now: delta-seconds or an HTTP date (parsed by libcurl).
    var retryAfter: Double? {
        guard let value = fields["retry-after"] else { return nil }
        if let seconds = UInt64(value) { return Double(seconds) }
        let date = value.withCString { curl_getdate($0, nil) }
        guard date >= 0 else { return nil }
        return max(0, Double(date - time(nil)))
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
        let value = text.strippingBlanks()
        guard value.lowercased().hasPrefix("bytes "), let slash = value.firstIndex(of: "/") else { return nil }
        let range = value[value.index(value.startIndex, offsetBy: 6)..<slash].strippingBlanks()
        let totalText = value[value.index(after: slash)...].strippingBlanks()
        if totalText == "*" {
            total = nil
        } else {
            guard let parsed = UInt64(totalText) else { return nil }
            total = parsed
        }
        if range == "*" {
            guard total != nil else { return nil }
            kind = .unsatisfied
            return
        }
        let bounds = range.split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = UInt64(bounds[0]), let last = UInt64(bounds[1]), first <= last
        else { return nil }
        if let total, last >= total { return nil }
        kind = .bytes(first: first, last: last)
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
