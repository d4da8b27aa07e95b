import CCurl

/// Why a transfer failed, as a library user can switch on it: what the server answered, or
/// which layer of the connection (name lookup, TCP, TLS) gave out. Facts only; the CLI adds
/// the advice. Every text here is already fit to print: escaped, with secrets redacted.
public enum TransferCause: Sendable, Equatable {
    /// The server answered with a status Sluice cannot use (404, 403, or a 5xx that
    /// outlasted the retries). `statusText` is the code with its phrase ("404 Not Found").
    case http(status: Int, statusText: String, server: String)
    /// The host name could not be resolved.
    case dns(host: String)
    /// No TCP connection could be made (refused, unreachable). `reason` is the system's word
    /// for it when libcurl reports one ("Connection refused").
    case connect(host: String, port: Int?, reason: String)
    /// The TLS handshake failed, or the CA certificates to verify it could not be used.
    case tls(host: String, reason: String)
    /// The server's TLS certificate could not be verified against the trusted CAs.
    case certificate(host: String, reason: String)
    /// The server's TLS certificate was issued for other names than the one in the URL.
    case certificateName(host: String, reason: String)
    /// libcurl's own timeout (connecting took too long).
    case timeout(reason: String)
    /// No byte at all for `seconds` (`--stall-timeout`).
    case stalled(server: String, seconds: Double)
    /// Slower than `bytesPerSecond` over `seconds` (`--speed-limit`, `--speed-time`).
    case tooSlow(server: String, bytesPerSecond: UInt64, seconds: Double)
    /// The `--max-time` deadline passed, at this source offset.
    case deadline(offset: UInt64)
    /// The response ended at source byte `offset` before the `expected` end it announced.
    case truncated(server: String, offset: UInt64, expected: UInt64)
    /// A response Sluice refuses to use: it contradicts itself (a repeated Content-Length,
    /// a Content-Range that does not fit the request or its body) or overran its own end.
    /// `reason` is the whole sentence, naming the server and the response.
    case protocolViolation(server: String, reason: String)
    /// A redirect Sluice does not follow: too many, not a URL, not http(s), https → http.
    case redirect(reason: String)
    /// Starting over because the remote changed, it changed again.
    case changedAgain(reason: String)
    /// Any other libcurl failure: its `CURLcode` and error text.
    case curl(code: Int, message: String)

    /// No libcurl handle could be made (out of memory, or libcurl's global setup failed).
    static let curlUnavailable = TransferCause.curl(
        code: Int(CURLE_FAILED_INIT.rawValue), message: "libcurl could not be initialised")

    /// The same cause with `transform` applied to every text it carries (to scrub secrets).
    func mapText(_ transform: (String) -> String) -> TransferCause {
        switch self {
        case .http(let status, let text, let server):
            return .http(status: status, statusText: transform(text), server: transform(server))
        case .dns(let host): return .dns(host: transform(host))
        case .connect(let host, let port, let reason):
            return .connect(host: transform(host), port: port, reason: transform(reason))
        case .tls(let host, let reason): return .tls(host: transform(host), reason: transform(reason))
        case .certificate(let host, let reason): return .certificate(host: transform(host), reason: transform(reason))
        case .certificateName(let host, let reason): return .certificateName(host: transform(host), reason: transform(reason))
        case .timeout(let reason): return .timeout(reason: transform(reason))
        case .stalled(let server, let seconds): return .stalled(server: transform(server), seconds: seconds)
        case .tooSlow(let server, let rate, let seconds):
            return .tooSlow(server: transform(server), bytesPerSecond: rate, seconds: seconds)
        case .deadline: return self
        case .truncated(let server, let offset, let expected):
            return .truncated(server: transform(server), offset: offset, expected: expected)
        case .protocolViolation(let server, let reason):
            return .protocolViolation(server: transform(server), reason: transform(reason))
        case .redirect(let reason): return .redirect(reason: transform(reason))
        case .changedAgain(let reason): return .changedAgain(reason: transform(reason))
        case .curl(let code, let message): return .curl(code: code, message: transform(message))
        }
    }
}

extension TransferCause: CustomStringConvertible {
    public var description: String {
        switch self {
        case .http(_, let text, let server):
            return "HTTP \(text) from \(server)"
        case .dns(let host):
            return "cannot resolve host \(host)"
        case .connect(let host, let port, let reason):
            return "cannot connect to \(host)\(port.map { " port \($0)" } ?? ""): \(reason)"
        case .tls(let host, let reason):
            return "TLS with \(host) failed: \(reason)"
        case .certificate(let host, let reason):
            return "TLS certificate of \(host) could not be verified: \(reason)"
        case .certificateName(let host, let reason):
            return "TLS certificate of \(host) is not for that name: \(reason)"
        case .timeout(let reason):
            return "timed out: \(reason)"
        case .stalled(let server, let seconds):
            return "no data from \(server) for \(Self.seconds(seconds)) s"
        case .tooSlow(let server, let rate, let seconds):
            return "\(server) sent less than \(rate) bytes/s for \(Self.seconds(seconds)) s (--speed-limit, --speed-time)"
        case .deadline(let offset):
            return "the --max-time deadline passed at source byte \(offset)"
        case .truncated(let server, let offset, let expected):
            return "\(server) ended the response at byte \(offset) of \(expected)"
        case .protocolViolation(_, let reason):
            return reason
        case .redirect(let reason):
            return reason
        case .changedAgain(let reason):
            return "it changed again while starting over (\(reason))"
        case .curl(_, let message):
            return message
        }
    }

    /// "30" for whole seconds, "0.5" otherwise; never traps on absurd values.
    static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }
}

/// How the retry loop ended a failed transfer.
public enum TransferGiveUp: Sendable, Equatable {
    /// At the first failure: retrying cannot help with its cause.
    case atOnce
    /// After this many retries in a row failed (`--retries`).
    case afterRetries(Int)
    /// The `--max-time` deadline comes before the next retry would.
    case deadlineBeforeRetry
}
