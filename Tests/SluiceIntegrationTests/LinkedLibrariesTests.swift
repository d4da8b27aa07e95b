import Foundation
import XCTest

@testable import SluiceTestSupport

/// What every run loads before its stages is kept small (docs/ARCHITECTURE.md, "What a run
/// costs before its stages"): the binary links FoundationEssentials, not the full Foundation
/// with ICU (6.5 MiB of RSS), and opens libcurl only when a stage fetches (5.5 MiB). One
/// `import Foundation` in Sources/ brings the former back; this test names it.
final class LinkedLibrariesTests: XCTestCase {
    func testNeitherFullFoundationNorLibcurlIsLinked() throws {
        let ldd = Process()
        ldd.executableURL = URL(fileURLWithPath: "/usr/bin/ldd")
        ldd.arguments = [SluiceBinary.path]
        let output = Pipe()
        ldd.standardOutput = output
        try ldd.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        ldd.waitUntilExit()
        XCTAssertEqual(ldd.terminationStatus, 0, text)
        XCTAssertTrue(text.contains("libFoundationEssentials.so"), "ldd output not as expected:\n\(text)")
        for library in ["libFoundation.so", "libFoundationInternationalization.so", "lib_FoundationICU.so", "libcurl"] {
            XCTAssertFalse(text.contains(library), "\(library) is linked again:\n\(text)")
        }
    }
}
