import XCTest
@testable import Sluice

/// ReorderWindow: bytes leave in order whatever order they arrive in, and nothing beyond
/// `base + capacity` is ever admitted.
final class ReorderWindowTests: XCTestCase {
    private struct Stop: Error {}

    /// Each row: the window's capacity and base, then pieces (offset, length) put in that
    /// order; everything stored at the in-order point is then delivered.
    func testTable() throws {
        let rows: [(name: String, capacity: Int, base: UInt64, puts: [(UInt64, Int)], delivered: UInt64)] = [
            ("in order", 100, 0, [(0, 10), (10, 20), (30, 5)], 35),
            ("out of order", 100, 0, [(30, 10), (10, 20), (0, 10)], 40),
            ("a gap holds back what follows", 100, 0, [(0, 10), (20, 10)], 10),
            ("from a resume offset", 50, 1_000, [(1_020, 30), (1_000, 20)], 1_050),
            ("wraps around the ring", 16, 0, [(0, 12), (12, 4)], 16),
            ("nothing at the in-order point", 100, 0, [(5, 10)], 0),
        ]
        for row in rows {
            let window = ReorderWindow(capacity: row.capacity, base: row.base)
            var expected = [UInt8](repeating: 0, count: Int(row.delivered - row.base))
            for (offset, length) in row.puts {
                let bytes = (0..<length).map { UInt8(truncatingIfNeeded: Int(offset) + $0) }
                try bytes.withUnsafeBytes { try window.put($0, at: offset) { nil } }
                for (i, byte) in bytes.enumerated() where offset + UInt64(i) < row.delivered {
                    expected[Int(offset - row.base) + i] = byte
                }
            }
            var out: [UInt8] = []
            while window.inOrderOffset < row.delivered {
                try window.deliver(limit: 7, stopped: { Stop() }) { out.append(contentsOf: $0) }
            }
            XCTAssertEqual(out, expected, row.name)
            XCTAssertEqual(window.inOrderOffset, row.delivered, row.name)
            // Nothing more at the in-order point: a deliver waits, so a stopped one throws.
            if window.storedBytes == 0 || row.name.contains("gap") || row.name.contains("nothing") {
                XCTAssertThrowsError(try window.deliver(limit: 7, stopped: { Stop() }) { _ in }, row.name)
            }
        }
    }

    func testBytesBeyondTheWindowWaitAndTheHeadIsAlwaysAdmitted() throws {
        let window = ReorderWindow(capacity: 64, base: 0)
        let chunk = [UInt8](repeating: 7, count: 32)
        try chunk.withUnsafeBytes { try window.put($0, at: 32) { nil } }
        // 64..<96 lies beyond base + capacity: put waits, and a stopped wait throws.
        XCTAssertThrowsError(try chunk.withUnsafeBytes { try window.put($0, at: 64) { Stop() } })
        XCTAssertEqual(window.storedBytes, 32)
        // The in-order point's bytes fit.
        try chunk.withUnsafeBytes { try window.put($0, at: 0) { Stop() } }
        try window.deliver(limit: 40, stopped: { Stop() }) { XCTAssertEqual($0.count, 40) }
        // Delivering moved the window on: 64..<96 fits now.
        try chunk.withUnsafeBytes { try window.put($0, at: 64) { Stop() } }
        XCTAssertLessThanOrEqual(window.storedBytes, 64)
    }

    func testAdvanceSkipsBytesDeliveredElsewhere() throws {
        let window = ReorderWindow(capacity: 10, base: 0)
        XCTAssertThrowsError(try [UInt8](repeating: 1, count: 5).withUnsafeBytes { try window.put($0, at: 100) { Stop() } })
        window.advance(to: 100)
        try [UInt8](repeating: 1, count: 5).withUnsafeBytes { try window.put($0, at: 100) { Stop() } }
        window.advance(to: 50)  // never backwards
        XCTAssertEqual(window.inOrderOffset, 100)
        try window.deliver(limit: 100, stopped: { Stop() }) { XCTAssertEqual(Array($0), [1, 1, 1, 1, 1]) }
    }

    func testFailureReachesWaitersAndLaterCalls() {
        struct Boom: Error {}
        let window = ReorderWindow(capacity: 10, base: 0)
        let waiting = expectation(description: "a waiting deliver ends")
        let thread = Thread {
            do {
                try window.deliver(limit: 10, stopped: { nil }) { _ in }
            } catch is Boom {
                waiting.fulfill()
            } catch {}
        }
        thread.start()
        window.fail(Boom())
        wait(for: [waiting], timeout: 10)
        XCTAssertThrowsError(try [UInt8](repeating: 0, count: 1).withUnsafeBytes { try window.put($0, at: 0) { nil } }) {
            XCTAssertTrue($0 is Boom)
        }
    }

    /// Several producers, many small pieces in random order, a capacity much smaller than
    /// the stream: the bytes come out whole and in order.
    func testConcurrentProducersDeliverInOrder() throws {
        let total = 200_000
        let data = (0..<total).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ ($0 >> 9)) }
        let window = ReorderWindow(capacity: 4_096, base: 0)
        let producers = 4
        let group = DispatchGroup()
        for producer in 0..<producers {
            group.enter()
            let thread = Thread {
                // Producer p owns every piece i with i % producers == p, as segments of 1000 bytes.
                var start = producer * 1_000
                while start < total {
                    let end = min(start + 1_000, total)
                    var at = start
                    while at < end {
                        let n = min(end - at, 1 + (at % 333))
                        try? data[at..<(at + n)].withUnsafeBytes { try window.put($0, at: UInt64(at)) { nil } }
                        at += n
                    }
                    start += producers * 1_000
                }
                group.leave()
            }
            thread.start()
        }
        var out: [UInt8] = []
        out.reserveCapacity(total)
        while window.inOrderOffset < UInt64(total) {
            try window.deliver(limit: 1_500, stopped: { nil }) { out.append(contentsOf: $0) }
        }
        group.wait()
        XCTAssertEqual(out, data)
    }
}
