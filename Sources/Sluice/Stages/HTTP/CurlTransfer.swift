import CCurl

/// libcurl's process-wide setup is not thread-safe and must run once, before any handle
/// exists. A global `let` is initialised lazily and exactly once (swift_once), from
/// whichever thread first needs it.
let curlGlobalInit: Bool = curl_global_init(Int(CURL_GLOBAL_ALL)) == CURLE_OK

/// One request as libcurl should make it.
struct CurlRequest {
    var url: FetchURL
    /// Complete header lines, credentials already filtered, Range/If-Range included.
    var headers: [String]
    /// file:// only: libcurl seeks there itself (HTTP ranges are headers).
    var resumeFrom: UInt64
}

/// How a perform was cut short from Sluice's side, if it was.
enum TransferInterruption {
    /// The downstream write threw; the error is rethrown as is.
    case sink(Error)
    /// The run was stopped (signal, cancel, another stage's failure).
    case stopped
    /// No byte arrived for the stall timeout.
    case stalled
}

/// What one perform did.
struct CurlOutcome {
    var code: CURLcode
    /// The judgement of the final response's head; nil when none arrived.
    var verdict: ResponseVerdict?
    var interruption: TransferInterruption?
    /// Body bytes passed to the sink.
    var delivered: UInt64
    /// Bytes of a `deliver(skip:)` verdict that never arrived.
    var skipLeft: UInt64
    /// libcurl's error text for `code`.
    var message: String
}

/// One libcurl easy handle, reused for every request of a run (so connections survive
/// across redirects and retries), with the options every request shares.
final class CurlTransfer {
    /// libcurl's receive buffer. While the sink blocks the write callback libcurl stops
    /// reading the socket, so this bounds memory and TCP flow control slows the sender.
    static let receiveBufferBytes = 256 * 1024

    private let handle: UnsafeMutableRawPointer
    private let errorBuffer: UnsafeMutablePointer<CChar>

    init?(options: HTTPOptions) {
        guard curlGlobalInit, let handle = curl_easy_init() else { return nil }
        self.handle = handle
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)

        // Threads: no signals (libcurl would otherwise use SIGALRM for DNS timeouts).
        _ = sluice_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = sluice_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        _ = sluice_setopt_long(handle, CURLOPT_BUFFERSIZE, Self.receiveBufferBytes)
        _ = sluice_setopt_string(handle, CURLOPT_USERAGENT, "sluice/\(Sluice.version)")
        // Redirects are followed by hand (RedirectPolicy); redirect targets never reach libcurl
        // unchecked, and file:// is only ever the user's own URL.
        _ = sluice_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        _ = sluice_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https,file")
        // Bytes exactly as served: offsets and ranges count them, so no content decoding.
        _ = sluice_setopt_long(handle, CURLOPT_HTTP_CONTENT_DECODING, 0)
        _ = sluice_setopt_long(handle, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        _ = sluice_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1)
        // file:// reports its modification time as Last-Modified.
        _ = sluice_setopt_long(handle, CURLOPT_FILETIME, 1)
        if options.insecure {
            _ = sluice_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 0)
            _ = sluice_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 0)
        }
        if let caCertificate = options.caCertificate {
            _ = sluice_setopt_string(handle, CURLOPT_CAINFO, caCertificate)
        }

        // The callbacks reach their TransferContext through the userdata pointer set per perform.
        _ = sluice_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION) { data, size, count, userdata in
            let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
            return TransferContext.from(userdata).body(bytes) ? size * count : 0
        }
        _ = sluice_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION) { data, size, count, userdata in
            let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
            return TransferContext.from(userdata).header(bytes) ? size * count : 0
        }
        _ = sluice_setopt_long(handle, CURLOPT_NOPROGRESS, 0)
        _ = sluice_setopt_xferinfo(handle) { userdata, _, _, _, _ in
            TransferContext.from(userdata).tick() ? 0 : 1
        }
    }

    deinit {
        curl_easy_cleanup(handle)
        errorBuffer.deallocate()
    }

    /// Makes one request and streams the accepted body into `sink`. `decide` judges the final
    /// response's head before any body byte moves; anything but `.deliver` ends the request.
    func perform(_ request: CurlRequest, into sink: ByteSink, control: RunControl, stallTimeout: Double,
                 decide: @escaping (HTTPResponseHead) -> ResponseVerdict) -> CurlOutcome {
        let context = TransferContext(sink: sink, control: control, stallTimeout: stallTimeout, decide: decide)
        var headers: UnsafeMutablePointer<curl_slist>?
        for line in request.headers { headers = curl_slist_append(headers, line) }
        defer {
            // The handle keeps the list's address: detach before freeing.
            _ = sluice_setopt_slist(handle, CURLOPT_HTTPHEADER, nil)
            curl_slist_free_all(headers)
        }
        _ = sluice_setopt_string(handle, CURLOPT_URL, request.url.text)
        _ = sluice_setopt_slist(handle, CURLOPT_HTTPHEADER, headers)
        _ = sluice_setopt_offt(handle, CURLOPT_RESUME_FROM_LARGE, curl_off_t(request.resumeFrom))
        errorBuffer[0] = 0

        let code: CURLcode = withExtendedLifetime(context) {
            let userdata = Unmanaged.passUnretained(context).toOpaque()
            _ = sluice_setopt_pointer(handle, CURLOPT_WRITEDATA, userdata)
            _ = sluice_setopt_pointer(handle, CURLOPT_HEADERDATA, userdata)
            _ = sluice_setopt_pointer(handle, CURLOPT_XFERINFODATA, userdata)
            return curl_easy_perform(handle)
        }
        // A response without a head block (an empty file:// read) is judged at its end.
        if code == CURLE_OK && context.verdict == nil { context.decideNow() }

        let detail = String(cString: errorBuffer)
        return CurlOutcome(code: code, verdict: context.verdict, interruption: context.interruption,
                           delivered: context.delivered, skipLeft: context.skip,
                           message: detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail)
    }
}

