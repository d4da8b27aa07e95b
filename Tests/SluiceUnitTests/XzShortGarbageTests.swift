import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Fewer than twelve bytes after a stream (or as the whole input) that are not the start of
/// a stream header are garbage, said as such: not "the input ends inside a stream header".
final class XzShortGarbageTests: XCTestCase {
    private func reason(_ xz: [UInt8]) -> (offset: UInt64, reason: String)? {
        do {
            _ = try XzDecoderTests.decode(xz)
        } catch SluiceError.corruptData(format: "xz", let offset, let reason) {
            return (offset, reason)
        } catch {
            XCTFail("not a corrupt-data error: \(error)")
        }
        return nil
    }

    func testShortGarbageAfterAStreamIsNamedGarbage() throws {
        let dir = try makeTemporaryDirectory(self)
        let xz = try XzTool.compress(XzDecoderTests.plain(1_000, seed: 41), options: "--check=crc32", dir: dir)
        for tail: [UInt8] in [Array("junk".utf8), [0x28, 0xb5, 0x2f], [0x1f, 0x8b], [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x01]] {
            let got = reason(xz + tail)
            XCTAssertEqual(got?.reason, "garbage after the end of an xz stream", "tail \(tail)")
            XCTAssertEqual(got?.offset, UInt64(xz.count), "tail \(tail)")
        }
    }

    func testShortNonXzInputIsNotXzData() {
        for input: [UInt8] in [Array("x".utf8), Array("hello".utf8), [0xfd, 0x00]] {
            XCTAssertEqual(reason(input)?.reason, "not xz data (no xz magic bytes)", "input \(input)")
        }
    }

    /// A real header's beginning, cut short, is still a stream cut short.
    func testAHeaderCutShortIsStillTruncation() throws {
        let dir = try makeTemporaryDirectory(self)
        let xz = try XzTool.compress(XzDecoderTests.plain(1_000, seed: 42), options: "", dir: dir)
        for count in [1, 5, 6, 11] {
            XCTAssertEqual(
                reason(xz + xz.prefix(count))?.reason, "unexpected end of data: the input ends inside a stream header", "\(count) bytes")
            XCTAssertEqual(reason(Array(xz.prefix(count)))?.reason, "unexpected end of data: the input ends inside a stream header")
        }
    }
}
