/// How `fetch` behaves on the wire: retries, stall detection, extra headers, TLS trust.
public struct HTTPOptions: Sendable {
    /// Transient failures (drops, timeouts, stalls, 408/429/5xx) retried in a row before giving
    /// up. An attempt that delivered bytes resets the count: a flaky link that keeps making
    /// progress never exhausts it, one that makes none fails after `retries` retries.
    public var retries = 5
    /// Seconds without a single byte (connect, headers or body) before the attempt is
    /// abandoned and retried at the current offset.
    public var stallTimeout: Double = 30
    /// An attempt averaging fewer than `speedLimit` bytes per second over `speedTime` seconds
    /// is abandoned and retried at the current offset (curl's `-Y`/`-y`); 0 (the default)
    /// turns the check off. Time the downstream stages keep the source waiting does not count.
    public var speedLimit: UInt64 = 0
    public var speedTime: Double = 30
    /// Seconds the whole fetch may take, retries and waits included; then the run fails
    /// (exit 3) with what arrived kept for a resume. nil (the default): no limit.
    public var maxTime: Double? = nil
    /// Extra request headers, `Name: value`, as given with `-H`.
    public var headers: [String] = []
    /// A PEM bundle to trust instead of the system's CA store (`--cacert`).
    public var caCertificate: String? = nil
    /// A directory of hashed CA certificates to trust (`SSL_CERT_DIR`).
    public var caDirectory: String? = nil
    /// Skip TLS certificate and host name verification (`--insecure`).
    public var insecure = false
    /// The proxy for every request (`--proxy`); nil leaves libcurl's environment variables
    /// (`http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`) in charge.
    public var proxy: String? = nil
    /// Hosts reached without the proxy, comma-separated, `*` for all (`--noproxy`).
    public var noProxy: String? = nil
    /// Credentials from a netrc file: `~/.netrc` (`--netrc`) or this one (`--netrc-file`).
    /// They go to the matching host only and are never printed or checkpointed.
    public var netrc = false
    public var netrcFile: String? = nil
    /// The first retry's delay in seconds; each further retry doubles it (with jitter, capped).
    public var backoffBase: Double = 0.5
    /// A server's `Retry-After` is honoured up to this many seconds.
    public var maxRetryAfter: Double = 300
    /// Ranged connections for one fetch (1…32); nil: 1, and 4 once the network proves slower
    /// than the pipeline, when the server answers ranges and at least 64 MiB remain
    /// (MultiFetch, ConnectionProbe). 1 is the single transfer, exactly.
    public var connections: Int? = nil
    /// MultiFetch's window and segment sizes (tests shrink them).
    var tuning = MultiFetch.Tuning()

    public init() {}
}
