import CCurl
import XCTest
@testable import Sluice

/// A file:// body longer than the size libcurl reported (a file that grew while read, or one
/// in /proc whose size is 0) is refused with a message about the file: the one about a
/// server that "sent more bytes than its response announced" named a server of "" and
/// read "failed:  sent more bytes…".
final class FileURLOverrunTests: XCTestCase {
    func testAFileLongerThanItsSizeIsNamedAsAFile() throws {
        let url = try XCTUnwrap(FetchURL("file:///proc/cpuinfo"))
        let facts = PerformFacts(
            code: CURLE_OK, message: "", verdict: .deliver(skip: 0, seen: FetchValidators(totalLength: 0), end: 0),
            trip: .overran, requested: 0, offset: 0, knownTotal: 0)
        let next = AttemptJudge.next(after: facts, url: url, limits: TransferLimits(stallTimeout: 30))
        guard case .fail(.malformed(.protocolViolation(let server, let reason))) = next else {
            return XCTFail("\(next)")
        }
        XCTAssertEqual(server, "/proc/cpuinfo")
        XCTAssertTrue(reason.hasPrefix("/proc/cpuinfo is longer than the 0 bytes its size said"), reason)
        XCTAssertTrue(reason.contains("'read PATH'"), reason)
    }
}
