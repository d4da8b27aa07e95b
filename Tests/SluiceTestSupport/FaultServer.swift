import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An in-process HTTP/1.1 server on 127.0.0.1 that serves one resource body at every
/// path and can misbehave on demand (drops, stalls, 503s, broken ranges, …).
///
/// Every connection gets `Connection: close` and is closed after one response.
/// Each connection is served on its own thread; `stop()` (also run by `deinit`) shuts the
/// listening socket and every client socket down and waits at most two seconds for the
/// threads to finish. Every other wait inside the server is bounded too.
///
/// Precedence when answering a request: the special paths `/redirect` and
/// `/redirect-loop` first, then `unavailableCount`, then `status`, then the resource.
/// `unavailableCount` and `stallAfterBodyBytes` count from the last `setFault` (or `init`);
/// the stall applies to the first response that carries resource body bytes (200/206 GET).
final class FaultServer: Sendable {
    struct Fault: Sendable {
        /// Close the connection after this many body bytes, on every resource response.
        var dropAfterBodyBytes: Int? = nil
        /// Always answer 200 with the full body, ignoring Range/If-Range.
        var ignoreRange: Bool = false
        /// The first N requests get 503 with `Retry-After: retryAfterSeconds`.
        var unavailableCount: Int = 0
        var retryAfterSeconds: Int = 1
        /// First resource response only: send this many body bytes, then send nothing more
        /// (socket kept open) until the client closes or `stop()`.
        var stallAfterBodyBytes: Int? = nil
        /// Close-delimited body: no Content-Length.
        var omitContentLength: Bool = false
        /// `Transfer-Encoding: chunked` (wins over `omitContentLength`).
        var chunked: Bool = false
        /// A range request gets a 206 whose Content-Range (and body) starts at requested+shift.
        var wrongContentRangeShift: Int? = nil
        /// A range request gets its 206 and bytes without a Content-Range.
        var omitContentRange: Bool = false
        /// Every request with a Range header gets 416 with `Content-Range: bytes */LEN`.
        var always416: Bool = false
        /// Every request gets this status and a short body.
        var status: Int? = nil
        var sendETag: Bool = true
        var sendLastModified: Bool = true
        /// Throttle body sending to about this rate. Each connection is paced on its own, so
        /// this is a per-connection limit (as nginx's `limit_rate`).
        var bytesPerSecond: Int? = nil
        /// Faults for single connections, keyed by the connection's number in order of arrival
        /// (1-based; every connection carries one request). They apply on top of the rest.
        var perConnection: [Int: ConnectionFault] = [:]

        // Hostile responses: what a broken or malicious server sends.

        /// The status line's reason phrase, sent as is (control characters included).
        var reasonPhrase: String? = nil
        /// Raw `Name: value` lines added to every response, after the usual fields
        /// (a second Content-Length, a Location with escape sequences, …).
        var extraHeaders: [String] = []
        /// Every resource response is a 206 with this Content-Range value (and the body it
        /// would have had otherwise).
        var contentRange: String? = nil
        /// The Content-Length value of resource responses, replacing the true one.
        var contentLength: String? = nil
        /// Range requests get this many bytes past the end of their Content-Range, in a
        /// close-delimited body (no Content-Length, so the client cannot cut them off itself).
        var overrunBytes: Int = 0
        /// 206 responses say `bytes FIRST-LAST/*`, and a 416 claims the resource is
        /// `overrunBytes` longer than it is: a server consistent in its lie.
        var rangeTotalUnknown: Bool = false
        /// Every resource response is a 206 of at most this many bytes, from the requested
        /// offset (or 0 without a Range): a server that hands out a file in short pieces.
        var rangeLength: Int? = nil

        /// Neither ETag nor Last-Modified: only the length can show the content unchanged.
        mutating func omitValidators() {
            sendETag = false
            sendLastModified = false
        }
    }

    /// What one connection does differently.
    struct ConnectionFault: Sendable {
        /// Close after this many body bytes.
        var dropAfterBodyBytes: Int? = nil
        /// Send this many body bytes, then nothing more until the client closes or `stop()`.
        var stallAfterBodyBytes: Int? = nil
        /// Answer this status with a short body (and `Retry-After: 1` for 429/503).
        var status: Int? = nil
        /// Answer 200 with the full body, ignoring Range.
        var ignoreRange = false
        /// Send this ETag instead of the resource's (the body stays the same).
        var etag: String? = nil
        /// Throttle this connection to about this rate.
        var bytesPerSecond: Int? = nil
    }

