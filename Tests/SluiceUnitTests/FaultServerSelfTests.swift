import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// Exercises the test-support `FaultServer` over raw sockets (and curl for redirects),
/// so tests built on it can trust what it sends.
final class FaultServerSelfTests: XCTestCase {
    private static let body: [UInt8] = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }

    func testPlainGETReturnsBodyAndValidators() throws {
        try withFaultServer(body: Self.body) { server in

            let response = try FaultServerProbe.request(port: server.port, headers: ["X-Probe": "yes"])
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.body, Self.body)
            XCTAssertEqual(response.headers["content-length"], "1000")
            XCTAssertEqual(response.headers["etag"], "\"v1\"")
            XCTAssertEqual(response.headers["last-modified"], "Wed, 01 Jan 2025 00:00:00 GMT")
            XCTAssertEqual(response.headers["accept-ranges"], "bytes")
            XCTAssertEqual(response.headers["connection"], "close")
            XCTAssertEqual(server.totalBodyBytesSent, 1000)

            let logged = server.requests
            XCTAssertEqual(logged.count, 1)
            XCTAssertEqual(logged.first?.method, "GET")
            XCTAssertEqual(logged.first?.path, "/data.bin")
            XCTAssertEqual(logged.first?.host, "127.0.0.1:\(server.port)")
            XCTAssertEqual(logged.first?.headers["x-probe"], "yes")
            XCTAssertEqual(server.url(), "http://127.0.0.1:\(server.port)/data.bin")
        }
    }

    func testHEADSendsHeadersOnly() throws {
        try withFaultServer(body: Self.body) { server in
            let response = try FaultServerProbe.request(port: server.port, method: "HEAD")
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.headers["content-length"], "1000")
            XCTAssertEqual(response.body, [])
            XCTAssertEqual(server.totalBodyBytesSent, 0)
        }
    }

    func testValidatorsCanBeOmitted() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.omitValidators()
            }
        ) { server in
            let response = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(response.status, 200)
            XCTAssertNil(response.headers["etag"])
            XCTAssertNil(response.headers["last-modified"])
        }
    }

    func testRangeRequestsGet206WithContentRange() throws {
        try withFaultServer(body: Self.body) { server in

            let open = try FaultServerProbe.request(port: server.port, headers: ["Range": "bytes=100-"])
            XCTAssertEqual(open.status, 206)
            XCTAssertEqual(open.headers["content-range"], "bytes 100-999/1000")
            XCTAssertEqual(open.headers["content-length"], "900")
            XCTAssertEqual(open.body, Array(Self.body[100...]))

            let closed = try FaultServerProbe.request(port: server.port, headers: ["Range": "bytes=10-19"])
            XCTAssertEqual(closed.status, 206)
            XCTAssertEqual(closed.headers["content-range"], "bytes 10-19/1000")
            XCTAssertEqual(closed.body, Array(Self.body[10...19]))

            let beyond = try FaultServerProbe.request(port: server.port, headers: ["Range": "bytes=1000-"])
            XCTAssertEqual(beyond.status, 416)
            XCTAssertEqual(beyond.headers["content-range"], "bytes */1000")
        }
    }

    func testIfRangeDecidesBetween206And200() throws {
        try withFaultServer(body: Self.body) { server in

            let sameTag = try FaultServerProbe.request(
                port: server.port,
                headers: ["Range": "bytes=500-", "If-Range": "\"v1\""])
            XCTAssertEqual(sameTag.status, 206)
            XCTAssertEqual(sameTag.body, Array(Self.body[500...]))

            let sameDate = try FaultServerProbe.request(
                port: server.port,
                headers: ["Range": "bytes=500-", "If-Range": "Wed, 01 Jan 2025 00:00:00 GMT"])
            XCTAssertEqual(sameDate.status, 206)

            let otherTag = try FaultServerProbe.request(
                port: server.port,
                headers: ["Range": "bytes=500-", "If-Range": "\"v0\""])
            XCTAssertEqual(otherTag.status, 200)
            XCTAssertNil(otherTag.headers["content-range"])
            XCTAssertEqual(otherTag.body, Self.body)
        }
    }

    func testReplaceBodyChangesContentAndValidators() throws {
        try withFaultServer(body: Self.body) { server in
            let newBody = Array("changed content".utf8)
            server.replaceBody(newBody, etag: "\"v2\"", lastModified: "Thu, 02 Jan 2025 00:00:00 GMT")

            let response = try FaultServerProbe.request(
                port: server.port,
                headers: ["Range": "bytes=500-", "If-Range": "\"v1\""])
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.body, newBody)
            XCTAssertEqual(response.headers["etag"], "\"v2\"")
            XCTAssertEqual(response.headers["last-modified"], "Thu, 02 Jan 2025 00:00:00 GMT")
        }
    }

    func testDropAfterClosesEveryResponseEarly() throws {
        try withFaultServer(body: Self.body, fault: { $0.dropAfterBodyBytes = 300 }) { server in

            let first = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(first.status, 200)
            XCTAssertEqual(first.headers["content-length"], "1000")
            XCTAssertEqual(first.body, Array(Self.body[..<300]))

            let second = try FaultServerProbe.request(port: server.port, headers: ["Range": "bytes=300-"])
            XCTAssertEqual(second.status, 206)
            XCTAssertEqual(second.headers["content-range"], "bytes 300-999/1000")
            XCTAssertEqual(second.body, Array(Self.body[300..<600]))

            XCTAssertEqual(server.totalBodyBytesSent, 600)
        }
    }

    func testUnavailableCountThen200() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.unavailableCount = 2
                $0.retryAfterSeconds = 3
            }
        ) { server in

            for _ in 0..<2 {
                let response = try FaultServerProbe.request(port: server.port)
                XCTAssertEqual(response.status, 503)
                XCTAssertEqual(response.headers["retry-after"], "3")
                XCTAssertFalse(response.body.isEmpty)
            }
            let ok = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(ok.status, 200)
            XCTAssertEqual(ok.body, Self.body)
            XCTAssertEqual(server.requests.count, 3)
        }
    }

    func testAlways416() throws {
        try withFaultServer(body: Self.body, fault: { $0.always416 = true }) { server in

            let ranged = try FaultServerProbe.request(port: server.port, headers: ["Range": "bytes=0-"])
            XCTAssertEqual(ranged.status, 416)
            XCTAssertEqual(ranged.headers["content-range"], "bytes */1000")
            XCTAssertEqual(ranged.body, [])

            let plain = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(plain.status, 200)
            XCTAssertEqual(plain.body, Self.body)
        }
    }

    func testIgnoreRangeAnswers200WithFullBody() throws {
        try withFaultServer(body: Self.body, fault: { $0.ignoreRange = true }) { server in
            let response = try FaultServerProbe.request(port: server.port, headers: ["Range": "bytes=400-"])
            XCTAssertEqual(response.status, 200)
            XCTAssertNil(response.headers["content-range"])
            XCTAssertEqual(response.body, Self.body)
        }
    }

    func testFixedStatusAndSetFault() throws {
        try withFaultServer(body: Self.body, fault: { $0.status = 404 }) { server in

            let missing = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(missing.status, 404)
            XCTAssertNotEqual(missing.body, Self.body)

            server.setFault(FaultServer.Fault())
            let found = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(found.status, 200)
            XCTAssertEqual(found.body, Self.body)
        }
    }

    func testWrongContentRangeShift() throws {
        try withFaultServer(body: Self.body, fault: { $0.wrongContentRangeShift = 10 }) { server in
            let response = try FaultServerProbe.request(port: server.port, headers: ["Range": "bytes=100-"])
            XCTAssertEqual(response.status, 206)
            XCTAssertEqual(response.headers["content-range"], "bytes 110-999/1000")
            XCTAssertEqual(response.body, Array(Self.body[110...]))
        }
    }

    func testChunkedBody() throws {
        try withFaultServer(
            body: Self.body,
            fault: {
                $0.chunked = true
                $0.bytesPerSecond = 20_000  // several chunks
            }
        ) { server in
            let response = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.headers["transfer-encoding"], "chunked")
            XCTAssertNil(response.headers["content-length"])
            let decoded = try FaultServerProbe.decodeChunked(response.body)
            XCTAssertEqual(decoded.body, Self.body)
            XCTAssertTrue(decoded.complete)
            XCTAssertEqual(server.totalBodyBytesSent, 1000)
        }
    }

    func testCloseDelimitedBody() throws {
        try withFaultServer(body: Self.body, fault: { $0.omitContentLength = true }) { server in
            let response = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(response.status, 200)
            XCTAssertNil(response.headers["content-length"])
            XCTAssertNil(response.headers["transfer-encoding"])
            XCTAssertEqual(response.body, Self.body)
        }
    }

    func testThrottledTransferIsSlow() throws {
        try withFaultServer(body: Self.body, fault: { $0.bytesPerSecond = 2_000 }) { server in
            let started = Date()
            let response = try FaultServerProbe.request(port: server.port)
            let elapsed = Date().timeIntervalSince(started)
            XCTAssertEqual(response.body, Self.body)
            // 1000 bytes at 2000 B/s: the last piece cannot leave before ~0.45 s.
            XCTAssertGreaterThanOrEqual(elapsed, 0.4)
        }
    }

    func testStallHoldsTheFirstResponseUntilStop() throws {
        try withFaultServer(body: Self.body, fault: { $0.stallAfterBodyBytes = 100 }) { server in

            let stalled = try FaultServerProbe.connect(port: server.port)
            defer { close(stalled) }
            try FaultServerProbe.sendRequest(stalled, port: server.port)
            var received: [UInt8] = []
            var headEnd: Int?
            while headEnd == nil || received.count - headEnd! < 100 {
                guard let chunk = FaultServerProbe.receive(stalled, waitMilliseconds: 5_000), !chunk.isEmpty else {
                    return XCTFail("stalled response ended before 100 body bytes arrived")
                }
                received += chunk
                headEnd = FaultServerProbe.headEnd(received)
            }
            XCTAssertEqual(received.count - headEnd!, 100)
            // Nothing more arrives while stalled (the server only resumes on close or stop).
            XCTAssertNil(FaultServerProbe.receive(stalled, waitMilliseconds: 300))

            // The stall is spent: a second request is answered in full while the first still hangs.
            let second = try FaultServerProbe.request(port: server.port)
            XCTAssertEqual(second.body, Self.body)

            let stopStarted = Date()
            server.stop()
            XCTAssertLessThan(Date().timeIntervalSince(stopStarted), 1.5)
            // stop() shut the stalled connection down: the client sees end of stream now.
            XCTAssertEqual(FaultServerProbe.receive(stalled, waitMilliseconds: 2_000), [])
            XCTAssertEqual(server.totalBodyBytesSent, 1100)
        }
    }

    func testStopClosesTheListener() throws {
        let server = try FaultServer(body: Self.body)
        let port = server.port
        XCTAssertEqual(try FaultServerProbe.request(port: port).status, 200)
        server.stop()
        XCTAssertThrowsError(try FaultServerProbe.connect(port: port))
        server.stop()  // idempotent
    }

    func testMalformedAndOversizedRequestsAreRefused() throws {
        try withFaultServer(body: Self.body) { server in

            let garbage = try FaultServerProbe.connect(port: server.port)
            defer { close(garbage) }
            try FaultServerProbe.sendAll(garbage, Array("NONSENSE\r\n\r\n".utf8))
            XCTAssertEqual(try FaultServerProbe.parse(FaultServerProbe.readToEnd(garbage)).status, 400)

            let huge = try FaultServerProbe.connect(port: server.port)
            defer { close(huge) }
            let padding = String(repeating: "a", count: 70 * 1024)
            try FaultServerProbe.sendAll(huge, Array("GET / HTTP/1.1\r\nX-Pad: \(padding)\r\n\r\n".utf8))
            XCTAssertEqual(try FaultServerProbe.parse(FaultServerProbe.readToEnd(huge)).status, 431)

            XCTAssertTrue(server.requests.isEmpty)
        }
    }

    func testRedirectEndpoints() throws {
        try withFaultServer(body: Self.body) { server in
            let target = "http://localhost:\(server.port)/data.bin?x=1&y=2"
            let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!

            let redirect = try FaultServerProbe.request(port: server.port, path: "/redirect?to=\(encoded)&code=307")
            XCTAssertEqual(redirect.status, 307)
            XCTAssertEqual(redirect.headers["location"], target)

            let defaulted = try FaultServerProbe.request(port: server.port, path: "/redirect?to=\(encoded)")
            XCTAssertEqual(defaulted.status, 302)

            let loop = try FaultServerProbe.request(port: server.port, path: "/redirect-loop")
            XCTAssertEqual(loop.status, 302)
            XCTAssertEqual(loop.headers["location"], "http://127.0.0.1:\(server.port)/redirect-loop")
        }
    }

    func testCurlDropsCredentialsWhenRedirectedToAnotherHost() throws {
        let curl = "/usr/bin/curl"
        guard FileManager.default.isExecutableFile(atPath: curl) else { throw XCTSkip("no curl") }
        try withFaultServer(body: Self.body) { server in
            let target = server.url().replacingOccurrences(of: "127.0.0.1", with: "localhost")
            let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!

            let process = Process()
            process.executableURL = URL(fileURLWithPath: curl)
            process.arguments = [
                "-sS", "-L", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
                "-H", "Authorization: Bearer secret",
                server.url("/redirect?to=\(encoded)&code=302"),
            ]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
            XCTAssertEqual(printed, "200")

            let logged = server.requests
            XCTAssertEqual(logged.count, 2)
            guard logged.count == 2 else { return }
            XCTAssertEqual(logged[0].host, "127.0.0.1:\(server.port)")
            XCTAssertEqual(logged[0].headers["authorization"], "Bearer secret")
            XCTAssertEqual(logged[1].host, "localhost:\(server.port)")
            XCTAssertEqual(logged[1].path, "/data.bin")
            XCTAssertNil(logged[1].headers["authorization"])
        }
    }
}

