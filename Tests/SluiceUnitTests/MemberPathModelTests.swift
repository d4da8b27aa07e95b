import XCTest

@testable import Sluice

/// `MemberPath` keeps one normalised byte array with slices for its leaf and parent: checked
/// against a plain model (split on `/`, drop empty parts, strip, drop `.`, pop on `..`) over
/// many generated names, so a slice off by one or a `..` that pops too much cannot hide.
final class MemberPathModelTests: XCTestCase {
    private static let pieces: [[UInt8]] = [
        [], Array(".".utf8), Array("..".utf8), Array("a".utf8), Array("bc".utf8), Array("...".utf8),
        Array(".a".utf8), Array("a.".utf8), [0xc3, 0xa9], [0xe9], Array("x y".utf8),
    ]

    /// nil: refused; .some(nil): dropped by strip; else the components.
    private func model(_ raw: [UInt8], strip: Int) -> [[UInt8]]?? {
        if raw.isEmpty || raw.first == UInt8(ascii: "/") { return nil }
        let parts = raw.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map(Array.init)
        if strip > 0 && parts.count <= strip { return .some(nil) }
        var out: [[UInt8]] = []
        for part in parts.dropFirst(strip) {
            if part == Array(".".utf8) { continue }
            if part == Array("..".utf8) {
                if out.isEmpty { return nil }
                out.removeLast()
                continue
            }
            out.append(part)
        }
        return .some(out)
    }

    func testNamesAgreeWithAPlainModel() throws {
        var rng = SystemRandomNumberGenerator()
        var seen = 0
        for _ in 0..<20_000 {
            var raw: [UInt8] = []
            for i in 0..<Int.random(in: 1...7, using: &rng) {
                if i > 0 || Bool.random(using: &rng) == false {
                    raw += Array(repeating: UInt8(ascii: "/"), count: i > 0 ? Int.random(in: 1...2, using: &rng) : 0)
                }
                raw += Self.pieces.randomElement(using: &rng)!
            }
            if Bool.random(using: &rng) { raw.append(UInt8(ascii: "/")) }
            let strip = Int.random(in: 0...3, using: &rng)
            let expected = model(raw, strip: strip)
            let got: MemberPath??
            do { got = .some(try MemberPath.member(raw, strip: strip)) } catch { got = nil }
            let shown = TarName.display(raw) + " strip=\(strip)"
            switch (expected, got) {
            case (nil, nil), (.some(nil), .some(nil)):
                continue
            case (.some(.some(let parts)), .some(.some(let path))):
                seen += 1
                XCTAssertEqual(path.components, parts, shown)
                XCTAssertEqual(path.depth, parts.count, shown)
                XCTAssertEqual(path.joined, MemberPath(components: parts).joined, shown)
                XCTAssertEqual(path.leaf.map(Array.init), parts.last, shown)
                XCTAssertEqual(Array(path.parent), MemberPath(components: Array(parts.dropLast())).joined, shown)
                XCTAssertEqual(MemberPath.restored(path.joined), path.isEmpty ? MemberPath(components: []) : path, shown)
            default:
                XCTFail("\(shown): model \(String(describing: expected)), MemberPath \(String(describing: got))")
                return
            }
        }
        XCTAssertGreaterThan(seen, 100)
    }
}
