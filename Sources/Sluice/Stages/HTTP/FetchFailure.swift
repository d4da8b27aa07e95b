import CCurl

#if canImport(Glibc)
import Glibc
#endif

/// Why one attempt of `fetch` failed, sorted by what the retry loop does about it. Each
/// carries the `TransferCause` a give-up reports.
enum FetchFailure: Error, Equatable {
    /// Worth another attempt at the current offset (drops, timeouts, stalls, 408/429/5xx),
    /// after `retryAfter` seconds when the server said so.
    case transient(TransferCause, retryAfter: Double? = nil)
    /// Slower than `--speed-limit`: retried like a transient failure, but the bytes the slow
    /// attempt delivered do not reset the count, so a trickle ends after `--retries` attempts.
    case tooSlow(TransferCause)
    /// Retrying the same URL cannot help (404, DNS, TLS verification): exit 3 at once, unless
    /// the URL was a redirect target from an earlier attempt (signed URLs expire), when the
    /// URL the user gave is asked once more.
    case permanent(TransferCause)
    /// The server's answer contradicts itself (duplicate Content-Length, a body past its
    /// Content-Range): nothing from it can be trusted and no retry is made.
    case malformed(TransferCause)
    /// `--max-time` passed: the run ends, with what was delivered kept for a resume.
    case outOfTime(TransferCause)
    /// The remote is no longer the version already (partly) delivered.
    case changed(String)

    /// Sorts a libcurl result that ended an attempt before a response decided anything.
    /// `message` is libcurl's error buffer (or its generic text); `osErrno` the system error
    /// libcurl saw (0 if none); `url` is the request's.
    static func from(_ code: CURLcode, message: String, osErrno: Int32 = 0, url: FetchURL) -> FetchFailure {
        let host = DisplayText.escaped(url.host)
        let server = DisplayText.escaped(url.authority)
        switch code {
        case CURLE_COULDNT_CONNECT:
            let reason = osErrno != 0 ? String(cString: strerror(osErrno)) : message
            return .transient(.connect(host: host, port: url.port, reason: reason))
        case CURLE_OPERATION_TIMEDOUT:
            return .transient(.timeout(reason: message))
        case CURLE_SSL_CONNECT_ERROR:
            return .transient(.tls(host: server, reason: message))
        case CURLE_PARTIAL_FILE, CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_HTTP2,
            CURLE_HTTP2_STREAM, CURLE_AGAIN, CURLE_HTTP3, CURLE_QUIC_CONNECT_ERROR:
            return .transient(.curl(code: Int(code.rawValue), message: message))
        case CURLE_COULDNT_RESOLVE_HOST:
            return .permanent(.dns(host: host))
        case CURLE_PEER_FAILED_VERIFICATION:
            // libcurl has one code for both; only its text tells a name mismatch (which no
            // CA file fixes) from a certificate no trusted CA vouches for.
            if message.contains("target host name") {
                return .permanent(.certificateName(host: server, reason: message))
            }
            return .permanent(.certificate(host: server, reason: message))
        case CURLE_SSL_CACERT_BADFILE:
            return .permanent(.tls(host: server, reason: "cannot use the CA certificate file: \(message)"))
        case CURLE_FILE_COULDNT_READ_FILE:
            return .permanent(
                .curl(code: Int(code.rawValue), message: "cannot read \(DisplayText.url(url.text)): \(message)"))
        case CURLE_OUT_OF_MEMORY:
            // libcurl 7.88 reports a response header line over its 100 KiB limit this way, which
            // blames the machine for what is nearly always the server.
            return .permanent(
                .curl(
                    code: Int(code.rawValue),
                    message: "\(message) (libcurl also says this when \(server) sends a response header line over its 100 KiB limit)"))
        case CURLE_BAD_DOWNLOAD_RESUME:
            return .changed("it is now shorter than the resume offset")
        default:
            return .permanent(.curl(code: Int(code.rawValue), message: message))
        }
    }
}