// MARK: - A tiny blocking HTTP/1.1 client; every read is bounded by a timeout.

private struct FaultServerProbeResponse {
    let status: Int
    let headers: [String: String]
    let body: [UInt8]
}

private struct FaultServerProbeError: Error, CustomStringConvertible {
    let description: String
}

private enum FaultServerProbe {
    static func connect(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw FaultServerProbeError(description: "socket: errno \(errno)") }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        let result = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw FaultServerProbeError(description: "connect to port \(port): errno \(code)")
        }
        return fd
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes {
                send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw FaultServerProbeError(description: "send: errno \(errno)") }
            offset += written
        }
    }

    static func sendRequest(
        _ fd: Int32, port: UInt16, method: String = "GET", path: String = "/data.bin",
        headers: [String: String] = [:]
    ) throws {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { text += "\(name): \(value)\r\n" }
        text += "\r\n"
        try sendAll(fd, Array(text.utf8))
    }

    /// Waits up to `waitMilliseconds` for data: the bytes read, `[]` at end of stream or on a
    /// reset, nil if nothing arrived in time.
    static func receive(_ fd: Int32, waitMilliseconds: Int32) -> [UInt8]? {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, waitMilliseconds) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 65536)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return count > 0 ? Array(buffer[0..<count]) : []
    }

    /// Reads until the server closes; each wait is bounded by the 5 s receive timeout.
    static func readToEnd(_ fd: Int32) throws -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                result += buffer[0..<count]
            } else if count == 0 || errno == ECONNRESET {
                return result
            } else if errno != EINTR {
                throw FaultServerProbeError(description: "recv: errno \(errno) after \(result.count) bytes")
            }
        }
    }

    static func request(
        port: UInt16, method: String = "GET", path: String = "/data.bin",
        headers: [String: String] = [:]
    ) throws -> FaultServerProbeResponse {
        let fd = try connect(port: port)
        defer { close(fd) }
        try sendRequest(fd, port: port, method: method, path: path, headers: headers)
        return try parse(readToEnd(fd))
    }

    static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4)
        where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i + 4
        }
        return nil
    }

    static func parse(_ bytes: [UInt8]) throws -> FaultServerProbeResponse {
        guard let end = headEnd(bytes) else {
            throw FaultServerProbeError(description: "no response head in \(bytes.count) bytes")
        }
        let head = String(decoding: bytes[..<(end - 4)], as: UTF8.self)
        let lines = head.components(separatedBy: "\r\n")
        let statusLine = lines[0].split(separator: " ")
        guard statusLine.count >= 2, statusLine[0] == "HTTP/1.1", let status = Int(statusLine[1]) else {
            throw FaultServerProbeError(description: "bad status line: \(lines[0])")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else {
                throw FaultServerProbeError(description: "bad header line: \(line)")
            }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...]
                .trimmingCharacters(in: .whitespaces)
        }
        return FaultServerProbeResponse(status: status, headers: headers, body: Array(bytes[end...]))
    }

    static func decodeChunked(_ bytes: [UInt8]) throws -> (body: [UInt8], complete: Bool) {
        var body: [UInt8] = []
        var index = 0
        while true {
            guard
                let lineEnd = (index..<max(index, bytes.count - 1)).first(where: {
                    bytes[$0] == 13 && bytes[$0 + 1] == 10
                })
            else { return (body, false) }
            let sizeText = String(decoding: bytes[index..<lineEnd], as: UTF8.self)
            guard let size = Int(sizeText, radix: 16) else {
                throw FaultServerProbeError(description: "bad chunk size: \(sizeText)")
            }
            index = lineEnd + 2
            if size == 0 { return (body, Array(bytes[index...]) == [13, 10]) }
            guard index + size + 2 <= bytes.count else { return (body + bytes[index...], false) }
            body += bytes[index..<(index + size)]
            guard bytes[index + size] == 13, bytes[index + size + 1] == 10 else {
                throw FaultServerProbeError(description: "chunk not followed by CRLF")
            }
            index += size + 2
        }
    }
}
