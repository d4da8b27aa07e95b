import XCTest
@testable import Sluice

/// `decompress memlimit=` bounds whichever codec the input turns out to be, each with its own default.
final class DecompressHelpTests: XCTestCase {
    func testDecompressMemlimitHelpNamesBothCodecsAndTheirDefaults() throws {
        let option = try XCTUnwrap(StageKind.decompress.options.first { $0.name == "memlimit" })
        // It said "largest zstd window accepted (default 128MiB)", while an xz input's limit is 256MiB.
        XCTAssertTrue(option.summary.contains("zstd") && option.summary.contains("128MiB"), option.summary)
        XCTAssertTrue(option.summary.contains("xz") && option.summary.contains("256MiB"), option.summary)
    }
}
