import CCurl
import Synchronization

/// `fetch URL`: an http, https or file URL through libcurl, resumed with `Range` and
/// `If-Range` (docs/ARCHITECTURE.md, "Resume rules").
///
/// Within one run, transient failures are retried at the current offset, so the stages
/// downstream never notice; a response is judged (ResumeJudge) before any of its body moves,
/// so bytes of another version are never spliced onto the ones already delivered.
public final class HTTPSource: ByteSource {
    /// The URL as given in the spec; checkpoints and messages name this one.
    private let url: String
    private let start: FetchURL
    private let options: HTTPOptions
    private let control: RunControl
    private let redirects: RedirectPolicy
    private let backoff: RetryBackoff
    /// `-H` headers minus the ones Sluice must own (Range, If-Range).
    private let userHeaders: [String]
    /// Where `run` starts: the checkpoint's offset, or zero.
    private let startOffset: UInt64
    /// Validators as first seen. Set by the source thread before the first byte moves; read by
    /// `state(at:)`, which the engine may call from another thread.
    private let firstSeen: Mutex<FetchValidators?>

    /// Things the user should know that are not failures; the CLI prints them.
    public let warnings: [String]

    /// `resumeFrom`: the checkpoint's source state (offset and validators), or nil to start at zero.
    public init(url: String, options: HTTPOptions, resumeFrom: SourceState?, control: RunControl) throws {
        guard let start = FetchURL(url), ["http", "https", "file"].contains(start.scheme) else {
            throw SluiceError.usage("fetch: '\(url)' is not an http, https or file URL")
        }
        self.url = url
        self.start = start
        self.options = options
        self.control = control
        redirects = RedirectPolicy(original: start)
        backoff = RetryBackoff(base: options.backoffBase, maxRetryAfter: options.maxRetryAfter)
        startOffset = resumeFrom?.offset ?? 0
        firstSeen = Mutex(resumeFrom.map(FetchValidators.init))

        var warnings: [String] = []
        if options.insecure { warnings.append("warning: --insecure: TLS certificates are not verified") }
        let owned: Set<String> = ["range", "if-range"]
        userHeaders = options.headers.filter { !owned.contains(RedirectPolicy.name(of: $0)) }
        for header in options.headers where owned.contains(RedirectPolicy.name(of: header)) {
            warnings.append("ignoring -H '\(header)': sluice sets Range and If-Range itself to resume")
        }
        self.warnings = warnings
    }

    public func state(at offset: UInt64) -> SourceState {
        let seen = firstSeen.withLock { $0 }
        return SourceState(kind: "fetch", location: url, offset: offset, etag: seen?.etag,
                           lastModified: seen?.lastModified, totalLength: seen?.totalLength)
    }

    public func run(into sink: ByteSink) throws {
        guard let transfer = CurlTransfer(options: options) else {
            throw SluiceError.transfer(url: url, reason: "libcurl could not be initialised")
        }
        var offset = startOffset
        // Where the last redirect chain ended: later attempts of this run go straight there.
        var location = start
        var failuresInARow = 0
        while true {
            try control.check()
            let before = offset
            do {
                try attempt(transfer, from: &location, offset: &offset, into: sink)
                return
            } catch let failure as FetchFailure {
                switch failure {
                case .permanent(let reason):
                    // Redirect targets may be temporary (signed URLs expire): before giving up,
                    // go back once to the URL the user gave and follow its redirects afresh.
                    if location != start {
                        location = start
                        continue
                    }
                    throw SluiceError.transfer(url: url, reason: reason)
                case .changed(let reason):
                    throw SourceChanged(location: url, reason: reason)
                case .transient(let reason, let retryAfter):
                    // Progress proves the link works: only failures in a row count.
                    if offset > before { failuresInARow = 0 }
                    failuresInARow += 1
                    guard failuresInARow <= options.retries else {
                        let tries = options.retries == 1 ? "1 retry" : "\(options.retries) retries"
                        throw SluiceError.transfer(url: url, reason: "\(reason) (gave up after \(tries))")
                    }
                    let delay = backoff.delay(forRetry: failuresInARow, retryAfter: retryAfter)
                    control.progress.emit(.retry(attempt: failuresInARow, delay: delay, reason: reason))
                    try RetryBackoff.wait(delay, control: control)
                }
            }
        }
    }

