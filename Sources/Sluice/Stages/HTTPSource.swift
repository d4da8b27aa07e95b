import CCurl
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Synchronization

/// `fetch URL`: an http, https or file URL through libcurl, resumed with `Range` and
/// `If-Range` (docs/ARCHITECTURE.md, "Resume rules").
///
/// Within one run, transient failures are retried at the current offset, so the stages
/// downstream never notice; a response is judged (ResumeJudge) before any of its body moves,
/// so bytes of another version are never spliced onto the ones already delivered.
public final class HTTPSource: ByteSource {
    /// The URL as checkpoints and messages name it: userinfo and query values redacted.
    private let shownURL: String
    /// The URL as given in the spec, parsed: every attempt's redirect chain starts here.
    private let start: FetchURL
    private let options: HTTPOptions
    private let control: RunControl
    private let redirects: RedirectPolicy
    private let policy: RetryPolicy
    /// `-H` headers minus the ones Sluice must own (Range, If-Range).
    private let userHeaders: [String]
    /// Where `run` starts: the checkpoint's offset, or zero.
    private let startOffset: UInt64
    /// Resuming a checkpoint of a URL with a query: the query may be a fresh signature for
    /// another object, so the server must prove it is the same entity (ResumeJudge).
    private let requireProof: Bool
    /// Secrets of the URL and the proxy (password, query values), scrubbed from every
    /// message libcurl writes, in case one quotes them.
    private let secrets: [String]
    /// Validators as first seen. Set by the source thread before the first byte moves; read by
    /// `state(at:)`, which the engine may call from another thread.
    private let firstSeen: Mutex<FetchValidators?>
    /// Whether the resume was already said to rest on the length alone (said once a run).
    private let saidUnvalidated = Mutex(false)
    /// Whether a response of this run was accepted: a change found after that happened
    /// during the run (`SourceChanged.duringRun`).
    private let acceptedThisRun = Mutex(false)

    /// Things the user should know that are not failures; the CLI prints them.
    public let warnings: [String]

    /// `resumeFrom`: the checkpoint's source state (offset and validators), or nil to start at zero.
    public init(url: String, options: HTTPOptions, resumeFrom: SourceState?, control: RunControl) throws {
        if let reason = FetchURL.libcurlUnavailable { throw SluiceError.usage(reason) }
        guard let start = FetchURL(url), ["http", "https", "file"].contains(start.scheme) else {
            throw SluiceError.usage("fetch: '\(DisplayText.url(url))' is not an http, https or file URL")
        }
        shownURL = DisplayText.redactedURL(url)
        self.start = start
        self.options = options
        self.control = control
        redirects = RedirectPolicy(original: start)
        policy = RetryPolicy(
            retries: options.retries,
            backoff: RetryBackoff(base: options.backoffBase, maxRetryAfter: options.maxRetryAfter))
        startOffset = resumeFrom?.offset ?? 0
        // Offsets become curl_off_t and Range values: a checkpoint claiming more is damaged.
        guard startOffset <= HTTPNumber.maximum else {
            throw StateRejected("its source offset \(startOffset) is beyond 2^63-1")
        }
        requireProof = resumeFrom != nil && (resumeFrom?.offset ?? 0) > 0 && start.query != nil
        firstSeen = Mutex(resumeFrom.map(FetchValidators.init))
        secrets = Self.secrets(in: url) + (options.proxy.map(Self.secrets(in:)) ?? [])

        var warnings: [String] = []
        if options.insecure { warnings.append("warning: --insecure: TLS certificates are not verified") }
        let owned: Set<String> = ["range", "if-range"]
        userHeaders = options.headers.filter { !owned.contains(RedirectPolicy.name(of: $0)) }
        for header in options.headers where owned.contains(RedirectPolicy.name(of: header)) {
            let name = DisplayText.quoted(RedirectPolicy.name(of: header), limit: 40)
            warnings.append("ignoring -H \(name): sluice sets Range and If-Range itself to resume")
        }
        self.warnings = warnings
    }

    public func state(at offset: UInt64) -> SourceState {
        let seen = firstSeen.withLock { $0 }
        return SourceState(
            kind: "fetch", location: shownURL, offset: offset, etag: seen?.etag,
            lastModified: seen?.lastModified, totalLength: seen?.totalLength,
            lastModifiedIsStrong: seen?.lastModifiedIsStrong == true ? true : nil)
    }

    /// The connection count asked for (nil: the default rule).
    var connections: Int? { options.connections }

