import Foundation
import XCTest
@testable import SluiceTestSupport

/// `fetch URL connections=N` end to end with the real binary: against nginx's per-connection
/// `limit_rate` (more connections, more bytes a second; exact output), a kill -9 loop (every
/// rerun resumes with a Range from the checkpoint's in-order offset), and a stalled head
/// connection with 16 connections (peak RSS stays under 64 MiB).
final class MultiConnectionTests: XCTestCase {
    static let rssLimitKiB = 64 * 1024

    func testThroughputGrowsWithConnectionsAndOutputIsExact() throws {
        try requireSlowTests()
        let size = 32 << 20
        let (_, url, digest) = try startSlowNginx(size: size, rate: "8m")
        let dir = try makeTemporaryDirectory(self)
        var report: [String] = []
        for connections in [1, 2, 4, 8] {
            let out = "\(dir)/out-\(connections)"
            let started = Date()
            let result = try SluiceBinary.run([
                "--progress", "json",
                "fetch \(url) connections=\(connections) | verify sha256:\(digest) | file \(out)",
            ])
            let seconds = Date().timeIntervalSince(started)
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(try sha256Hex(ofFile: out), digest)
            let done = progressEvents(result.stderr.split(separator: "\n").map(String.init)).last { $0["event"] as? String == "done" }
            XCTAssertEqual(done?["source_offset"] as? Int, size)
            XCTAssertEqual(done?["connections"] as? Int, connections == 1 ? nil : connections, "done reports the count")
            report.append("N=\(connections): \(String(format: "%.1f", Double(size) / seconds / 1_048_576)) MiB/s")
        }
        // Throughput is reported, not asserted (timing); the bytes are.
        print("MultiConnectionTests: limit_rate 8m per connection, 32 MiB: " + report.joined(separator: ", "))
    }

