import XCTest
@testable import Sluice

/// `fetch URL connections=N`: parsed, range-checked, and kept out of the canonical text (a
/// checkpoint resumes with any number of connections).
final class FetchStageOptionsTests: XCTestCase {
    func testConnectionsOption() throws {
        let rows: [(String, Int?)] = [
            ("fetch http://h/x | stdout", nil),
            ("fetch http://h/x connections=1 | stdout", 1),
            ("fetch http://h/x connections=8 | stdout", 8),
            ("fetch 'http://h/x' connections=32 | stdout", 32),
        ]
        for (text, expected) in rows {
            let spec = try PipelineSpec(parsing: text)
            XCTAssertEqual(spec.source, .fetch(url: "http://h/x", connections: expected), text)
            XCTAssertEqual(spec.description, "fetch http://h/x | stdout", text)
        }
    }

    func testBadConnectionsPointAtTheWord() {
        let rows: [(String, Int, String)] = [
            ("fetch http://h/x connections=0 | stdout", 18, "from 1 to 32, not '0'"),
            ("fetch http://h/x connections=33 | stdout", 18, "from 1 to 32, not '33'"),
            ("fetch http://h/x connections=four | stdout", 18, "not 'four'"),
            ("fetch http://h/x connections= | stdout", 18, "not ''"),
            ("fetch http://h/x connections=-1 | stdout", 18, "not '-1'"),
            ("fetch http://h/x connections=99999999999999999999 | stdout", 18, "from 1 to 32"),
            ("fetch http://h/x connections=2 connections=3 | stdout", 32, "given twice"),
            ("fetch http://h/x conections=2 | stdout", 18, "optionally connections=N; unexpected 'conections=2'"),
            ("fetch http://h/x extra | stdout", 18, "unexpected 'extra'"),
            ("fetch | stdout", 1, "needs a URL"),
        ]
        for (text, column, words) in rows {
            XCTAssertThrowsError(try PipelineSpec(parsing: text), text) { error in
                guard let e = error as? SpecError else { return XCTFail("\(text): \(error)") }
                XCTAssertEqual(e.column, column, "\(text): \(e)")
                XCTAssertTrue(e.description.contains(words), "\(text): \(e)")
            }
        }
    }
}
