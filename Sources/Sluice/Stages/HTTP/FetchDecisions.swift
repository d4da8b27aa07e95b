import CCurl

/// The facts of one finished perform, as `AttemptJudge` needs them.
struct PerformFacts: Equatable {
    /// libcurl's result and error text.
    var code: CURLcode
    var message: String
    /// The system error behind `code`, 0 if none.
    var osErrno: Int32 = 0
    /// The final response's verdict; nil when no head arrived.
    var verdict: ResponseVerdict?
    /// The limit that cut the request short, if one did.
    var trip: TransferTrip?
    /// Bytes of a `deliver(skip:)` that never arrived.
    var skipLeft: UInt64 = 0
    /// The source offset where the request began, and where it stands now.
    var requested: UInt64
    var offset: UInt64
    /// The total length first seen for this resource (this run or the checkpoint).
    var knownTotal: UInt64?
}

/// What an attempt does after one perform.
enum AttemptNext: Equatable {
    /// The whole resource has been delivered.
    case finished
    /// Ask the `Location` (not yet resolved) next.
    case follow(String)
    /// The server answered the range with fewer bytes than asked (and said so): ask for the rest.
    case askForRest
    /// The attempt failed; the retry policy decides what follows.
    case fail(FetchFailure)
}

/// The pure half of an attempt: from what one perform did to what comes next. The caller
/// (`HTTPSource.attempt`) performs requests and acts on the answer.
enum AttemptJudge {
    static func next(after facts: PerformFacts, url: FetchURL, limits: TransferLimits) -> AttemptNext {
        let server = DisplayText.escaped(url.authority)
        if let trip = facts.trip {
            switch trip {
            case .stalled:
                return .fail(.transient(.stalled(server: server, seconds: limits.stallTimeout)))
            case .tooSlow:
                return .fail(.tooSlow(.tooSlow(server: server, bytesPerSecond: limits.speedLimit, seconds: limits.speedTime)))
            case .deadline:
                return .fail(.outOfTime(.deadline(offset: facts.offset)))
            case .overran:
                let end = facts.offset
                if url.isFile {
                    // libcurl reports a local file's size as its length; /proc files say 0.
                    let path = DisplayText.escaped(url.localPath ?? url.text)
                    return .fail(
                        .malformed(
                            .protocolViolation(
                                server: path,
                                reason: "\(path) is longer than the \(Counted.bytes(end)) its size said when it was opened (it grew while"
                                    + " being read, or its size says nothing, as in /proc); 'read PATH' reads such a file to its end")))
                }
                return .fail(
                    .malformed(
                        .protocolViolation(
                            server: server,
                            reason: "\(server) sent more bytes than its response announced (it should have"
                                + " ended at source byte \(end)); the bytes past that end were not used")))
            }
        }
        switch facts.verdict {
        case .redirect(let location)?:
            return .follow(location)
        case .complete?:
            return .finished
        case .failed(let failure)?:
            return .fail(failure)
        case .deliver(_, let seen, let end)?:
            guard facts.code == CURLE_OK else {
                return .fail(
                    FetchFailure.from(facts.code, message: "\(server): \(facts.message)", osErrno: facts.osErrno, url: url))
            }
            if facts.skipLeft > 0 {
                return .fail(.changed("its full content is now shorter than the resume offset"))
            }
            // A close-delimited body cannot tell a drop from its end; the lengths known can.
            if let end, facts.offset < end {
                return .fail(.transient(.truncated(server: server, offset: facts.offset, expected: end)))
            }
            if let total = facts.knownTotal ?? seen.totalLength, facts.offset < total {
                // A server may answer a range with fewer bytes than asked: ask for the rest.
                if end == facts.offset && facts.offset > facts.requested { return .askForRest }
                return .fail(.transient(.truncated(server: server, offset: facts.offset, expected: total)))
            }
            // A 206 whose total was `*` says nothing about what follows its range: ask for the
            // rest; a 416 (with the total) or a shorter body says where the resource ends.
            if let end, end == facts.offset, seen.totalLength == nil, facts.knownTotal == nil, facts.offset > facts.requested {
                return .askForRest
            }
            return .finished
        case nil:
            return .fail(FetchFailure.from(facts.code, message: facts.message, osErrno: facts.osErrno, url: url))
        }
    }
}

/// What the retry loop of `fetch` does after a failed attempt: the pure half of
/// `HTTPSource.run`, table-tested.
struct RetryPolicy {
    let retries: Int
    let backoff: RetryBackoff

    enum Decision: Equatable {
        /// Try again after `delay` seconds; `fromStart`: at the URL the user gave rather
        /// than the redirect target the last attempt reached.
        case retry(attempt: Int, delay: Double, fromStart: Bool, reason: TransferCause)
        /// The transfer fails (exit 3, with what was delivered kept).
        case giveUp(TransferCause, TransferGiveUp)
        /// The remote is another version now.
        case changed(String)
    }

    /// The loop's own state, carried from one failure to the next.
    struct Streak: Equatable {
        /// Failures since the last attempt that delivered bytes.
        var failuresInARow = 0
    }

    /// - Parameters:
    ///   - progressed: the failed attempt delivered bytes (a transient failure then starts a new streak).
    ///   - atRedirectTarget: the attempt went straight to where an earlier redirect led.
    ///   - secondsLeft: until `--max-time`, when one is set.
    ///   - jitter: in 0.5...1, scales the backoff (random in production).
    func decide(
        _ failure: FetchFailure, streak: inout Streak, progressed: Bool, atRedirectTarget: Bool,
        secondsLeft: Double?, jitter: Double = Double.random(in: 0.5...1)
    ) -> Decision {
        let reason: TransferCause
        var fromStart = false
        var retryAfter: Double?
        switch failure {
        case .changed(let why):
            return .changed(why)
        case .malformed(let why), .outOfTime(let why):
            return .giveUp(why, .atOnce)
        case .permanent(let why):
            // Redirect targets may be temporary (signed URLs expire): the URL the user gave
            // is asked again, as one more failure of the streak, so this cannot loop.
            guard atRedirectTarget else { return .giveUp(why, .atOnce) }
            reason = why
            fromStart = true
        case .transient(let why, let after):
            // Progress proves the link works: only failures in a row count.
            if progressed { streak.failuresInARow = 0 }
            reason = why
            retryAfter = after
        case .tooSlow(let why):
            reason = why
        }
        streak.failuresInARow += 1
        guard streak.failuresInARow <= retries else { return .giveUp(reason, .afterRetries(retries)) }
        let delay = backoff.delay(forRetry: streak.failuresInARow, retryAfter: retryAfter, jitter: jitter)
        if let secondsLeft, delay >= secondsLeft {
            return .giveUp(reason, .deadlineBeforeRetry)
        }
        return .retry(attempt: streak.failuresInARow, delay: delay, fromStart: fromStart, reason: reason)
    }
}
