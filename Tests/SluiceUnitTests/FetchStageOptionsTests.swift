import XCTest
@testable import Sluice

/// `fetch URL connections=N`: parsed by the registry's grammar and range-checked.
final class FetchStageOptionsTests: XCTestCase {
    func testConnectionsOption() throws {
        let rows: [(String, String?)] = [
            ("fetch http://h/x | stdout", nil),
            ("fetch http://h/x connections=1 | stdout", "1"),
            ("fetch http://h/x connections=8 | stdout", "8"),
            ("fetch 'http://h/x' connections=32 | stdout", "32"),
        ]
        for (text, expected) in rows {
            let spec = try PipelineSpec(parsing: text)
            XCTAssertEqual(spec.source.option("connections"), expected, text)
            XCTAssertEqual(try PipelineSpec(parsing: spec.description), spec, text)
        }
    }

    func testBadConnectionsPointAtTheWord() {
        let rows: [(String, Int, String)] = [
            ("fetch http://h/x connections=0 | stdout", 18, "from 1 to 32"),
            ("fetch http://h/x connections=33 | stdout", 18, "from 1 to 32"),
            ("fetch http://h/x connections=four | stdout", 18, "whole number"),
            ("fetch http://h/x connections= | stdout", 18, "whole number"),
            ("fetch http://h/x connections=-1 | stdout", 18, "whole number"),
            ("fetch http://h/x connections=+4 | stdout", 18, "whole number"),
            ("fetch http://h/x connections=99999999999999999999 | stdout", 18, "from 1 to 32"),
            ("fetch http://h/x connections=2 connections=3 | stdout", 32, "twice"),
            ("fetch http://h/x conections=2 | stdout", 18, "conections=2"),
        ]
        for (text, column, words) in rows {
            XCTAssertThrowsError(try PipelineSpec(parsing: text), text) { error in
                guard let e = error as? SpecError else { return XCTFail("\(text): \(error)") }
                XCTAssertEqual(e.column, column, "\(text): \(e)")
                XCTAssertTrue(e.description.contains(words), "\(text): \(e)")
            }
        }
    }

    /// The stage option wins over `--connections`; without either, the default rule applies.
    func testStageOptionOverridesTheRunDefault() throws {
        var options = PipelineOptions()
        options.http.connections = 2
        let control = RunControl(progress: ProgressReporter(handler: nil))
        let spec = try PipelineSpec(parsing: "fetch http://127.0.0.1:9/x connections=6 | stdout")
        guard case .source(let make, _, _) = StageKind.fetch.factory else { return XCTFail("fetch is not a source") }
        let source = try make(spec.source, StageContext(options: options, control: control), nil)
        XCTAssertEqual((source as? HTTPSource)?.connections, 6)
        let plain = try make(
            try PipelineSpec(parsing: "fetch http://127.0.0.1:9/x | stdout").source,
            StageContext(options: options, control: control), nil)
        XCTAssertEqual((plain as? HTTPSource)?.connections, 2)
    }
}
