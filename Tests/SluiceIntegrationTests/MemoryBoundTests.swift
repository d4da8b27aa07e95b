import Foundation
import XCTest
@testable import SluiceTestSupport

/// Backpressure end to end: a 1 GiB body from a real nginx, through `verify`, into a stdout
/// consumed at a throttled ~25 MB/s. nginx and libcurl could deliver it in a couple of
/// seconds; if Sluice buffered instead of pacing libcurl, its peak RSS would grow toward
/// the whole body. GNU time reports the peak RSS; it must stay under 64 MiB.
final class MemoryBoundTests: XCTestCase {
    static let gibibyte = 1 << 30
    /// SHA-256 of 1 GiB of zero bytes.
    static let zeroGiBDigest = "49bc20df15e412a64472421e13fe86ff1c5165e18b2afccf160d4dc19fe68a14"
    static let readerBytesPerSecond = 25_000_000
    static let rssLimitKiB = 64 * 1024

    /// Reads stdin in up-to-1 MiB reads, hashing, and sleeps whenever it is ahead of the
    /// target rate (the sleep is the throttle); writes "BYTES SHA256HEX" to argv[2].
    static let reader = """
        import hashlib, sys, time
        rate = float(sys.argv[1])
        digest = hashlib.sha256()
        total = 0
        buffer = bytearray(1 << 20)
        view = memoryview(buffer)
        source = sys.stdin.buffer.raw
        start = time.monotonic()
        while True:
            n = source.readinto(view)
            if not n:
                break
            digest.update(view[:n])
            total += n
            ahead = total / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        with open(sys.argv[2], "w") as out:
            out.write("%d %s\\n" % (total, digest.hexdigest()))
        """

    func testOneGiBThroughASlowStdoutReaderStaysUnder64MiBRSS() throws {
        try requireSlowTests()
        let gnuTime = "/usr/bin/time", python = "/usr/bin/python3"
        for tool in [gnuTime, python] where !FileManager.default.isExecutableFile(atPath: tool) {
            XCTFail("\(tool) is missing: this test needs GNU time (Debian 'time') and python3 (Debian 'python3')")
            return
        }
        let nginx = try startNginx(self) { root in
            // A sparse file: 1 GiB of zeros that costs no disk and no time to make.
            XCTAssertEqual(try shell("truncate -s 1G '\(root)/zero.bin'").status, 0)
        }
        let dir = try makeTemporaryDirectory(self)
        try Self.reader.write(toFile: dir + "/reader.py", atomically: true, encoding: .utf8)
        let checkpoint = dir + "/x.ckpt"
        // One connection: this is the single stream's backpressure (several connections have
        // their own bound, in MultiConnectionTests).
        let spec = "fetch \(nginx.url("/zero.bin")) connections=1 | verify sha256:\(Self.zeroGiBDigest) | stdout"

        let started = Date()
        let command = """
            '\(gnuTime)' -f %M -o '\(dir)/rss.txt' '\(SluiceBinary.path)' --progress none --checkpoint '\(checkpoint)' \
            '\(spec)' 2> '\(dir)/sluice.err' | '\(python)' '\(dir)/reader.py' \(Self.readerBytesPerSecond) '\(dir)/result.txt'
            echo "${PIPESTATUS[0]} ${PIPESTATUS[1]}"
            """
        let result = try shell(command, capture: true)
        let seconds = Date().timeIntervalSince(started)
        XCTAssertEqual(result.status, 0)
        let statuses = result.output.split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
        let stderr = (try? String(contentsOfFile: dir + "/sluice.err", encoding: .utf8)) ?? ""
        XCTAssertEqual(statuses, [0, 0], "sluice (via time), reader exit statuses; sluice stderr:\n\(stderr)")

        // The reader got exactly 1 GiB, with the right digest.
        let got = ((try? String(contentsOfFile: dir + "/result.txt", encoding: .utf8)) ?? "")
            .split(whereSeparator: \.isWhitespace).map(String.init)
        XCTAssertEqual(got.first, String(Self.gibibyte), "bytes the reader received")
        XCTAssertEqual(got.last, Self.zeroGiBDigest, "digest of what the reader received")

        // GNU time's last line is the peak RSS in KiB (a line before it may say the status).
        let rssText = (try? String(contentsOfFile: dir + "/rss.txt", encoding: .utf8)) ?? ""
        let rssKiB = rssText.split(separator: "\n").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        let rss = try XCTUnwrap(rssKiB, "GNU time reported no peak RSS: \(rssText.debugDescription)")
        print("MemoryBoundTests: peak RSS \(rss) KiB (\(String(format: "%.1f", Double(rss) / 1024)) MiB) for 1 GiB in \(String(format: "%.1f", seconds)) s")
        XCTAssertGreaterThan(rss, 1024, "an RSS below 1 MiB means time measured the wrong thing")
        XCTAssertLessThan(rss, Self.rssLimitKiB, "peak RSS \(rss) KiB: memory grows with the body instead of pacing libcurl")

        // The reader, not the network, set the pace (so backpressure was exercised), and the
        // body came in one uninterrupted request.
        let floor = Double(Self.gibibyte) / Double(Self.readerBytesPerSecond) * 0.9
        XCTAssertGreaterThan(seconds, floor, "the slow reader should have set the pace")
        let log = nginx.waitForLog(nginx.plainAccessLog, containing: ["GET /zero.bin 200"])
        XCTAssertTrue(log.contains("GET /zero.bin 200 range=\"-\" if_range=\"-\" sent=\(Self.gibibyte)"), log)
        XCTAssertEqual(log.split(separator: "\n").count, 1, "one request, no retries:\n\(log)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: checkpoint), "the checkpoint is removed after success")
    }
}