/// The state libcurl's callbacks share during one perform. All three callbacks run on the
/// thread inside `curl_easy_perform`, so no locking is needed.
private final class TransferContext {
    let sink: ByteSink
    let control: RunControl
    let stallTimeout: Double
    let decide: (HTTPResponseHead) -> ResponseVerdict

    private var head = HTTPResponseHead()
    private(set) var verdict: ResponseVerdict?
    private(set) var interruption: TransferInterruption?
    /// Body bytes still to drop (a 200 answering a range request).
    private(set) var skip: UInt64 = 0
    private(set) var delivered: UInt64 = 0
    /// When a byte last arrived. Time spent blocked in `sink.write` does not count as a stall.
    private var lastActivity = Monotonic.seconds()

    init(sink: ByteSink, control: RunControl, stallTimeout: Double,
         decide: @escaping (HTTPResponseHead) -> ResponseVerdict) {
        self.sink = sink
        self.control = control
        self.stallTimeout = stallTimeout
        self.decide = decide
    }

    static func from(_ userdata: UnsafeMutableRawPointer?) -> TransferContext {
        Unmanaged<TransferContext>.fromOpaque(userdata!).takeUnretainedValue()
    }

    func decideNow() {
        let verdict = decide(head)
        self.verdict = verdict
        if case .deliver(let skip, _, _) = verdict { self.skip = skip }
    }

    /// One header line. Returns false to abort: the response is not one whose body we want.
    func header(_ bytes: UnsafeRawBufferPointer) -> Bool {
        lastActivity = Monotonic.seconds()
        guard verdict == nil else { return true }  // trailers after a chunked body
        guard head.consume(String(decoding: bytes, as: UTF8.self)) == .complete else { return true }
        decideNow()
        if case .deliver? = verdict { return true }
        return false
    }

    /// A piece of the body. Returns false to abort (nothing wanted, stopped, or the sink threw).
    func body(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if verdict == nil { decideNow() }
        guard case .deliver? = verdict else { return false }
        if control.isStopped {
            interruption = .stopped
            return false
        }
        var rest = bytes
        if skip > 0 {
            let dropped = Int(min(skip, UInt64(rest.count)))
            skip -= UInt64(dropped)
            rest = UnsafeRawBufferPointer(rebasing: rest[dropped...])
        }
        if !rest.isEmpty {
            do {
                try sink.write(rest)
            } catch {
                interruption = .sink(error)
                return false
            }
            delivered += UInt64(rest.count)
        }
        lastActivity = Monotonic.seconds()
        return true
    }

    /// libcurl's progress tick (at least about once a second, even when idle).
    func tick() -> Bool {
        if control.isStopped {
            interruption = .stopped
            return false
        }
        if Monotonic.seconds() - lastActivity > stallTimeout {
            interruption = .stalled
            return false
        }
        return true
    }
}
