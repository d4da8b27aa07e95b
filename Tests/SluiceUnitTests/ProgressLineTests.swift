import XCTest
@testable import Sluice

/// The progress bar's line and the numbers in it.
final class ProgressLineTests: XCTestCase {
    func testBytes() {
        let cases: [(UInt64, String)] = [
            (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (10 << 20, "10.0 MiB"),
            (5 << 30, "5.0 GiB"), (3 << 40, "3.0 TiB"), (2048 << 40, "2.0 PiB"), (.max, "16.0 EiB"),
        ]
        for (n, expected) in cases {
            XCTAssertEqual(formatBytes(n), expected, "\(n)")
        }
    }

    func testDurations() {
        let cases: [(Double, String)] = [
            (0, "0:00"), (59.4, "0:59"), (59.5, "1:00"), (61, "1:01"), (3599, "59:59"), (3600, "1:00:00"),
            (3725, "1:02:05"), (.infinity, "--:--"), (.nan, "--:--"), (-5, "0:00"),
            (99 * 86_400, "2376:00:00"), (100 * 86_400, "100d"), (1e19, ">99999d"),
        ]
        for (seconds, expected) in cases {
            XCTAssertEqual(formatDuration(seconds), expected, "\(seconds)")
        }
    }

    func testBarWithAKnownTotal() {
        XCTAssertEqual(
            ProgressRenderer.barLine(offset: 512, total: 1024, resumed: false, rate: 0),
            "[############------------]  50.0% 512 B/1.0 KiB")
        XCTAssertEqual(
            ProgressRenderer.barLine(offset: 512, total: 1024, resumed: false, rate: 256),
            "[############------------]  50.0% 512 B/1.0 KiB 256 B/s ETA 0:02")
        XCTAssertEqual(
            ProgressRenderer.barLine(offset: 0, total: 10 << 20, resumed: true, rate: 0),
            "[------------------------]   0.0% 0 B/10.0 MiB (resumed)")
    }

    func testBarPastItsTotalStaysFull() {
        XCTAssertEqual(
            ProgressRenderer.barLine(offset: 4096, total: 1024, resumed: false, rate: 1024),
            "[########################] 100.0% 4.0 KiB/1.0 KiB 1.0 KiB/s ETA 0:00")
    }

    /// A server that declares 9e18 bytes and trickles one a second: an ETA of ~1e19 s.
    func testBarWithAnAbsurdTotalAndRate() {
        XCTAssertEqual(
            ProgressRenderer.barLine(offset: 1, total: 9_000_000_000_000_000_000, resumed: false, rate: 1),
            "[------------------------]   0.0% 1 B/7.8 EiB 1 B/s ETA >99999d")
    }

    func testBarWithoutATotal() {
        XCTAssertEqual(ProgressRenderer.barLine(offset: 3 << 20, total: nil, resumed: false, rate: 1_048_576), "3.0 MiB 1.0 MiB/s")
        XCTAssertEqual(ProgressRenderer.barLine(offset: 3 << 20, total: 0, resumed: true, rate: 0), "3.0 MiB (resumed)")
    }
}