    struct Request: Sendable {
        let method: String
        /// The request target as received: path plus any query string.
        let path: String
        /// Header names lowercased; repeated headers joined with ", ".
        let headers: [String: String]
        let host: String?
    }

    struct StartError: Error, CustomStringConvertible {
        let call: String
        let code: Int32
        var description: String { "FaultServer: \(call) failed: \(String(cString: strerror(code)))" }
    }

    /// The validators the resource has unless `init` is given others.
    static let defaultETag = "\"v1\""
    static let defaultLastModified = "Wed, 01 Jan 2025 00:00:00 GMT"

    private let core: Core
    let port: UInt16

    init(
        body: [UInt8], etag: String = FaultServer.defaultETag,
        lastModified: String = FaultServer.defaultLastModified, fault: Fault = Fault()
    ) throws {
        let (fd, port) = try Self.openListener()
        self.port = port
        self.core = Core(
            listenFD: fd, port: port,
            resource: Resource(body: body, etag: etag, lastModified: lastModified),
            fault: fault)
        core.start()
    }

    deinit { core.stop() }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    func url(_ path: String = "/data.bin") -> String {
        baseURL + (path.hasPrefix("/") ? path : "/" + path)
    }

    /// Replace the content (and its validators) served from the next request on.
    func replaceBody(_ body: [UInt8], etag: String, lastModified: String) {
        core.locked { $0.resource = Resource(body: body, etag: etag, lastModified: lastModified) }
    }

    /// Change the fault configuration for subsequent requests (re-arms the 503 count and the stall).
    func setFault(_ fault: Fault) {
        core.locked {
            $0.fault = fault
            $0.unavailableServed = 0
            $0.stallUsed = false
        }
    }

    /// Body bytes written to sockets, summed over all responses. Exact for every response
    /// whose connection the client has seen closed, and after `stop()`.
    var totalBodyBytesSent: Int { core.locked { $0.totalBodyBytesSent } }

    /// Every well-formed request received, in order of arrival.
    var requests: [Request] { core.locked { $0.requests } }

    func stop() { core.stop() }

    private static func openListener() throws -> (Int32, UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw StartError(call: "socket", code: errno) }
        // Non-blocking, so an `accept` after `poll` cannot hang if the peer went away meanwhile;
        // accepted sockets do not inherit this flag on Linux.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            let code = errno
            close(fd)
            throw StartError(call: "bind", code: code)
        }
        guard listen(fd, 128) == 0 else {
            let code = errno
            close(fd)
            throw StartError(call: "listen", code: code)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else {
            let code = errno
            close(fd)
            throw StartError(call: "getsockname", code: code)
        }
        return (fd, UInt16(bigEndian: addr.sin_port))
    }
}

// MARK: - Internals (nested, so no name can clash with other files of the test module)

extension FaultServer {
    fileprivate struct Resource: Sendable {
        var body: [UInt8]
        var etag: String
        var lastModified: String
    }

    fileprivate struct ServerState {
        var resource: Resource
        var fault: FaultServer.Fault
        var unavailableServed = 0
        var stallUsed = false
        var totalBodyBytesSent = 0
        var requests: [FaultServer.Request] = []
        var stopped = false
        var listenerOpen = true
        /// Open client sockets. A socket is removed (under the lock) before its thread closes it,
        /// so `stop()` never touches a descriptor number that may have been reused.
        var clientFDs: Set<Int32> = []
    }

    /// What to send for one request, decided under the lock from one consistent snapshot.
    fileprivate struct ResponsePlan {
        var status: Int
        var headers: [(String, String)]
        var body: ArraySlice<UInt8>
        var sendBody: Bool
        /// Resource responses are subject to the body faults below; other responses are not.
        var chunked = false
        var limit: Int? = nil
        var stall = false
        var bytesPerSecond: Int? = nil
    }

    fileprivate enum RequestHead {
        case request(FaultServer.Request)
        case malformed
        case tooLarge
        case gone
    }

