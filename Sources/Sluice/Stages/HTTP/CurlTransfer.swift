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
    /// A limit of the transfer itself (stall, speed, deadline, an overrunning body).
    case tripped(TransferTrip)
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
    /// The system error behind `code` (a refused connection's ECONNREFUSED), 0 if none.
    var osErrno: Int32 = 0
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
        if let caDirectory = options.caDirectory {
            _ = sluice_setopt_string(handle, CURLOPT_CAPATH, caDirectory)
        }
        if let proxy = options.proxy {
            _ = sluice_setopt_string(handle, CURLOPT_PROXY, proxy)
        }
        if let noProxy = options.noProxy {
            _ = sluice_setopt_string(handle, CURLOPT_NOPROXY, noProxy)
        }
        if options.netrc || options.netrcFile != nil {
            // Optional: credentials in the URL win over the file, as with curl --netrc-optional.
            _ = sluice_setopt_long(handle, CURLOPT_NETRC, Int(CURL_NETRC_OPTIONAL.rawValue))
            if let file = options.netrcFile { _ = sluice_setopt_string(handle, CURLOPT_NETRC_FILE, file) }
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
    /// `offset`: the source offset the response's body starts at (after any skip), so the
    /// verdict's `end` bounds what may be delivered.
    func perform(
        _ request: CurlRequest, offset: UInt64, into sink: ByteSink, control: RunControl,
        limits: TransferLimits, decide: @escaping (HTTPResponseHead) -> ResponseVerdict
    ) -> CurlOutcome {
        let context = TransferContext(
            sink: sink, control: control, offset: offset, watch: TransferWatch(limits, now: Monotonic.seconds()),
            decide: decide)
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
        var osErrno = 0
        if code != CURLE_OK { _ = sluice_getinfo_long(handle, CURLINFO_OS_ERRNO, &osErrno) }
        return CurlOutcome(
            code: code, verdict: context.verdict, interruption: context.interruption,
            delivered: context.delivered, skipLeft: context.skip,
            message: detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail,
            osErrno: Int32(clamping: osErrno))
    }
}

/// The state libcurl's callbacks share during one perform. All three callbacks run on the
/// thread inside `curl_easy_perform`, so no locking is needed.
private final class TransferContext {
    let sink: ByteSink
    let control: RunControl
    /// The source offset of the first body byte after the skip.
    let offset: UInt64
    let decide: (HTTPResponseHead) -> ResponseVerdict

    private var head = HTTPResponseHead()
    private var watch: TransferWatch
    private(set) var verdict: ResponseVerdict?
    private(set) var interruption: TransferInterruption?
    /// Body bytes still to drop (a 200 answering a range request).
    private(set) var skip: UInt64 = 0
    /// Body bytes the verdict allows after the skip (nil: no end known). Bytes past it are
    /// never delivered: a checkpoint must never record a byte the fetch then rejects.
    private var room: UInt64?
    private(set) var delivered: UInt64 = 0

    init(
        sink: ByteSink, control: RunControl, offset: UInt64, watch: TransferWatch,
        decide: @escaping (HTTPResponseHead) -> ResponseVerdict
    ) {
        self.sink = sink
        self.control = control
        self.offset = offset
        self.watch = watch
        self.decide = decide
    }

    static func from(_ userdata: UnsafeMutableRawPointer?) -> TransferContext {
        Unmanaged<TransferContext>.fromOpaque(userdata!).takeUnretainedValue()
    }

    func decideNow() {
        let verdict = decide(head)
        self.verdict = verdict
        if case .deliver(let skip, _, let end) = verdict {
            self.skip = skip
            room = end.map { $0 > offset ? $0 - offset : 0 }
        }
    }

    /// One header line. Returns false to abort: the response is not one whose body we want.
    func header(_ bytes: UnsafeRawBufferPointer) -> Bool {
        watch.heardFrom(now: Monotonic.seconds())
        guard verdict == nil else { return true }  // trailers after a chunked body
        guard head.consume(String(decoding: bytes, as: UTF8.self)) == .complete else { return true }
        decideNow()
        if case .deliver? = verdict { return true }
        return false
    }

    /// A piece of the body. Returns false to abort (nothing wanted, stopped, too much, or the sink threw).
    func body(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if verdict == nil { decideNow() }
        guard case .deliver? = verdict else { return false }
        if control.isStopped {
            interruption = .stopped
            return false
        }
        watch.received(bytes.count, now: Monotonic.seconds())
        var rest = bytes
        if skip > 0 {
            let dropped = Int(min(skip, UInt64(rest.count)))
            skip -= UInt64(dropped)
            rest = UnsafeRawBufferPointer(rebasing: rest[dropped...])
        }
        var overran = false
        if let room, UInt64(rest.count) > room - delivered {
            rest = UnsafeRawBufferPointer(rebasing: rest[..<Int(room - delivered)])
            overran = true
        }
        if !rest.isEmpty {
            let started = Monotonic.seconds()
            do {
                try sink.write(rest)
            } catch {
                interruption = .sink(error)
                return false
            }
            delivered += UInt64(rest.count)
            // Time spent blocked downstream is not the server's slowness.
            watch.excuse(since: started, now: Monotonic.seconds())
        }
        if overran {
            interruption = .tripped(.overran)
            return false
        }
        return true
    }

    /// libcurl's progress tick (at least about once a second, even when idle).
    func tick() -> Bool {
        if control.isStopped {
            interruption = .stopped
            return false
        }
        if let trip = watch.check(now: Monotonic.seconds()) {
            interruption = .tripped(trip)
            return false
        }
        return true
    }
}