    /// One attempt: requests from `offset`, following redirects, and streams the body on.
    /// Returns when the whole resource has been delivered; throws FetchFailure (or the
    /// sink's error, or the run's failure when stopped).
    private func attempt(_ transfer: CurlTransfer, from location: inout FetchURL, offset: inout UInt64,
                         into sink: ByteSink) throws {
        var current = location
        var hops = 0
        while true {
            let known = firstSeen.withLock { $0 }
            let requested = offset
            let judge = ResumeJudge(offset: requested, known: known, server: current.authority)
            let outcome = transfer.perform(request(for: current, offset: offset, known: known), into: sink,
                                           control: control, stallTimeout: options.stallTimeout) { [self] head in
                let verdict = judge.judge(head)
                // Recorded before the first byte moves, so every cut carries them.
                if case .deliver(_, let seen, _) = verdict, requested == 0 || known == nil {
                    firstSeen.withLock { $0 = seen }
                }
                return verdict
            }
            offset += outcome.delivered

            switch outcome.interruption {
            case .sink(let error)?: throw error
            case .stopped?: throw control.failure ?? .cancelled
            case .stalled?:
                let timeout = options.stallTimeout
                let seconds = timeout == timeout.rounded() && abs(timeout) < 1e15 ? String(Int(timeout)) : String(timeout)
                throw FetchFailure.transient("no data from \(current.authority) for \(seconds) s")
            case nil: break
            }

            switch outcome.verdict {
            case .redirect(let target)?:
                hops += 1
                current = try redirects.follow(target, from: current, hops: hops)
            case .complete?:
                return
            case .failed(let failure)?:
                throw failure
            case .deliver(_, let seen, let end)?:
                location = current
                guard outcome.code == CURLE_OK else {
                    throw FetchFailure.from(outcome.code, message: "\(current.authority): \(outcome.message)",
                                            url: current)
                }
                if outcome.skipLeft > 0 {
                    throw FetchFailure.changed("its full content is now shorter than the resume offset")
                }
                // More than announced: the server's framing cannot be trusted.
                if let limit = end ?? firstSeen.withLock({ $0?.totalLength }), offset > limit {
                    throw FetchFailure.permanent("\(current.authority) sent \(offset - limit) bytes more than it announced")
                }
                // A close-delimited body cannot tell a drop from its end; the lengths known can.
                if let end, offset < end {
                    throw FetchFailure.transient("\(current.authority) ended the response at byte \(offset) of \(end)")
                }
                if let total = firstSeen.withLock({ $0?.totalLength }) ?? seen.totalLength, offset < total {
                    // A server may answer a range with fewer bytes than asked: ask for the rest.
                    if end == offset { continue }
                    throw FetchFailure.transient("\(current.authority) ended the response at byte \(offset) of \(total)")
                }
                return
            case nil:
                throw FetchFailure.from(outcome.code, message: outcome.message, url: current)
            }
        }
    }

    private func request(for url: FetchURL, offset: UInt64, known: FetchValidators?) -> CurlRequest {
        if url.isFile { return CurlRequest(url: url, headers: [], resumeFrom: offset) }
        var headers = redirects.headers(userHeaders, for: url)
        if offset > 0 {
            headers.append("Range: bytes=\(offset)-")
            if let ifRange = known?.ifRange { headers.append("If-Range: \(ifRange)") }
        }
        return CurlRequest(url: url, headers: headers, resumeFrom: 0)
    }
}

extension HTTPSource {
    public var notices: [String] { warnings }
}

extension StageKind {
    static let fetch = StageKind.source(
        "fetch",
        arguments: [StageArgument("URL", "a URL (http://, https:// or file://)") { text throws(StageWordError) in
            try URLCheck.validate(text)
            return text
        }],
        summary: "source: http://, https://, file:// (libcurl); resumed with Range/If-Range",
        nsPerByte: 0.3
    ) { spec, context, saved in
        try HTTPSource(url: spec.arguments[0], options: context.options.http, resumeFrom: saved, control: context.control)
    }
}