    /// The state shared by the owner and the server threads. Threads hold this, not the
    /// `FaultServer`, so dropping the last `FaultServer` reference runs its `deinit` (which stops).
    // @unchecked Sendable: every mutable field lives in `state`, which is only touched under `lock`.
    fileprivate final class Core: @unchecked Sendable {
        private let lock = NSLock()
        private var state: ServerState
        private let listenFD: Int32
        private let port: UInt16
        private let threads = DispatchGroup()

        private static let maxHeadBytes = 64 * 1024
        private static let headReadTimeout: Double = 10
        private static let sendTimeoutSeconds = 30
        private static let maxStallSeconds: Double = 120
        private static let lingerSeconds: Double = 2
        private static let stopJoinSeconds: Double = 2

        init(listenFD: Int32, port: UInt16, resource: Resource, fault: FaultServer.Fault) {
            self.listenFD = listenFD
            self.port = port
            self.state = ServerState(resource: resource, fault: fault)
        }

        func locked<T>(_ body: (inout ServerState) -> T) -> T {
            lock.lock()
            defer { lock.unlock() }
            return body(&state)
        }

        var isStopped: Bool { locked { $0.stopped } }

        func start() {
            threads.enter()
            let thread = Thread { [self] in
                acceptLoop()
                threads.leave()
            }
            thread.name = "FaultServer.accept"
            thread.start()
        }

        func stop() {
            let alreadyStopped: Bool = locked { state in
                if state.stopped { return true }
                state.stopped = true
                // Shut down while holding the lock: the descriptors cannot be closed meanwhile.
                if state.listenerOpen { _ = shutdown(listenFD, Int32(SHUT_RDWR)) }
                for fd in state.clientFDs { _ = shutdown(fd, Int32(SHUT_RDWR)) }
                return false
            }
            if alreadyStopped { return }
            _ = threads.wait(timeout: .now() + Self.stopJoinSeconds)
        }

        // MARK: Accepting

        private func acceptLoop() {
            defer {
                locked { $0.listenerOpen = false }
                close(listenFD)
            }
            while !isStopped {
                guard let ready = Self.readable(listenFD) else { return }
                if !ready { continue }
                let fd = accept(listenFD, nil, nil)
                if fd < 0 {
                    if isStopped { return }
                    if errno != EINTR && errno != ECONNABORTED && errno != EAGAIN { usleep(10_000) }
                    continue
                }
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                let admitted: Bool = locked { state in
                    if state.stopped { return false }
                    state.clientFDs.insert(fd)
                    threads.enter()
                    return true
                }
                guard admitted else {
                    close(fd)
                    return
                }
                let thread = Thread { [self] in
                    serve(fd)
                    locked { _ = $0.clientFDs.remove(fd) }
                    close(fd)
                    threads.leave()
                }
                thread.name = "FaultServer.connection"
                thread.start()
            }
        }

        // MARK: One connection

        private func serve(_ fd: Int32) {
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            var sendTimeout = timeval(tv_sec: Self.sendTimeoutSeconds, tv_usec: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))

            let plan: ResponsePlan
            switch readHead(fd) {
            case .gone:
                return
            case .tooLarge:
                plan = Self.shortResponse(431, "request head larger than 64 KiB")
            case .malformed:
                plan = Self.shortResponse(400, "malformed request")
            case .request(let request):
                plan = locked { state in
                    state.requests.append(request)
                    return makePlan(for: request, state: &state)
                }
            }

            guard send(fd, head: plan) else { return }
            if plan.sendBody {
                guard sendBody(fd, plan: plan) else { return }
                if plan.stall {
                    waitForPeerClose(fd, seconds: Self.maxStallSeconds)
                    return
                }
            }
            // Graceful close: FIN first, then let the client finish before the socket goes,
            // so unread request bytes on our side cannot turn the close into a reset.
            _ = shutdown(fd, Int32(SHUT_WR))
            waitForPeerClose(fd, seconds: Self.lingerSeconds)
        }

