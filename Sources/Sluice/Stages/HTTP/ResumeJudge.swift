/// What one response means for a transfer that must continue at `offset`.
enum ResponseVerdict: Equatable {
    /// Pass the body on after dropping its first `skip` bytes. `seen`: the response's
    /// validators; `end`: the source offset where this body must end, when known (bytes
    /// past it are never delivered).
    case deliver(skip: UInt64, seen: FetchValidators, end: UInt64?)
    /// Ask again at this `Location` (not yet resolved).
    case redirect(String)
    /// Nothing is left to fetch: the data already delivered is the whole resource.
    case complete
    case failed(FetchFailure)
}

/// Decides, from a response head alone and before any body byte moves, whether that body
/// may be spliced onto the `offset` bytes already delivered (docs/ARCHITECTURE.md, "Resume rules").
struct ResumeJudge {
    /// Bytes already delivered downstream; a nonzero offset was requested with a Range.
    let offset: UInt64
    /// The validators first seen for this resource (from the checkpoint, or this run's
    /// first response); nil before any.
    let known: FetchValidators?
    /// host[:port] of the server that answered, for messages.
    let server: String
    /// The response must prove it is the known entity (`FetchValidators.proves`), not merely
    /// not contradict it: a resumed URL whose query may have changed.
    var requireProof = false

    func judge(_ head: HTTPResponseHead) -> ResponseVerdict {
        guard let status = head.status else { return judgeFile(head) }
        let server = DisplayText.escaped(self.server)
        let from = "HTTP \(head.statusText) from \(server)"
        let answer = TransferCause.http(status: status, statusText: head.statusText, server: server)
        let refused = { (reason: String) in ResponseVerdict.failed(.malformed(.protocolViolation(server: server, reason: reason))) }
        if let problem = head.framingProblem { return refused("\(from) \(problem)") }
        switch status {
        case 200:
            var seen = head.validators
            seen.totalLength = head.contentLength
            // A body longer than the length already known is cut there (and refused).
            let end = seen.totalLength ?? known?.totalLength
            if offset == 0 { return .deliver(skip: 0, seen: seen, end: end) }
            // The server ignored the Range (or If-Range found a different version).
            if let reason = known?.contradiction(by: seen) { return .failed(.changed(reason)) }
            if let refusal = unproven(seen) { return refusal }
            guard known?.isConfirmed(by: seen) == true else {
                return .failed(
                    .changed(
                        "\(server) ignored the range request, and sent no ETag or Last-Modified"
                            + " that proves the content unchanged"))
            }
            return .deliver(skip: offset, seen: seen, end: end)
        case 206:
            var seen = head.validators
            seen.totalLength = head.statedTotal
            // Validators (a stated total included) that contradict the known ones show another
            // version, whatever else the answer says: a server that ignores If-Range sends the
            // range asked for against a now shorter total, which the range cannot fit.
            if let reason = known?.contradiction(by: seen) { return .failed(.changed(reason)) }
            if offset > 0, let total = seen.totalLength, total <= offset {
                return .failed(.changed("\(from) says the content is now \(Counted.bytes(total)), no longer than the resume offset \(offset)"))
            }
            guard let range = head.contentRange, case .bytes(let first, let last) = range.kind else {
                let field = head["content-range"].map { "Content-Range '\(DisplayText.quoted($0))'" } ?? "no Content-Range"
                return refused("\(from) with \(field); cannot tell which bytes it holds")
            }
            guard first == offset else {
                return refused(
                    "\(from) with Content-Range '\(DisplayText.quoted(range.text))' for a request"
                        + " starting at byte \(offset); refusing to splice it in")
            }
            // A body that does not fit its own range cannot be trusted to hold those bytes.
            if last < first || (range.total.map { last >= $0 } ?? false)
                || (head.contentLength.map { $0 != last - first + 1 } ?? false)
            {
                let length = head.contentLength.map { "Content-Length \($0)" } ?? "no Content-Length"
                return refused(
                    "\(from) with Content-Range '\(DisplayText.quoted(range.text))' and \(length),"
                        + " which do not agree")
            }
            if let refusal = unproven(seen) { return refusal }
            // A 206 carries the ETag a 200 would (RFC 9110 §15.3.7): one that drops the known
            // tag cannot show that its bytes belong to the same version.
            if let tag = known?.etag, seen.etag == nil {
                return .failed(
                    .changed(
                        "\(from) without the ETag \(DisplayText.quoted(tag, limit: 80)) the content had;"
                            + " cannot tell these bytes belong to the same version"))
            }
            // ContentRange bounds `last` below 2^63, so this cannot overflow.
            return .deliver(skip: 0, seen: seen, end: last + 1)
        case 416:
            guard offset > 0 else {
                return .failed(.permanent(.protocolViolation(server: server, reason: "\(from) to a request without a Range")))
            }
            var seen = head.validators
            if let range = head.contentRange, range.kind == .unsatisfied { seen.totalLength = range.total }
            if let reason = known?.contradiction(by: seen) { return .failed(.changed(reason)) }
            if (known?.totalLength ?? seen.totalLength) == offset { return .complete }
            // A total past the offset with the same validators is a server refusing a range it
            // holds: nothing shows which version it serves, so it counts as changed all the same.
            let length =
                seen.totalLength.map { $0 > offset ? "it says it holds \(Counted.bytes($0)), yet refuses that range" : "it is now \(Counted.bytes($0))" }
                ?? "it no longer reaches that far"
            return .failed(.changed("\(server) cannot serve bytes from \(offset) on (HTTP 416: \(length))"))
        case 301, 302, 303, 307, 308:
            guard let location = head.location, !location.isEmpty else {
                return .failed(.permanent(.redirect(reason: "\(from) without a Location")))
            }
            return .redirect(location)
        case 408, 429, 500...599:
            return .failed(.transient(answer, retryAfter: head.retryAfter))
        default:
            return .failed(.permanent(answer))
        }
    }

    private func unproven(_ seen: FetchValidators) -> ResponseVerdict? {
        guard requireProof, known?.proves(seen) != true else { return nil }
        return .failed(
            .changed(
                "the URL's query changed since the checkpoint, and \(DisplayText.escaped(server)) sent"
                    + " no strong ETag, nor the same Last-Modified and length, to prove it is the same content"))
    }

    /// file://: libcurl resumes by itself (CURLOPT_RESUME_FROM_LARGE) and reports the file's
    /// full size and modification time as header fields.
    private func judgeFile(_ head: HTTPResponseHead) -> ResponseVerdict {
        var seen = head.validators
        seen.totalLength = head.contentLength
        if offset > 0, let reason = known?.contradiction(by: seen) { return .failed(.changed(reason)) }
        if let total = seen.totalLength, total < offset {
            return .failed(.changed("it is now \(Counted.bytes(total)), shorter than the resume offset \(offset)"))
        }
        return .deliver(skip: 0, seen: seen, end: seen.totalLength ?? known?.totalLength)
    }
}
