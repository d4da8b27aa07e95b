import XCTest
@testable import Sluice

/// What Sluice prints of strings it did not write (issue 8 items 2, 17, 18): escaped server
/// strings, redacted URLs, and progress lines that survive absurd numbers.
final class DisplayTextTests: XCTestCase {
    func testControlAndInvisibleCharactersAreEscaped() {
        let table: [(String, String)] = [
            ("plain text, café, 日本", "plain text, café, 日本"),
            ("Not Found\u{1b}[2J\u{1b}[H", "Not Found\\x1B[2J\\x1B[H"),
            ("a\rb\nc\td\u{0}", "a\\x0Db\\x0Ac\\x09d\\x00"),
            ("\u{7f}\u{9b}31m", "\\x7F\\x9B31m"),
            ("evil\u{202E}txt.exe", "evil\\u{202E}txt.exe"),
            ("zero\u{200B}width\u{FEFF}", "zero\\u{200B}width\\u{FEFF}"),
            ("back\\slash", "back\\slash"),
        ]
        for (raw, shown) in table {
            XCTAssertEqual(DisplayText.escaped(raw), shown)
            XCTAssertEqual(DisplayText.escaped(DisplayText.escaped(raw)), shown, "escaping twice changes nothing more")
        }
    }

    func testURLSecretsAreRedacted() {
        let table: [(String, String)] = [
            ("https://example.org/data.bin", "https://example.org/data.bin"),
            ("https://user:hunter2@example.org:8443/a?b", "https://***@example.org:8443/a?***"),
            ("https://example.org/f?X-Amz-Signature=abc123&X-Amz-Expires=60", "https://example.org/f?X-Amz-Signature=***&X-Amz-Expires=***"),
            ("http://h/p?token=s3cr3t#frag", "http://h/p?token=***#***"),
            ("http://h/p?a=1&&b=", "http://h/p?a=***&&b=***"),
            ("http://u@h/", "http://***@h/"),
            ("file:///tmp/a?b=c", "file:///tmp/a?b=***"),
            ("not a url", "not a url"),
        ]
        for (raw, shown) in table { XCTAssertEqual(DisplayText.redactedURL(raw), shown, raw) }
    }

    func testRedactedSpecKeepsEverythingButTheSecrets() throws {
        let spec = try PipelineSpec(parsing: "fetch 'https://u:pw@h/x?sig=abc&e=1' | gunzip | file 'out?x=1'")
        XCTAssertEqual(spec.redactedDescription, "fetch https://***@h/x?sig=***&e=*** | gunzip | file out?x=1")
        let refreshed = try PipelineSpec(parsing: "fetch 'https://u:pw@h/x?sig=zzz&e=2' | gunzip | file 'out?x=1'")
        XCTAssertEqual(refreshed.redactedDescription, spec.redactedDescription, "only query values differ")
        let otherPath = try PipelineSpec(parsing: "fetch 'https://u:pw@h/y?sig=abc&e=1' | gunzip | file 'out?x=1'")
        XCTAssertNotEqual(otherPath.redactedDescription, spec.redactedDescription)
    }

    // MARK: Progress with absurd numbers (issue 8 item 2)

    func testDurationsNeverTrap() {
        let table: [(Double, String)] = [
            (0, "0:00"), (59.6, "1:00"), (3_600, "1:00:00"), (-3, "0:00"), (.nan, "--:--"), (.infinity, "--:--"),
            (100 * 86_400, "100d"), (1e19, ">99999d"), (Double.greatestFiniteMagnitude, ">99999d"),
        ]
        for (seconds, shown) in table { XCTAssertEqual(formatDuration(seconds), shown, "\(seconds)") }
    }

    func testBarLineWithAbsurdValues() {
        // Content-Length 9e18 at a trickle: an ETA of ~1e19 s.
        let trickle = ProgressRenderer.barLine(offset: 1, total: 9_000_000_000_000_000_000, resumed: false, rate: 0.9)
        XCTAssertTrue(trickle.contains("ETA >99999d"), trickle)
        let fast = ProgressRenderer.barLine(offset: UInt64.max, total: nil, resumed: true, rate: 1e30)
        XCTAssertTrue(fast.contains("EiB/s"), fast)
        _ = ProgressRenderer.barLine(offset: UInt64.max, total: UInt64.max, resumed: false, rate: .infinity)
        _ = ProgressRenderer.barLine(offset: 5, total: 1, resumed: false, rate: .nan)
        XCTAssertEqual(formatRate(-1), "0 B")
        XCTAssertEqual(formatBytes(UInt64.max), "16.0 EiB")
    }
}

/// The bar never outgrows the terminal, however narrow: a line that wraps leaves a stale
/// copy behind at every redraw.
final class ProgressBarWidthTests: XCTestCase {
    func testTheBarFitsEveryWidthAndKeepsTheCounts() {
        let cases: [(UInt64, UInt64?, Bool, Double)] = [
            (512 << 20, 1 << 30, true, 50e6), (1, 9_000_000_000_000_000_000, false, 0.9), (12345, nil, true, 1e6), (0, 100, false, 0),
        ]
        for (offset, total, resumed, rate) in cases {
            for columns in [1, 10, 20, 30, 40, 60, 80, 120, 300] {
                let line = ProgressRenderer.barLine(offset: offset, total: total, resumed: resumed, rate: rate, columns: columns)
                XCTAssertLessThanOrEqual(line.count, max(1, columns - 1), "\(columns) columns: '\(line)'")
                if columns >= 40 {
                    XCTAssertTrue(line.contains(formatBytes(offset)), "\(columns) columns lost the byte count: '\(line)'")
                }
            }
        }
        let wide = ProgressRenderer.barLine(offset: 512 << 20, total: 1 << 30, resumed: true, rate: 50e6, columns: 120)
        XCTAssertTrue(wide.hasPrefix("[############------------]") && wide.contains("ETA") && wide.hasSuffix("(resumed)"), wide)
    }
}