        private func readHead(_ fd: Int32) -> RequestHead {
            var buffer: [UInt8] = []
            buffer.reserveCapacity(4096)
            var chunk = [UInt8](repeating: 0, count: 4096)
            let deadline = Date().addingTimeInterval(Self.headReadTimeout)
            var scanFrom = 0
            while true {
                if let end = Self.findHeadEnd(buffer, from: scanFrom) {
                    return Self.parseHead(buffer[..<end])
                }
                if buffer.count >= Self.maxHeadBytes { return .tooLarge }
                scanFrom = max(0, buffer.count - 3)
                if isStopped || Date() >= deadline { return .gone }
                guard let ready = Self.readable(fd) else { return .gone }
                if !ready { continue }
                let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count == 0 { return .gone }
                if count < 0 {
                    if errno == EINTR || errno == EAGAIN { continue }
                    return .gone
                }
                buffer.append(contentsOf: chunk[0..<count])
            }
        }

        private static func findHeadEnd(_ buffer: [UInt8], from start: Int) -> Int? {
            let limit = min(buffer.count, maxHeadBytes)
            guard limit >= 4 else { return nil }
            var i = start
            while i + 3 < limit {
                if buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
                    return i
                }
                i += 1
            }
            return nil
        }

        private static func parseHead(_ head: ArraySlice<UInt8>) -> RequestHead {
            var lines: [String] = []
            var lineStart = head.startIndex
            var i = head.startIndex
            while i < head.endIndex {
                if head[i] == 13, i + 1 < head.endIndex, head[i + 1] == 10 {
                    lines.append(String(decoding: head[lineStart..<i], as: UTF8.self))
                    i += 2
                    lineStart = i
                } else {
                    i += 1
                }
            }
            lines.append(String(decoding: head[lineStart..<head.endIndex], as: UTF8.self))

            let requestLine = lines[0].split(separator: " ", omittingEmptySubsequences: false)
            // Absolute-form targets (`GET http://host/path`) are what a client sends to a proxy.
            guard requestLine.count == 3, !requestLine[0].isEmpty,
                requestLine[1].hasPrefix("/") || requestLine[1].hasPrefix("http://"),
                requestLine[2].hasPrefix("HTTP/1.")
            else { return .malformed }
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { return .malformed }
                let name = line[..<colon].lowercased()
                guard !name.isEmpty, !name.contains(" "), !name.contains("\t") else { return .malformed }
                let value = line[line.index(after: colon)...].trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
                if let existing = headers[name] {
                    headers[name] = existing + ", " + value
                } else {
                    headers[name] = value
                }
            }
            return .request(
                FaultServer.Request(
                    method: String(requestLine[0]), path: String(requestLine[1]),
                    headers: headers, host: headers["host"]))
        }

        // MARK: Deciding the response

        private func makePlan(for request: FaultServer.Request, state: inout ServerState) -> ResponsePlan {
            let isHead = request.method == "HEAD"
            guard isHead || request.method == "GET" else {
                var plan = Self.shortResponse(405, "only GET and HEAD")
                plan.headers.append(("Allow", "GET, HEAD"))
                return plan
            }
            let (path, query) = Self.splitTarget(request.path)

            if path == "/redirect" {
                let parameters = Self.parseQuery(query)
                guard let target = parameters["to"], !target.isEmpty else {
                    return Self.shortResponse(400, "redirect needs ?to=", head: isHead)
                }
                let code = parameters["code"].flatMap { Int($0) } ?? 302
                guard [301, 302, 303, 307, 308].contains(code) else {
                    return Self.shortResponse(400, "redirect code must be 301, 302, 303, 307 or 308", head: isHead)
                }
                var plan = Self.shortResponse(code, "redirecting to \(target)", head: isHead)
                plan.headers.append(("Location", target))
                return plan
            }
            if path == "/redirect-loop" {
                let host = request.host ?? "127.0.0.1:\(port)"
                var plan = Self.shortResponse(302, "redirecting to myself", head: isHead)
                plan.headers.append(("Location", "http://\(host)/redirect-loop"))
                return plan
            }

            let fault = state.fault
            let special = fault.perConnection[state.requests.count]
            if let status = special?.status {
                var plan = Self.shortResponse(status, "status \(status) on connection \(state.requests.count)", head: isHead)
                if status == 429 || status == 503 { plan.headers.append(("Retry-After", "1")) }
                return plan
            }
            if state.unavailableServed < fault.unavailableCount {
                state.unavailableServed += 1
                var plan = Self.shortResponse(503, "service unavailable", head: isHead)
                plan.headers.append(("Retry-After", String(fault.retryAfterSeconds)))
                return plan
            }
            if let status = fault.status {
                var plan = Self.shortResponse(status, "status \(status)", head: isHead)
                if status == 401 { plan.headers.append(("WWW-Authenticate", "Basic realm=\"sluice\"")) }
                return plan
            }

            let resource = state.resource
            let length = resource.body.count
            var validators: [(String, String)] = []
            if fault.sendETag { validators.append(("ETag", special?.etag ?? resource.etag)) }
            if fault.sendLastModified { validators.append(("Last-Modified", resource.lastModified)) }

            var status = 200
            var slice = resource.body[...]
            var contentRange: String? = nil
            if !fault.ignoreRange, special?.ignoreRange != true, let rangeHeader = request.headers["range"] {
                let claimed = fault.rangeTotalUnknown ? length + fault.overrunBytes : length
                if fault.always416 {
                    return Self.unsatisfiable(length: claimed, validators: validators)
                }
                let honoured = Self.ifRangeAllows(request.headers["if-range"], resource: resource, fault: fault)
                if honoured, let range = Self.parseRange(rangeHeader, length: length) {
                    switch range {
                    case .unsatisfiable:
                        return Self.unsatisfiable(length: claimed, validators: validators)
                    case .bytes(var first, var last):
                        if let shift = fault.wrongContentRangeShift {
                            first = min(max(first + shift, 0), length - 1)
                            last = min(max(last + shift, first), length - 1)
                        }
                        if let piece = fault.rangeLength { last = min(last, first + max(1, piece) - 1) }
                        status = 206
                        slice = resource.body[first...last]
                        contentRange = "bytes \(first)-\(last)/\(fault.rangeTotalUnknown ? "*" : String(length))"
                    }
                }
            }

            if let piece = fault.rangeLength, status == 200, length > 0 {
                status = 206
                slice = resource.body[0...min(length - 1, max(1, piece) - 1)]
                contentRange = "bytes 0-\(slice.count - 1)/\(fault.rangeTotalUnknown ? "*" : String(length))"
            }
            var body = slice
            var omitLength = fault.omitContentLength
            if status == 206, fault.overrunBytes > 0 {
                body = ArraySlice(Array(slice) + [UInt8](repeating: 0xEE, count: fault.overrunBytes))
                omitLength = true
            }
            if let forced = fault.contentRange {
                status = 206
                contentRange = forced
            }
            var headers = validators
            headers.append(("Accept-Ranges", "bytes"))
            headers.append(("Content-Type", "application/octet-stream"))
            if let contentRange, !fault.omitContentRange { headers.append(("Content-Range", contentRange)) }
            if fault.chunked {
                headers.append(("Transfer-Encoding", "chunked"))
            } else if let declared = fault.contentLength {
                headers.append(("Content-Length", declared))
            } else if !omitLength {
                headers.append(("Content-Length", String(body.count)))
            }
            var plan = ResponsePlan(status: status, headers: headers, body: body, sendBody: !isHead)
            plan.chunked = fault.chunked
            plan.bytesPerSecond = (special?.bytesPerSecond ?? fault.bytesPerSecond).map { max(1, $0) }
            if !isHead {
                if let stallAfter = special?.stallAfterBodyBytes {
                    plan.stall = true
                    plan.limit = max(0, stallAfter)
                } else if let dropAfter = special?.dropAfterBodyBytes {
                    plan.limit = max(0, dropAfter)
                } else if let stallAfter = fault.stallAfterBodyBytes, !state.stallUsed {
                    state.stallUsed = true
                    plan.stall = true
                    plan.limit = max(0, stallAfter)
                } else if let dropAfter = fault.dropAfterBodyBytes {
                    plan.limit = max(0, dropAfter)
                }
            }
            return plan
        }

        private enum ByteRange {
            case bytes(Int, Int)
            case unsatisfiable
        }

        /// `bytes=N-`, `bytes=N-M`, `bytes=-K`. Anything else (including several ranges) yields nil:
        /// the Range header is ignored and the full body is sent, as RFC 7233 permits.
        private static func parseRange(_ header: String, length: Int) -> ByteRange? {
            let value = header.trimmingCharacters(in: .whitespaces)
            guard value.lowercased().hasPrefix("bytes=") else { return nil }
            let spec = value.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
            guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
            let firstText = spec[..<dash].trimmingCharacters(in: .whitespaces)
            let lastText = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
            if firstText.isEmpty {
                guard let suffix = Int(lastText), suffix >= 0 else { return nil }
                if suffix == 0 || length == 0 { return .unsatisfiable }
                return .bytes(max(0, length - suffix), length - 1)
            }
            guard let first = Int(firstText), first >= 0 else { return nil }
            var last = length - 1
            if !lastText.isEmpty {
                guard let requested = Int(lastText), requested >= first else { return nil }
                last = min(requested, length - 1)
            }
            if first >= length { return .unsatisfiable }
            return .bytes(first, last)
        }

        /// RFC 7233 §3.2: the range is honoured only if If-Range is absent or names the current
        /// representation (strong ETag comparison, or the exact Last-Modified date).
        private static func ifRangeAllows(_ ifRange: String?, resource: Resource, fault: FaultServer.Fault) -> Bool {
            guard let ifRange = ifRange?.trimmingCharacters(in: .whitespaces) else { return true }
            if ifRange.hasPrefix("\"") || ifRange.hasPrefix("W/") {
                return fault.sendETag && !ifRange.hasPrefix("W/") && !resource.etag.hasPrefix("W/")
                    && ifRange == resource.etag
            }
            return fault.sendLastModified && ifRange == resource.lastModified
        }

        private static func unsatisfiable(length: Int, validators: [(String, String)]) -> ResponsePlan {
            var headers = validators
            headers.append(("Content-Range", "bytes */\(length)"))
            headers.append(("Content-Length", "0"))
            return ResponsePlan(status: 416, headers: headers, body: [], sendBody: false)
        }

        private static func shortResponse(_ status: Int, _ text: String, head: Bool = false) -> ResponsePlan {
            let body = Array((text + "\n").utf8)
            return ResponsePlan(
                status: status,
                headers: [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", String(body.count)),
                ],
                body: body[...], sendBody: !head)
        }

        private static func splitTarget(_ target: String) -> (String, String) {
            guard let mark = target.firstIndex(of: "?") else { return (target, "") }
            return (String(target[..<mark]), String(target[target.index(after: mark)...]))
        }

        private static func parseQuery(_ query: String) -> [String: String] {
            var result: [String: String] = [:]
            for pair in query.split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = String(parts[0]).removingPercentEncoding ?? String(parts[0])
                let raw = parts.count > 1 ? String(parts[1]) : ""
                result[name] = raw.removingPercentEncoding ?? raw
            }
            return result
        }

        private static func reason(_ status: Int) -> String {
            switch status {
            case 200: return "OK"
            case 206: return "Partial Content"
            case 301: return "Moved Permanently"
            case 302: return "Found"
            case 303: return "See Other"
            case 307: return "Temporary Redirect"
            case 308: return "Permanent Redirect"
            case 400: return "Bad Request"
            case 401: return "Unauthorized"
            case 403: return "Forbidden"
            case 404: return "Not Found"
            case 405: return "Method Not Allowed"
            case 410: return "Gone"
            case 416: return "Range Not Satisfiable"
            case 429: return "Too Many Requests"
            case 431: return "Request Header Fields Too Large"
            case 500: return "Internal Server Error"
            case 502: return "Bad Gateway"
            case 503: return "Service Unavailable"
            case 504: return "Gateway Timeout"
            default: return "Status"
            }
        }

        // MARK: Sending

        private func send(_ fd: Int32, head plan: ResponsePlan) -> Bool {
            let fault = locked { $0.fault }
            var text = "HTTP/1.1 \(plan.status) \(fault.reasonPhrase ?? Self.reason(plan.status))\r\n"
            for (name, value) in plan.headers { text += "\(name): \(value)\r\n" }
            for line in fault.extraHeaders { text += line + "\r\n" }
            text += "Connection: close\r\n\r\n"
            return sendAll(fd, Array(text.utf8)[...], countsAsBody: false)
        }

        /// Sends the planned body (or its first `limit` bytes), chunk-framed if asked, at the
        /// planned rate. Returns false when the connection failed or the server stopped.
        private func sendBody(_ fd: Int32, plan: ResponsePlan) -> Bool {
            let body = plan.body
            let total = plan.limit.map { min($0, body.count) } ?? body.count
            let piece = plan.bytesPerSecond.map { max(1, min($0 / 20, 64 * 1024)) } ?? 64 * 1024
            let started = Date()
            var sent = 0
            while sent < total {
                if isStopped { return false }
                let count = min(piece, total - sent)
                let start = body.startIndex + sent
                if plan.chunked {
                    guard sendAll(fd, Array("\(String(count, radix: 16))\r\n".utf8)[...], countsAsBody: false)
                    else { return false }
                }
                guard sendAll(fd, body[start..<(start + count)], countsAsBody: true) else { return false }
                if plan.chunked {
                    guard sendAll(fd, Array("\r\n".utf8)[...], countsAsBody: false) else { return false }
                }
                sent += count
                if let rate = plan.bytesPerSecond, sent < total {
                    let due = started.addingTimeInterval(Double(sent) / Double(rate))
                    guard pause(until: due) else { return false }
                }
            }
            if plan.chunked && total == body.count {
                guard sendAll(fd, Array("0\r\n\r\n".utf8)[...], countsAsBody: false) else { return false }
            }
            return true
        }

        private func sendAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>, countsAsBody: Bool) -> Bool {
            bytes.withUnsafeBytes { buffer in
                guard let base = buffer.baseAddress else { return true }
                var offset = 0
                while offset < buffer.count {
                    let written = Glibc.send(fd, base + offset, buffer.count - offset, Int32(MSG_NOSIGNAL))
                    if written < 0 {
                        if errno == EINTR { continue }
                        return false
                    }
                    if written == 0 { return false }
                    offset += written
                    if countsAsBody { locked { $0.totalBodyBytesSent += written } }
                }
                return true
            }
        }

        /// Whether `fd` has input (or an end) within 100 ms, so that a waiting loop sees a stop
        /// soon: false when not yet (or interrupted), nil when `poll` failed.
        private static func readable(_ fd: Int32) -> Bool? {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 100)
            if ready < 0 { return errno == EINTR ? false : nil }
            return ready > 0
        }

        /// Sleeps in short slices until `date`; false if the server stopped meanwhile.
        private func pause(until date: Date) -> Bool {
            while true {
                if isStopped { return false }
                let remaining = date.timeIntervalSinceNow
                if remaining <= 0 { return true }
                usleep(useconds_t(min(remaining, 0.05) * 1_000_000))
            }
        }

        /// Waits until the client closes (or resets) the connection, the server stops, or
        /// `seconds` pass. Anything the client sends meanwhile is discarded.
        private func waitForPeerClose(_ fd: Int32, seconds: Double) {
            let deadline = Date().addingTimeInterval(seconds)
            var scratch = [UInt8](repeating: 0, count: 4096)
            while !isStopped && Date() < deadline {
                guard let ready = Self.readable(fd) else { return }
                if !ready { continue }
                let count = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count == 0 { return }
                if count < 0 && errno != EINTR && errno != EAGAIN { return }
            }
        }
    }
}

/// Starts a FaultServer serving `body`, configured by `fault`, runs `test` with it and stops
/// it afterwards, whatever `test` does:
///
///     try withFaultServer(body: data, fault: { $0.dropAfterBodyBytes = 8_000 }) { server in
///         let result = try SluiceBinary.run(["fetch \(server.url()) | file \(dir)/out"])
///     }
@discardableResult
func withFaultServer<T>(
    body: [UInt8], etag: String = FaultServer.defaultETag, lastModified: String = FaultServer.defaultLastModified,
    fault configure: (inout FaultServer.Fault) -> Void = { _ in },
    _ test: (FaultServer) throws -> T
) throws -> T {
    var fault = FaultServer.Fault()
    configure(&fault)
    let server = try FaultServer(body: body, etag: etag, lastModified: lastModified, fault: fault)
    defer { server.stop() }
    return try test(server)
}
