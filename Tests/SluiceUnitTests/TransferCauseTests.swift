import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Every fault of a transfer arrives at the caller of `Pipeline.run` as the `TransferCause` a
/// library user switches on — through one connection and through several (MultiFetch), where
/// the fault may hit the head or only the extra connections. (TLS, which needs nginx, is in
/// the integration target's `TransferCauseTLSTests`.)
final class TransferCauseTests: XCTestCase {
    private static let body = makeTestData(count: 1 << 20, seed: 91)

    private struct Row {
        let name: String
        var fault: (inout FaultServer.Fault) -> Void = { _ in }
        /// The URL to fetch, given the server's base URL; the server's own by default.
        var url: (String) -> String = { $0 + "/data.bin" }
        /// The connection counts to run with: the fault must show through each.
        var connections: [Int] = [1, 4]
        var gaveUp: TransferGiveUp = .atOnce
        /// Whether the cause is the expected one.
        let expect: (TransferCause) -> Bool
    }

    func testEveryFaultArrivesAsItsCauseThroughOneOrSeveralConnections() throws {
        let closedPort = try Self.closedPort()
        let rows: [Row] = [
            Row(name: "404", fault: { $0.status = 404 }) {
                if case .http(404, "404 Not Found", let server) = $0 { return server.hasPrefix("127.0.0.1:") }
                return false
            },
            Row(name: "503 for good", fault: { $0.unavailableCount = 1_000 }, gaveUp: .afterRetries(1)) {
                if case .http(503, _, _) = $0 { return true }
                return false
            },
            Row(name: "unresolvable name", url: { _ in "http://nonexistent.invalid/data.bin" }) {
                $0 == .dns(host: "nonexistent.invalid")
            },
            Row(
                name: "refused connection", url: { _ in "http://127.0.0.1:\(closedPort)/data.bin" },
                gaveUp: .afterRetries(1)
            ) {
                $0 == .connect(host: "127.0.0.1", port: closedPort, reason: String(cString: strerror(ECONNREFUSED)))
            },
            Row(name: "repeated Content-Length", fault: { $0.contentLength = "10, 20" }) {
                Self.isViolation($0, mentioning: "Content-Length")
            },
            Row(name: "redirect loop", url: { $0 + "/redirect-loop" }) {
                if case .redirect(let reason) = $0 { return reason.contains("too many redirects") }
                return false
            },
            // A 206 for bytes other than the ones asked for, to the first request (an extra
            // connection's misplaced 206 only means fewer connections: MultiFetchTests).
            Row(name: "Content-Range off the request", fault: { $0.contentRange = "bytes 5-99/1048576" }) {
                Self.isViolation($0, mentioning: "refusing to splice it in")
            },
            Row(name: "Content-Range past its own total", fault: { $0.contentRange = "bytes 0-99/50" }) {
                Self.isViolation($0, mentioning: "cannot tell which bytes it holds")
            },
            Row(
                name: "404 on an extra connection", fault: { $0.perConnection[3] = FaultServer.ConnectionFault(status: 404) },
                connections: [4]
            ) {
                if case .http(404, _, _) = $0 { return true }
                return false
            },
        ]
        for row in rows {
            try withFaultServer(body: Self.body, fault: row.fault) { server in
                for connections in row.connections {
                    let label = "\(row.name), connections=\(connections)"
                    let error = try run(row.url(server.baseURL), connections: connections)
                    guard case .transfer(_, let cause, let gaveUp)? = error else {
                        XCTFail("\(label): expected a transfer failure, got \(String(describing: error))")
                        continue
                    }
                    XCTAssertTrue(row.expect(cause), "\(label): \(cause)")
                    XCTAssertEqual(gaveUp, row.gaveUp, label)
                    XCTAssertEqual(error?.exitCode, 3, label)
                    XCTAssertTrue(error?.description.contains(cause.description) == true, label)
                }
            }
        }
    }

    /// The pattern the documentation shows: a library caller catches one cause directly.
    func testACallerCatchesACauseByPattern() throws {
        try withFaultServer(body: Self.body, fault: { $0.status = 404 }) { server in
            let pipeline = try Pipeline("fetch \(server.url()) | file \(try makeTemporaryDirectory(self))/out")
            var caught = false
            do throws(SluiceError) {
                try pipeline.run()
            } catch .transfer(_, .http(status: 404, _, _), _) {
                caught = true
            } catch {
                XCTFail("\(error)")
            }
            XCTAssertTrue(caught)
        }
    }

    /// The message states facts: the cause, then how the retries ended.
    func testMessagesSayTheCauseAndHowTheRetriesEnded() {
        let cause = TransferCause.http(status: 503, statusText: "503 Service Unavailable", server: "s:1")
        let table: [(TransferGiveUp, String)] = [
            (.atOnce, "transfer of u failed: HTTP 503 Service Unavailable from s:1"),
            (.afterRetries(1), "transfer of u failed: HTTP 503 Service Unavailable from s:1 (gave up after 1 retry)"),
            (.afterRetries(4), "transfer of u failed: HTTP 503 Service Unavailable from s:1 (gave up after 4 retries)"),
            (
                .deadlineBeforeRetry,
                "transfer of u failed: HTTP 503 Service Unavailable from s:1 (the --max-time deadline comes before the next retry)"
            ),
        ]
        for (gaveUp, expected) in table {
            XCTAssertEqual(SluiceError.transfer(url: "u", cause: cause, gaveUp: gaveUp).description, expected)
        }
        XCTAssertEqual(
            TransferCause.connect(host: "h", port: 81, reason: "Connection refused").description,
            "cannot connect to h port 81: Connection refused")
        XCTAssertEqual(TransferCause.dns(host: "nonexistent.invalid").description, "cannot resolve host nonexistent.invalid")
    }

    /// Secrets scrubbed from a message are scrubbed from every text a cause carries.
    func testScrubbingReachesEveryTextOfACause() {
        let cause = TransferCause.protocolViolation(server: "secret-host", reason: "secret-host sent secret-stuff")
        XCTAssertEqual(
            cause.mapText { $0.replacingOccurrences(of: "secret", with: "***") },
            .protocolViolation(server: "***-host", reason: "***-host sent ***-stuff"))
    }

    // MARK: helpers

    private static func isViolation(_ cause: TransferCause, mentioning words: String) -> Bool {
        if case .protocolViolation(_, let reason) = cause { return reason.contains(words) }
        return false
    }

    /// Runs `fetch URL connections=N | file …` through `Pipeline.run` and returns its error.
    private func run(_ url: String, connections: Int) throws -> SluiceError? {
        let directory = try makeTemporaryDirectory(self)
        var options = PipelineOptions()
        options.http.retries = 1
        options.http.backoffBase = 0.01
        options.http.stallTimeout = 10
        var tuning = MultiFetch.Tuning()
        tuning.autoThreshold = 0
        tuning.windowBytes = 256 << 10
        tuning.minimumSegment = 64 << 10
        tuning.maximumSegment = 64 << 10
        tuning.minimumSplit = 16 << 10
        options.http.tuning = tuning
        return try fetchPipelineError(url, connections: connections, options: options, output: directory + "/out")
    }

    /// A port on 127.0.0.1 that nothing listens on: bound, then closed.
    private static func closedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
