import XCTest
@testable import Sluice

/// SegmentPlanner by table: what each `take`, `claim`, `giveBack` and `finish` leaves behind.
final class SegmentPlannerTests: XCTestCase {
    private enum Step {
        case take(expect: (UInt64, UInt64)?)
        case takeWithin(windowEnd: UInt64, expect: (UInt64, UInt64)?)
        case claim(id: Int, count: UInt64, expect: UInt64)
        case finish(Int)
        case giveBack(Int)
        case end(id: Int, expect: UInt64?)
        case exhausted(Bool)
    }

    private struct Case {
        let name: String
        let start: UInt64
        let end: UInt64
        let size: UInt64
        let split: UInt64
        let steps: [Step]
    }

    func testTable() {
        let cases: [Case] = [
            Case(
                name: "cut in order, last one short", start: 0, end: 250, size: 100, split: 10,
                steps: [
                    .take(expect: (0, 100)), .take(expect: (100, 200)), .take(expect: (200, 250)),
                    .exhausted(true),
                ]),
            Case(
                name: "starts at a resume offset", start: 1_000, end: 1_150, size: 100, split: 10,
                steps: [
                    .take(expect: (1_000, 1_100)), .take(expect: (1_100, 1_150)),
                ]),
            Case(
                name: "nothing left: the straggler's upper half", start: 0, end: 200, size: 100, split: 10,
                steps: [
                    .take(expect: (0, 100)), .take(expect: (100, 200)),
                    .claim(id: 0, count: 90, expect: 90), .finish(0),
                    .claim(id: 1, count: 20, expect: 20),
                    .take(expect: (160, 200)), .end(id: 1, expect: 160),
                    // The old connection now stops at 160.
                    .claim(id: 1, count: 100, expect: 40), .end(id: 2, expect: 200),
                ]),
            Case(
                name: "no split below twice the minimum", start: 0, end: 100, size: 100, split: 30,
                steps: [
                    .take(expect: (0, 100)), .claim(id: 0, count: 45, expect: 45), .take(expect: nil),
                ]),
            Case(
                name: "the straggler with most left is split", start: 0, end: 300, size: 100, split: 10,
                steps: [
                    .take(expect: (0, 100)), .take(expect: (100, 200)), .take(expect: (200, 300)),
                    .claim(id: 0, count: 80, expect: 80), .claim(id: 1, count: 10, expect: 10),
                    .claim(id: 2, count: 50, expect: 50),
                    .take(expect: (155, 200)),
                ]),
            Case(
                name: "a full window: the head of the line is split", start: 0, end: 1_000, size: 100, split: 10,
                steps: [
                    .takeWithin(windowEnd: 300, expect: (0, 100)), .takeWithin(windowEnd: 300, expect: (100, 200)),
                    .takeWithin(windowEnd: 300, expect: (200, 300)),
                    .claim(id: 0, count: 20, expect: 20), .claim(id: 1, count: 100, expect: 100), .finish(1),
                    // 300..<400 would not fit: the head (claimed 20 of 0..<100) gives up 60..<100.
                    .takeWithin(windowEnd: 320, expect: (60, 100)), .end(id: 0, expect: 60),
                    // Still no room: the head (20..<60) splits again, down to twice the minimum.
                    .takeWithin(windowEnd: 320, expect: (40, 60)), .takeWithin(windowEnd: 320, expect: (30, 40)),
                    .takeWithin(windowEnd: 320, expect: (300, 400)),
                    // Room again: segments are cut as usual.
                    .takeWithin(windowEnd: 1_000, expect: (400, 500)),
                ]),
            Case(
                name: "given back: handed out first, lowest first", start: 0, end: 500, size: 100, split: 10,
                steps: [
                    .take(expect: (0, 100)), .take(expect: (100, 200)), .take(expect: (200, 300)),
                    .claim(id: 2, count: 30, expect: 30), .giveBack(2),
                    .claim(id: 1, count: 0, expect: 0), .giveBack(1),
                    .exhausted(false),
                    .take(expect: (100, 200)), .take(expect: (230, 300)), .take(expect: (300, 400)),
                ]),
            Case(
                name: "a given-back range longer than a segment is cut again", start: 0, end: 1_000, size: 100,
                split: 10,
                steps: [
                    .take(expect: (0, 100)), .giveBack(0), .take(expect: (0, 100)), .take(expect: (100, 200)),
                ]),
            Case(
                name: "claims stop at the end; unknown ids claim nothing", start: 0, end: 10, size: 100, split: 1,
                steps: [
                    .take(expect: (0, 10)), .claim(id: 0, count: 25, expect: 10), .claim(id: 7, count: 5, expect: 0),
                    .take(expect: nil), .finish(0), .end(id: 0, expect: nil),
                ]),
            Case(
                name: "sizes near the top of UInt64 do not overflow", start: UInt64.max - 10, end: UInt64.max,
                size: UInt64.max, split: UInt64.max,
                steps: [
                    .take(expect: (UInt64.max - 10, UInt64.max)), .take(expect: nil),
                ]),
        ]
        for item in cases {
            guard
                var planner = SegmentPlanner(
                    start: item.start, end: item.end, segmentSize: item.size,
                    minimumSplit: item.split)
            else {
                XCTFail("\(item.name): no planner")
                continue
            }
            for (index, step) in item.steps.enumerated() {
                let label = "\(item.name), step \(index)"
                switch step {
                case .take(let expect):
                    let segment = planner.take()
                    XCTAssertEqual(segment.map { [$0.start, $0.end] }, expect.map { [$0.0, $0.1] }, label)
                case .takeWithin(let windowEnd, let expect):
                    let segment = planner.take(windowEnd: windowEnd)
                    XCTAssertEqual(segment.map { [$0.start, $0.end] }, expect.map { [$0.0, $0.1] }, label)
                case .claim(let id, let count, let expect):
                    XCTAssertEqual(planner.claim(id, count: count), expect, label)
                case .finish(let id):
                    planner.finish(id)
                case .giveBack(let id):
                    planner.giveBack(id)
                case .end(let id, let expect):
                    XCTAssertEqual(planner.end(of: id), expect, label)
                case .exhausted(let expect):
                    XCTAssertEqual(planner.isExhausted, expect, label)
                }
            }
        }
    }

