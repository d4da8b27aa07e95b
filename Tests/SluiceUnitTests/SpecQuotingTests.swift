import XCTest
@testable import Sluice

/// The canonical text of a spec is what a checkpoint records, `inspect` restores from and
/// the progress events print: it must parse back to the same spec whatever a word holds.
final class SpecQuotingTests: XCTestCase {
    func testCanonicalTextParsesBackForWordsWithBothQuotesAndCarriageReturns() throws {
        for path in ["o'a b\"c", "it's \"x\"", "'\"", "\"'", "a\rb", "x'y\"z|#w", "'", "\""] {
            let spec = try PipelineSpec(stages: [.read(path: "in.gz"), .gunzip, .file(path: path)])
            let reparsed = try PipelineSpec(parsing: spec.description)
            XCTAssertEqual(reparsed, spec, "\(path.debugDescription) printed as \(spec.description.debugDescription)")
            XCTAssertEqual(try PipelineSpec(parsing: spec.checkpointIdentity), spec, path.debugDescription)
        }
    }
}
