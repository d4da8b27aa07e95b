import XCTest
@testable import Sluice
@testable import SluiceTestSupport

final class PipelineSpecTests: XCTestCase {
    let digest = String(repeating: "ab", count: 32)

    func testParsesEveryStage() throws {
        let spec = try PipelineSpec(parsing: "fetch https://h/x.gz | verify sha256:\(digest.uppercased()) | gunzip | file out")
        XCTAssertEqual(spec.stages, [.fetch(url: "https://h/x.gz"), .verify(sha256: digest), .gunzip, .file(path: "out")])
        XCTAssertEqual(try PipelineSpec(parsing: "stdin|gunzip|stdout").stages, [.stdin, .gunzip, .stdout])
        XCTAssertEqual(try PipelineSpec(parsing: "read 'a b.gz' | file \"c d\"").stages, [.read(path: "a b.gz"), .file(path: "c d")])
    }

    func testCanonicalTextRoundTrips() throws {
        for text in ["read 'my file.gz' | gunzip | verify sha256:\(digest) | stdout", "stdin | file out"] {
            let spec = try PipelineSpec(parsing: text)
            XCTAssertEqual(spec.description, text)
            XCTAssertEqual(try PipelineSpec(parsing: spec.description), spec)
        }
    }

    func testSpecFileWithCommentsAndNewlines() throws {
        let text = """
            # fetch the nightly dump
            fetch https://example.org/dump.gz   # the source
              | verify sha256:\(digest)
              | gunzip

              | file dump.sql
            """
        let spec = try PipelineSpec(parsing: text)
        XCTAssertEqual(spec.stages.count, 4)
        XCTAssertEqual(spec.sink, .file(path: "dump.sql"))
    }

    func testErrorsPointAtTheOffendingWord() {
        let cases: [(String, Int, Int, String)] = [
            ("read x | gunzp | stdout", 1, 10, "unknown stage 'gunzp' (did you mean 'gunzip'? stages are: fetch,"),
            ("read x | unzx | stdout", 1, 10, "did you mean 'unxz'?"),
            ("read x | decompres | stdout", 1, 10, "did you mean 'decompress'?"),
            ("read x | bogus | stdout", 1, 10, "unknown stage 'bogus' (stages are:"),
            ("read x | verify sha256:abc | stdout", 1, 17, "64 hex digits"),
            ("read x | verify md5:\(digest) | stdout", 1, 17, "sha256:HEX"),
            ("read x | stdout | gunzip", 1, 10, "must be the last stage"),
            ("read x | read y | stdout", 1, 10, "only one source"),
            ("gunzip | stdout", 1, 1, "starts with a source"),
            ("read x | gunzip", 1, 16, "ends with a sink"),
            ("read | stdout", 1, 1, "needs a file path"),
            ("read x y | stdout", 1, 8, "unexpected 'y'"),
            ("read x | | stdout", 1, 10, "missing"),
            ("", 1, 1, "empty"),
            ("fetch ftp://h/x | stdout", 1, 7, "unsupported URL scheme 'ftp'"),
            ("fetch http:///x | stdout", 1, 7, "no host"),
            ("read 'x | stdout", 1, 6, "unterminated"),
            ("# comment\nread x\n  | gunzip extra\n  | stdout", 3, 12, "takes no argument"),
        ]
        for (text, line, column, words) in cases {
            XCTAssertThrowsError(try PipelineSpec(parsing: text), text) { error in
                guard let e = error as? SpecError else { return XCTFail("\(text): \(error)") }
                XCTAssertEqual(e.line, line, "\(text): \(e)")
                XCTAssertEqual(e.column, column, "\(text): \(e)")
                XCTAssertTrue(e.description.contains(words), "\(text): \(e)")
                XCTAssertTrue(e.description.hasPrefix("spec error at line \(line), column \(column): "), e.description)
            }
        }
    }

    func testComposedStagesAreChecked() {
        XCTAssertNoThrow(try PipelineSpec(stages: [.stdin, .gunzip, .stdout]))
        XCTAssertThrowsError(try PipelineSpec(stages: [.gunzip, .stdout]))
        XCTAssertThrowsError(try PipelineSpec(stages: [.stdin, .stdout, .gunzip]))
        XCTAssertThrowsError(try PipelineSpec(stages: []))
    }
}