    public func run(into sink: ByteSink) throws {
        try refuseLocalFileThatIsNotRegular()
        let deadline = options.maxTime.map { Monotonic.seconds() + $0 }
        // One connection is today's single transfer, exactly; otherwise MultiFetch decides
        // from the first response how many to open (and may still use one).
        guard options.connections == 1 else {
            return try MultiFetch(source: self, options: options, control: control)
                .run(from: startOffset, deadline: deadline, into: sink)
        }
        try transfer(from: startOffset, deadline: deadline, into: sink, control: control)
    }

    /// libcurl reads a file:// directory as an empty file (exit 0 with nothing) and blocks in
    /// open(2) on a FIFO nobody writes to, past --stall-timeout and the first signal; neither
    /// can be resumed by offset. `read PATH` is the stage for pipes and devices.
    private func refuseLocalFileThatIsNotRegular() throws {
        guard let path = start.localPath, let found = POSIX.statFacts(path) else { return }
        let problem: String
        switch found.kind {
        case .regular: return
        case .directory: problem = "it is a directory, not a file"
        default: problem = "\(found.kind.refusal); fetch resumes file:// by offset, so use 'read PATH' for pipes and devices"
        }
        throw SluiceError.transfer(
            url: shownURL,
            cause: .curl(code: Int(CURLE_FILE_COULDNT_READ_FILE.rawValue), message: "cannot read \(shownURL): \(problem)"))
    }

    /// Attempts until the whole resource is delivered (or up to `until`, asked for as a bounded
    /// range); between attempts `RetryPolicy` decides. `screen` sees every final response head
    /// (and the offset its request asked for) before the ResumeJudge and may override its verdict (MultiFetch's extra connections);
    /// `connection` is a handle to reuse (one per MultiFetch connection), or nil for a new one.
    /// `whole`: ask for the whole resource without a Range and skip to the offset (for a
    /// server that refuses ranges; the ResumeJudge accepts that 200 only from the same version).
    func transfer(
        from first: UInt64, until: UInt64? = nil, deadline: Double?, into sink: ByteSink,
        control: RunControl, over connection: CurlTransfer? = nil, whole: Bool = false,
        screen: ((HTTPResponseHead, UInt64) -> ResponseVerdict?)? = nil
    ) throws {
        guard let transfer = connection ?? CurlTransfer(options: options) else {
            throw SluiceError.transfer(url: shownURL, cause: .curlUnavailable)
        }
        var offset = first
        // Where the last redirect chain ended: later attempts of this run go straight there.
        var location = start
        var streak = RetryPolicy.Streak()
        while true {
            try control.check()
            let before = offset
            let failure: FetchFailure
            do {
                try attempt(
                    transfer, from: &location, offset: &offset, until: until, deadline: deadline, into: sink,
                    control: control, whole: whole, screen: screen)
                return
            } catch let caught as FetchFailure {
                failure = caught
            }
            let decision = policy.decide(
                failure, streak: &streak, progressed: offset > before,
                atRedirectTarget: location != start,
                secondsLeft: deadline.map { $0 - Monotonic.seconds() })
            switch decision {
            case .giveUp(let cause, let gaveUp):
                throw SluiceError.transfer(url: shownURL, cause: cause.mapText(scrub), gaveUp: gaveUp)
            case .changed(let reason):
                throw SourceChanged(location: shownURL, reason: scrub(reason), duringRun: acceptedThisRun.withLock { $0 })
            case .retry(let number, let delay, let fromStart, let reason):
                if fromStart { location = start }
                control.progress.emit(.retry(attempt: number, delay: delay, reason: scrub(reason.description)))
                try RetryBackoff.wait(delay, control: control)
            }
        }
    }

