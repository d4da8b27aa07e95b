import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// unxz's state at any input byte: snapshot → JSON → restore in a fresh decoder → continue
/// gives exactly the output of an uninterrupted run; edited states are refused or harmless.
final class XzResumeTests: XCTestCase {
    private static func encode(_ state: XzState) throws -> Data {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return try encoder.encode(StageState(state))
    }

    private static func decodeState(_ json: Data) throws -> XzState {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try XCTUnwrap(try decoder.decode(StageState.self, from: json).as(XzState.self))
    }

    /// Writes `bytes` in pieces whose sizes `random` picks (often single bytes).
    private static func feed(_ decoder: XzDecoder, _ bytes: ArraySlice<UInt8>, _ random: inout SeededRandom) throws {
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let size: Int
            switch random.next() % 4 {
            case 0: size = 1
            case 1: size = 1 + Int(random.next() % 16)
            default: size = 1 + Int(random.next() % 70_000)
            }
            let end = min(bytes.endIndex, i + size)
            try decoder.write(Array(bytes[i..<end]))
            i = end
        }
    }

    /// Decodes with a cut at `cut`: returns the output of both halves joined.
    private static func decodeAcrossCut(_ xz: [UInt8], cut: Int, decoders: Int = 1, random: inout SeededRandom) throws -> (output: [UInt8], state: XzState) {
        let first = MemorySink()
        let decoder = try XzDecoder(next: first, decoders: decoders)
        try feed(decoder, xz[..<cut], &random)
        let state = try decodeState(try encode(decoder.snapshot()))
        XCTAssertEqual(state, decoder.snapshot())
        XCTAssertEqual(state.inputOffset, UInt64(cut))
        XCTAssertEqual(state.outputOffset, UInt64(first.bytes.count))
        let second = MemorySink()
        let restored = try XzDecoder(next: second, decoders: decoders, restoring: state)
        try feed(restored, xz[cut...], &random)
        try restored.finish()
        return (first.bytes + second.bytes, state)
    }

    func testRandomCutsResumeExactly() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 150_000, seed: 21)
        let inputs = try [
            ("single block", "-6"),
            ("multi-block", "-T2 --block-size=40000 --check=sha256"),
            ("x86 + delta", "--check=crc32 --delta=dist=2 --x86 --lzma2=preset=2"),
            ("arm64", "--arm64 --lzma2=preset=1 --block-size=60000"),
        ].map { ($0.0, try XzTool.compress(plain, options: $0.1, dir: dir)) }
        let empty = try XzTool.compress([], options: "--check=none", dir: dir)
        var random = SeededRandom(seed: 99)
        var cuts = 0
        var phases = Set<String>()
        for (label, xz) in inputs {
            let joined = xz + [0, 0, 0, 0] + empty  // a second stream, after padding
            for _ in 0..<Thoroughness.scaled(55) {
                let cut = Int(random.next() % UInt64(joined.count + 1))
                // Every other cut decodes sized blocks (multi-block) on two threads.
                let (output, state) = try Self.decodeAcrossCut(joined, cut: cut, decoders: 1 + cuts % 2, random: &random)
                XCTAssertTrue(output == plain, "\(label): cut at \(cut) of \(joined.count) in phase \(state.phase)")
                phases.insert(state.phase.rawValue)
                cuts += 1
            }
        }
        XCTAssertGreaterThanOrEqual(cuts, Thoroughness.scaled(200))
        XCTAssertTrue(phases.contains("chunk"), "\(phases)")
    }

    /// Every byte of a small file as a cut, header and trailer fields included.
    func testEveryCutOfASmallFile() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 2_000, seed: 22)
        let xz = try XzTool.compress(plain, options: "--check=sha256 --x86 --lzma2 --block-size=700", dir: dir)
        var random = SeededRandom(seed: 5)
        var phases = Set<String>()
        for cut in 0...xz.count {
            let (output, state) = try Self.decodeAcrossCut(xz, cut: cut, random: &random)
            XCTAssertTrue(output == plain, "cut at \(cut)")
            phases.insert(state.phase.rawValue)
        }
        // blockBody is the parallel path's (below).
        XCTAssertEqual(phases.count, XzState.Phase.allCases.count - 1, "\(phases)")
        // The same with blocks that declare their sizes, on two threads.
        let sized = try XzTool.compress(plain, options: "-T2 --check=crc32 --block-size=700", dir: dir)
        for cut in 0...sized.count {
            let (output, state) = try Self.decodeAcrossCut(sized, cut: cut, decoders: 2, random: &random)
            XCTAssertTrue(output == plain, "sized blocks, cut at \(cut)")
            phases.insert(state.phase.rawValue)
        }
        XCTAssertEqual(phases.count, XzState.Phase.allCases.count, "\(phases)")
    }

    /// A state with any one field edited is refused, or decodes to the right output or a
    /// corrupt-data error — never a crash.
    func testEditedStatesAreRefusedOrHarmless() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 60_000, seed: 23)
        let xz = try XzTool.compress(plain, options: "--check=crc64 --x86 --lzma2=preset=1", dir: dir)
        var random = SeededRandom(seed: 7)
        let outcomes = try XzEditedStates(xz: xz, plain: plain, from: xz.count / 4, span: xz.count / 2)
            .outcomes(rounds: 300, random: &random) { state, round, random in Self.edit(&state, round: round, random: &random) }
        XCTAssertGreaterThan(outcomes["refused", default: 0], 50, "\(outcomes)")
    }

    private static func edit(_ s: inout XzState, round: Int, random: inout SeededRandom) {
        let big = random.next()
        let small = UInt32(truncatingIfNeeded: random.next() % 300)
        switch round % 22 {
        case 0: s.version = Int(small)
        case 1: s.block?.lzma.lc = small % 10
        case 2: s.block?.lzma.pb = small % 10
        case 3: s.block?.lzma.lp = small % 6
        case 4: s.block?.lzma.state = small % 20
        case 5: s.block?.lzma.reps[Int(small % 4)] = UInt32(truncatingIfNeeded: big)
        case 6:
            if var p = s.block?.lzma.probabilities, !p.isEmpty {
                p[Int(big % UInt64(p.count))] = UInt8(truncatingIfNeeded: big >> 20)
                s.block?.lzma.probabilities = p
            }
        case 7: s.block?.lzma.probabilities.removeLast(2)
        case 8:
            let history = s.block?.lzma.history ?? 0
            s.block?.lzma.history = big % 3 == 0 ? big : history &- UInt64(small)
        case 9: if let w = s.block?.lzma.window, !w.isEmpty { s.block?.lzma.window = w.dropFirst(Int(small) + 1) }
        case 10:
            if var w = s.block?.lzma.window, !w.isEmpty {
                w[w.startIndex + Int(big % UInt64(w.count))] ^= 0x55
                s.block?.lzma.window = w
            }
        case 11: s.block?.lzma.needDictionaryReset.toggle()
        case 12: s.pending = Data((0..<Int(small)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        case 13:
            if var h = s.block?.header, h.count > 2 {
                h[Int(big % UInt64(h.count))] ^= 1
                s.block?.header = h
            }
        case 14: s.phase = XzState.Phase.allCases[Int(big % UInt64(XzState.Phase.allCases.count))]
        case 15: s.block?.filters[0].held = Data(repeating: 0xE8, count: Int(small % 10))
        case 16: s.block?.filters[0].x86Mask = UInt32(truncatingIfNeeded: big)
        case 17: s.block?.filters[0].x86Previous = UInt32(truncatingIfNeeded: big)
        case 18: s.block?.check.crc = big
        case 19: s.block?.compressedSize = big
        case 20:
            s.inputOffset = UInt64.max - UInt64(small)
            s.outputOffset = UInt64.max
        default:
            let count = s.block?.lzma.probabilities.count ?? 0
            s.block?.lzma.probabilities = Data(repeating: 0, count: count)
        }
    }
}
