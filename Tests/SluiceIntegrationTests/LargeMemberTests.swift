import Foundation
import XCTest
@testable import SluiceTestSupport
import Sluice

/// gunzip through the real binary on a member too large for a 32-bit ISIZE.
final class LargeMemberTests: XCTestCase {
    /// A member larger than 4 GiB, produced as a stream at test time: ISIZE is the length
    /// mod 2^32, and the output must still be exact (checked by SHA-256 of the input).
    func testMemberOver4GiB() throws {
        try requireSlowTests()
        let dir = try makeTemporaryDirectory(self)
        let count: UInt64 = 4_500_000_000
        let make = "yes 'sluice streams bytes; 0123456789 abcdefghijklmnopqrstuvwxyz' | head -c \(count)"
        let digest = try shell("\(make) | openssl dgst -sha256 -r | cut -d' ' -f1", capture: true)
            .output.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(digest.count, 64)
        XCTAssertEqual(try shell("\(make) | gzip -1 > '\(dir)/big.gz'").status, 0)
        for engine in InflateEngineKind.allCases {
            // stdout to /dev/null: the point is the decoder, not 4.5 GB of disk writes.
            let run = try shell(
                "'\(SluiceBinary.path)' -q --engine \(engine.rawValue) 'read \(dir)/big.gz | gunzip | verify sha256:\(digest) | stdout' > /dev/null")
            XCTAssertEqual(run.status, 0, "\(engine): the > 4 GiB member did not decode to the expected digest")
        }
    }
}