    /// One attempt: requests from `offset`, following redirects, and streams the body on.
    /// Returns when the whole resource has been delivered; throws FetchFailure (or the
    /// sink's error, or the run's failure when stopped). `AttemptJudge` decides each step.
    private func attempt(
        _ transfer: CurlTransfer, from location: inout FetchURL, offset: inout UInt64,
        until: UInt64?, deadline: Double?, into sink: ByteSink, control: RunControl, whole: Bool,
        screen: ((HTTPResponseHead, UInt64) -> ResponseVerdict?)?
    ) throws {
        var current = location
        var hops = 0
        let limits = TransferLimits(
            stallTimeout: options.stallTimeout, speedLimit: options.speedLimit,
            speedTime: options.speedTime, deadline: deadline)
        while true {
            let known = firstSeen.withLock { $0 }
            let requested = offset
            let judge = ResumeJudge(
                offset: requested, known: known, server: current.authority,
                requireProof: requireProof && requested == startOffset)
            let outcome = transfer.perform(
                request(for: current, offset: whole ? 0 : offset, until: until, known: known),
                offset: requested, into: sink, control: control,
                limits: limits
            ) { [self] head in
                let verdict = screen?(head, requested) ?? judge.judge(head)
                // Recorded before the first byte moves, so every cut carries them.
                if case .deliver(_, let seen, _) = verdict, requested == 0 || known == nil {
                    firstSeen.withLock { $0 = seen }
                }
                if case .deliver = verdict { acceptedThisRun.withLock { $0 = true } }
                if case .deliver(_, let seen, _) = verdict, requested > 0, requested == startOffset {
                    noticeUnvalidatedResume(known: known, seen: seen, server: current.authority)
                }
                return verdict
            }
            offset += outcome.delivered

            var trip: TransferTrip?
            switch outcome.interruption {
            case .sink(let error)?: throw error
            case .stopped?: throw control.failure ?? .cancelled
            case .tripped(let what)?: trip = what
            case nil: break
            }
            if case .deliver? = outcome.verdict { location = current }
            // A segment: everything asked for has arrived.
            if let until, offset >= until, case .deliver? = outcome.verdict { return }
            let facts = PerformFacts(
                code: outcome.code, message: outcome.message, osErrno: outcome.osErrno, verdict: outcome.verdict, trip: trip,
                skipLeft: outcome.skipLeft, requested: requested, offset: offset,
                knownTotal: firstSeen.withLock { $0?.totalLength })
            switch AttemptJudge.next(after: facts, url: current, limits: limits) {
            case .finished:
                return
            case .askForRest:
                continue
            case .follow(let target):
                hops += 1
                current = try redirects.follow(target, from: current, hops: hops)
            case .fail(let failure):
                throw failure
            }
        }
    }

    /// A server that sends neither ETag nor Last-Modified leaves the resume only the length
    /// to check against: a change that keeps the length cannot be seen here, so say so
    /// (a `verify` stage still catches it before anything is published).
    private func noticeUnvalidatedResume(known: FetchValidators?, seen: FetchValidators, server: String) {
        guard known?.hasValidator != true, !seen.hasValidator,
            saidUnvalidated.withLock({ said in
                defer { said = true }
                return !said
            })
        else { return }
        control.progress.emit(
            .notice(
                "resuming at byte \(startOffset): \(DisplayText.escaped(server)) sends no ETag or Last-Modified,"
                    + " so only the length shows the content is unchanged"))
    }

    private func request(for url: FetchURL, offset: UInt64, until: UInt64?, known: FetchValidators?) -> CurlRequest {
        if url.isFile { return CurlRequest(url: url, headers: [], resumeFrom: offset) }
        var headers = redirects.headers(userHeaders, for: url)
        if let until, until > offset {
            headers.append("Range: bytes=\(offset)-\(until - 1)")
            if let ifRange = known?.ifRange { headers.append("If-Range: \(ifRange)") }
        } else if offset > 0 {
            headers.append("Range: bytes=\(offset)-")
            if let ifRange = known?.ifRange { headers.append("If-Range: \(ifRange)") }
        }
        return CurlRequest(url: url, headers: headers, resumeFrom: 0)
    }

    /// `reason` with every secret of the URLs replaced by `***`.
    private func scrub(_ reason: String) -> String {
        secrets.reduce(reason) { $0.replacingAll($1, with: DisplayText.redactedMark) }
    }

    /// The parts of a URL that `DisplayText.redactedURL` hides, long enough to be worth
    /// scrubbing from free text (a one-letter value would mangle every message).
    private static func secrets(in url: String) -> [String] {
        guard let parts = URLComponents(string: url) else { return [] }
        let values =
            [parts.password, parts.percentEncodedPassword] + (parts.percentEncodedQueryItems ?? []).map(\.value)
            + (parts.queryItems ?? []).map(\.value)
        return Array(Set(values.compactMap { $0 }.filter { $0.count >= 4 })).sorted { $0.count > $1.count }
    }
}

extension HTTPSource {
    public var notices: [String] { warnings }
}

extension StageKind {
    static let fetch = StageKind.source(
        "fetch",
        arguments: [
            StageArgument("URL", "a URL (http://, https:// or file://)") { text throws(StageWordError) in
                try URLCheck.validate(text)
                return text
            }
        ],
        options: [
            .integer(
                "connections",
                "ranged connections, delivered in order (default: 1, and 4 once the network"
                    + " proves slower than the pipeline, if the server answers ranges and 64 MiB remain)",
                in: 1...MultiFetch.maxConnections
            ).transport()
        ],
        summary: "source: http://, https://, file:// (libcurl); resumed with Range/If-Range",
        nsPerByte: 0.3
    ) { spec, context, saved in
        var http = context.options.http
        if let connections = spec.option("connections").flatMap({ Int($0) }) { http.connections = connections }
        return try HTTPSource(url: spec.arguments[0], options: http, resumeFrom: saved, control: context.control)
    }
}
