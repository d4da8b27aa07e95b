import Foundation
import XCTest
@testable import SluiceTestSupport

/// Damage inside a block of an `xz -T2` file through the real binary: whichever thread
/// decodes that block (the stage's own, streaming the head, or a worker ahead of it), the
/// run ends — never hangs — with exit 5 and one line naming a byte inside the damaged
/// block, and leaves nothing but its input.
final class XzCorruptBlockCLITests: XCTestCase {
    func testDamageInAnyBlockIsExitFiveAtItsOffset() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data(makeTestData(count: 1_200_000, seed: 71)).write(to: URL(fileURLWithPath: dir + "/plain"))
        XCTAssertEqual(try shell("cd '\(dir)' && xz -T2 -1 --block-size=200000 -c plain > good.xz && rm plain").status, 0)
        let listing = try shell("xz --robot -lvv '\(dir)/good.xz'", capture: true).output
        let starts = listing.split(separator: "\n").filter { $0.hasPrefix("block\t") }.compactMap { UInt64($0.split(separator: "\t")[4]) }
        XCTAssertEqual(starts.count, 6)
        let good = try Data(contentsOf: URL(fileURLWithPath: dir + "/good.xz"))
        let ends = Array(starts.dropFirst()) + [UInt64(good.count)]
        for (n, start) in starts.enumerated() {
            var bad = good
            bad[Int(start) + 40] ^= 0x5A  // inside the LZMA2 data
            try bad.write(to: URL(fileURLWithPath: dir + "/bad.xz"))
            let outcome = try runSluiceBounded(["--checkpoint-interval", "64KiB", "read bad.xz | unxz | file out"], in: dir, timeout: 60)
            XCTAssertEqual(outcome.status, 5, "block \(n + 1): \(outcome.stderr)")
            XCTAssertEqual(outcome.messages.count, 1, "block \(n + 1): \(outcome.stderr)")
            let message = outcome.messages.last ?? ""
            let offset = message.range(of: "corrupt xz data at byte ").flatMap { UInt64(message[$0.upperBound...].prefix { $0.isNumber }) }
            XCTAssertNotNil(offset, "block \(n + 1): \(message)")
            if let offset {
                XCTAssertTrue(offset >= start && offset < ends[n], "block \(n + 1) spans \(start)..<\(ends[n]), the error says \(offset)")
            }
            XCTAssertEqual(try DirectorySnapshot(dir).names.sorted(), ["bad.xz", "good.xz"], "block \(n + 1)")
        }
    }
}
