import XCTest

@testable import Sluice

/// `replacingAll` stands in for Foundation's `replacingOccurrences` in messages and the
/// completion scripts: literal, left to right, non-overlapping.
final class TextReplacingTests: XCTestCase {
    func testReplacesEveryOccurrenceLeftToRight() {
        XCTAssertEqual("a|b||c".replacingAll("|", with: " "), "a b  c")
        XCTAssertEqual("aaa".replacingAll("aa", with: "X"), "Xa")
        XCTAssertEqual("line\r\nnext\r\n".replacingAll("\r\n", with: "\n"), "line\nnext\n")
        XCTAssertEqual("café ☕ café".replacingAll("é", with: "e"), "cafe ☕ cafe")
        XCTAssertEqual("no match".replacingAll("xyz", with: "-"), "no match")
        XCTAssertEqual("".replacingAll("a", with: "b"), "")
        XCTAssertEqual("abc".replacingAll("", with: "b"), "abc")
        XCTAssertEqual("it's".replacingAll("'", with: "'\\''"), "it'\\''s")
    }

    func testAHugeWordIsReplacedWhole() {
        let word = String(repeating: "a", count: 1 << 20)
        let message = "unknown stage '\(word)' here"
        XCTAssertEqual(message.replacingAll(word, with: "a…"), "unknown stage 'a…' here")
    }
}
