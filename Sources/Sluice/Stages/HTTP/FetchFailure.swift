import CCurl

/// Why one attempt of `fetch` failed, sorted by what the retry loop does about it.
enum FetchFailure: Error, Equatable {
    /// Worth another attempt at the current offset (drops, timeouts, stalls, 408/429/5xx),
    /// after `retryAfter` seconds when the server said so.
    case transient(String, retryAfter: Double? = nil)
    /// Slower than `--speed-limit`: retried like a transient failure, but the bytes the slow
    /// attempt delivered do not reset the count, so a trickle ends after `--retries` attempts.
    case tooSlow(String)
    /// Retrying the same URL cannot help (404, DNS, TLS verification): exit 3 at once, unless
    /// the URL was a redirect target from an earlier attempt (signed URLs expire), when the
    /// URL the user gave is asked once more.
    case permanent(String)
    /// The server's answer contradicts itself (duplicate Content-Length, a body past its
    /// Content-Range): nothing from it can be trusted and no retry is made.
    case malformed(String)
    /// `--max-time` passed: the run ends, with what was delivered kept for a resume.
    case outOfTime(String)
    /// The remote is no longer the version already (partly) delivered.
    case changed(String)

    /// Sorts a libcurl result that ended an attempt before a response decided anything.
    /// `message` is libcurl's error buffer (or its generic text); `url` is the request's.
    static func from(_ code: CURLcode, message: String, url: FetchURL) -> FetchFailure {
        switch code {
        case CURLE_COULDNT_CONNECT, CURLE_PARTIAL_FILE, CURLE_OPERATION_TIMEDOUT, CURLE_SEND_ERROR,
            CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_SSL_CONNECT_ERROR,
            CURLE_AGAIN, CURLE_HTTP3, CURLE_QUIC_CONNECT_ERROR:
            return .transient(message)
        case CURLE_COULDNT_RESOLVE_HOST:
            return .permanent("cannot resolve host \(DisplayText.escaped(url.host)): \(message)")
        case CURLE_PEER_FAILED_VERIFICATION:
            return .permanent(
                "TLS certificate of \(DisplayText.escaped(url.authority)) could not be verified: \(message)"
                    + " (pass --cacert FILE to trust a private CA)")
        case CURLE_SSL_CACERT_BADFILE:
            return .permanent("cannot use the CA certificate file: \(message)")
        case CURLE_FILE_COULDNT_READ_FILE:
            return .permanent("cannot read \(DisplayText.url(url.text)): \(message)")
        case CURLE_BAD_DOWNLOAD_RESUME:
            return .changed("it is now shorter than the resume offset")
        default:
            return .permanent(message)
        }
    }
}