    func testNoPlanForEmptyRangesOrZeroSizes() {
        XCTAssertNil(SegmentPlanner(start: 5, end: 5, segmentSize: 1, minimumSplit: 1))
        XCTAssertNil(SegmentPlanner(start: 6, end: 5, segmentSize: 1, minimumSplit: 1))
        XCTAssertNil(SegmentPlanner(start: 0, end: 5, segmentSize: 0, minimumSplit: 1))
        XCTAssertNil(SegmentPlanner(start: 0, end: 5, segmentSize: 1, minimumSplit: 0))
    }

    /// Whatever the order of takes, claims and splits, every byte is claimed exactly once.
    func testEveryByteClaimedOnce() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            let end = UInt64.random(in: 1...5_000, using: &generator)
            guard
                var planner = SegmentPlanner(
                    start: 0, end: end, segmentSize: .random(in: 1...700, using: &generator),
                    minimumSplit: .random(in: 1...50, using: &generator))
            else {
                return XCTFail("no planner")
            }
            var owned = [Int](repeating: 0, count: Int(end))
            var open: [SegmentPlanner.Segment] = []
            var positions: [Int: UInt64] = [:]
            while true {
                if open.count < 4, let segment = planner.take() {
                    open.append(segment)
                    positions[segment.id] = segment.start
                    continue
                }
                guard !open.isEmpty else { break }
                let index = Int.random(in: 0..<open.count, using: &generator)
                let id = open[index].id
                let got = planner.claim(id, count: .random(in: 0...120, using: &generator))
                let at = positions[id]!
                for byte in at..<(at + got) { owned[Int(byte)] += 1 }
                positions[id] = at + got
                if planner.end(of: id) == at + got {
                    planner.finish(id)
                    open.remove(at: index)
                } else if Int.random(in: 0..<20, using: &generator) == 0 {
                    planner.giveBack(id)
                    open.remove(at: index)
                }
            }
            XCTAssertTrue(planner.isExhausted)
            XCTAssertEqual(owned.filter { $0 != 1 }.count, 0, "bytes claimed other than once")
        }
    }
}