    func testKillLoopWithEightConnectionsResumesFromTheInOrderOffset() throws {
        try requireSlowTests()
        // nginx lets each request send one second's worth at once (limit_rate × (elapsed + 1)),
        // so the rate must be well below a segment's size for the runs to last until the kill.
        let (nginx, url, digest) = try startSlowNginx(size: 64 << 20, rate: "512k")
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let spec = "fetch \(url) connections=8 | verify sha256:\(digest) | file \(out)"
        let arguments = ["--progress", "json", "--checkpoint-interval", "1MiB", spec]
        var resumedFrom: [UInt64] = []
        for kill in 1...5 {
            // Kill -9 right after this run's first checkpoint at least 2 MiB past where it started.
            let target = (resumedFrom.last ?? 0) + (2 << 20)
            let run = try StreamingProcess(SluiceBinary.path, arguments)
            let seen = run.waitForLine(timeout: 120) { line in
                guard let event = progressEvents([line]).first, event["event"] as? String == "checkpoint" else { return false }
                return ((event["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) >= target
            }
            run.signal(SIGKILL)
            let outcome = run.wait()
            // Bytes held in the reorder window (up to 12 MiB) can all leave at once when the head
            // segment completes, so a run may finish before the kill lands: fine, if late enough.
            if FileManager.default.fileExists(atPath: out) {
                XCTAssertGreaterThanOrEqual(kill, 4, "run \(kill) finished before the kill")
                break
            }
            guard seen, outcome.status == SIGKILL else {
                return XCTFail(
                    "run \(kill) was not killed after a checkpoint at \(target): status \(outcome.status),"
                        + " \(outcome.lines.suffix(3))")
            }
            let inspected = try Self.inspectedOffset(out + ".sluice")
            guard let offset = inspected.offset else {
                let files = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
                return XCTFail(
                    "kill \(kill) left no readable checkpoint: \(inspected.stderr); files \(files);"
                        + " \(outcome.lines.filter { !$0.contains("\"progress\"") }.suffix(6))")
            }
            XCTAssertGreaterThanOrEqual(offset, target)
            resumedFrom.append(offset)
        }
        let last = FileManager.default.fileExists(atPath: out) ? nil : try SluiceBinary.run(arguments)
        XCTAssertEqual(last?.status ?? 0, 0, last?.stderr ?? "")
        XCTAssertEqual(try sha256Hex(ofFile: out), digest)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out + ".sluice"))
        // Each rerun's first request (its head connection) asked from the checkpoint's offset.
        let needles = resumedFrom.map { "range=\"bytes=\($0)-\"" }
        let log = nginx.waitForLog(nginx.plainAccessLog, containing: needles)
        for needle in needles {
            XCTAssertTrue(
                log.contains(needle), "nginx's log has no \(needle):\n\(log.split(separator: "\n").suffix(12).joined(separator: "\n"))\n\(last?.stderr ?? "")")
        }
        print("MultiConnectionTests: kill -9 loop, 8 connections, resumed from \(resumedFrom)")
    }

    func testSIGINTSavesTheInOrderPointAndTheRerunReplansFromThere() throws {
        try requireSlowTests()
        let (nginx, url, digest) = try startSlowNginx(size: 32 << 20, rate: "512k")
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let arguments = [
            "--progress", "json", "--checkpoint-interval", "1MiB",
            "fetch \(url) connections=8 | verify sha256:\(digest) | file \(out)",
        ]
        let run = try StreamingProcess(SluiceBinary.path, arguments)
        XCTAssertTrue(run.waitForLine(timeout: 60, where: isLaterCheckpoint))
        run.signal(SIGINT)
        let outcome = run.wait()
        XCTAssertEqual(outcome.status, 130, "\(outcome.lines.suffix(3))")
        let inspected = try Self.inspectedOffset(out + ".sluice")
        let offset = try XCTUnwrap(inspected.offset, inspected.stderr)
        // The checkpoint covers bytes in order only: the partial file holds at least that many.
        let partial = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: out + ".sluice-part")[.size] as? NSNumber)
        XCTAssertLessThanOrEqual(offset, partial.uint64Value)
        XCTAssertGreaterThan(offset, 0)

        let rerun = try SluiceBinary.run(arguments)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        let resume = progressEvents(rerun.stderr.split(separator: "\n").map(String.init)).first { $0["event"] as? String == "resume" }
        XCTAssertEqual((resume?["source_offset"] as? NSNumber)?.uint64Value, offset)
        XCTAssertEqual(try sha256Hex(ofFile: out), digest)
        let needle = "range=\"bytes=\(offset)-\""
        XCTAssertTrue(nginx.waitForLog(nginx.plainAccessLog, containing: [needle]).contains(needle))
    }

    func testSixteenConnectionsWithAStalledHeadStayUnder64MiBRSS() throws {
        try requireSlowTests()
        let gnuTime = "/usr/bin/time"
        guard FileManager.default.isExecutableFile(atPath: gnuTime) else {
            return XCTFail("\(gnuTime) is missing: this test needs GNU time (Debian 'time')")
        }
        let size = 96 << 20
        let block = makeTestData(count: 1 << 20, seed: 16)
        var body: [UInt8] = []
        body.reserveCapacity(size)
        for index in 0..<(size >> 20) {
            body.append(contentsOf: block)
            body[body.count - 1] = UInt8(truncatingIfNeeded: index)
        }
        // The head connection sends 64 KiB, then nothing: the 15 others run ahead until the
        // window is full and wait; after the stall timeout the head's segment is retried.
        var fault = FaultServer.Fault()
        fault.perConnection[1] = .init(stallAfterBodyBytes: 64 << 10)
        let server = try FaultServer(body: body, fault: fault)
        defer { server.stop() }
        let dir = try makeTemporaryDirectory(self)
        let path = dir + "/expected"
        try Data(body).write(to: URL(fileURLWithPath: path))
        let digest = try sha256Hex(ofFile: path)
        let out = dir + "/out"
        let command = """
            '\(gnuTime)' -f %M -o '\(dir)/rss.txt' '\(SluiceBinary.path)' --progress json --stall-timeout 3 \
            'fetch \(server.url()) connections=16 | verify sha256:\(digest) | file \(out)' 2> '\(dir)/err'
            """
        let result = try shell(command)
        let stderr = (try? String(contentsOfFile: dir + "/err", encoding: .utf8)) ?? ""
        XCTAssertEqual(result.status, 0, stderr)
        XCTAssertEqual(try sha256Hex(ofFile: out), digest)
        XCTAssertTrue(stderr.contains("no data from"), "the head was not retried after its stall:\n\(stderr)")
        let rssText = (try? String(contentsOfFile: dir + "/rss.txt", encoding: .utf8)) ?? ""
        let rss = try XCTUnwrap(rssText.split(separator: "\n").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) })
        print("MultiConnectionTests: 16 connections, stalled head: peak RSS \(rss) KiB")
        XCTAssertGreaterThan(rss, 1024)
        XCTAssertLessThanOrEqual(rss, Self.rssLimitKiB)
    }

    /// nginx serving `size` bytes at /slow/data.bin, each connection limited to `rate`: the
    /// server, that file's URL and its sha256.
    private func startSlowNginx(size: Int, rate: String) throws -> (nginx: Nginx, url: String, digest: String) {
        let nginx = try startNginx(self, configuration: .init(rateLimits: ["/slow/": rate])) { root in
            try FileManager.default.createDirectory(atPath: root + "/slow", withIntermediateDirectories: true)
            try Self.writeData(size: size, to: root + "/slow/data.bin")
        }
        return (nginx, nginx.url("/slow/data.bin"), try sha256Hex(ofFile: nginx.root + "/slow/data.bin"))
    }

    /// The source offset `sluice inspect --json` reads from a checkpoint (nil: none), and its stderr.
    private static func inspectedOffset(_ checkpoint: String) throws -> (offset: UInt64?, stderr: String) {
        let inspected = try SluiceBinary.run(["inspect", checkpoint, "--json"])
        let object = try? JSONSerialization.jsonObject(with: inspected.stdout) as? [String: Any]
        return (((object?["source"] as? [String: Any])?["offset"] as? NSNumber)?.uint64Value, inspected.stderr)
    }

    /// Incompressible-ish data, written in 1 MiB blocks that differ from each other.
    private static func writeData(size: Int, to path: String) throws {
        let block = makeTestData(count: 1 << 20, seed: 7)
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        var piece = block
        for index in 0..<(size >> 20) {
            piece[0] = UInt8(truncatingIfNeeded: index)
            piece[1] = UInt8(truncatingIfNeeded: index >> 8)
            try handle.write(contentsOf: piece)
        }
    }
}

/// `--connections N` on the command line: checked, and used by a fetch without its own option.
final class ConnectionsOptionTests: XCTestCase {
    func testConnectionsOption() throws {
        let size = 8 << 20
        let body = makeTestData(count: size, seed: 32)
        let server = try FaultServer(body: body)
        defer { server.stop() }
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let result = try SluiceBinary.run(["--connections", "4", "--progress", "json", "fetch \(server.url()) | file \(out)"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: out)), Data(body))
        let done = progressEvents(result.stderr.split(separator: "\n").map(String.init)).last { $0["event"] as? String == "done" }
        // 8 MiB in segments of 12 MiB / 4 = 3 MiB: three segments, three connections.
        XCTAssertEqual(done?["connections"] as? Int, 3, result.stderr)
        XCTAssertGreaterThan(server.requests.count, 1)

        for bad in ["0", "33", "x", "-1"] {
            let refused = try SluiceBinary.run(["--connections", bad, "fetch \(server.url()) | file \(dir)/no"])
            XCTAssertEqual(refused.status, 2, bad)
            XCTAssertTrue(refused.stderr.contains("--connections takes a whole number from 1 to 32"), refused.stderr)
        }
    }
}
