import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice

/// A thread that cannot start (`ulimit -u`, no memory for a stack) is an error with exit
/// status 6, never a wait for a thread that never ran. `EngineThread.refuseStarts` stands
/// in for the system refusing; SignalTests does the same with a real `ulimit -u 1`.
final class EngineThreadTests: XCTestCase {
    private static let guardTimeout: TimeInterval = 30

    override func tearDown() {
        EngineThread.refuseStarts(after: nil)
        super.tearDown()
    }

    func testAStartedThreadRuns() throws {
        let ran = expectation(description: "the body runs")
        try EngineThread.start("sluice.test") { ran.fulfill() }
        wait(for: [ran], timeout: Self.guardTimeout)
    }

    func testARefusedStartThrowsAndNeverRunsTheBody() {
        EngineThread.refuseStarts(after: 0)
        let ran = LockedValue(false)
        XCTAssertThrowsError(try EngineThread.start("sluice.test") { ran.value = true }) {
            XCTAssertEqual($0 as? SluiceError, .io(path: "thread sluice.test", operation: "start", errno: EAGAIN))
        }
        XCTAssertFalse(ran.value)
    }

    /// The whole pipeline, with the thread starts refused one after another: each run
    /// ends with exit status 6 and returns, instead of waiting for a thread that never ran.
    func testAPipelineWhoseThreadsCannotStartFailsWithExit6() throws {
        let dir = NSTemporaryDirectory() + "sluice-relay-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let input = dir + "/in"
        XCTAssertTrue(FileManager.default.createFile(atPath: input, contents: Data(repeating: 7, count: 100_000)))
        // Three threads: the checkpoint writer, the sink's relay, gunzip's relay; refuse each in turn.
        for started in 0..<3 {
            let pipeline = try Pipeline("read \(input) | gunzip | file \(dir)/out")
            let done = expectation(description: "run \(started) returns")
            let outcome = LockedValue<Error?>(nil)
            Thread.detachNewThread {
                EngineThread.refuseStarts(after: started)
                do { try pipeline.run() } catch { outcome.value = error }
                done.fulfill()
            }
            wait(for: [done], timeout: Self.guardTimeout)
            EngineThread.refuseStarts(after: nil)
            guard let error = outcome.value as? SluiceError, case .io(let path, "start", EAGAIN) = error else {
                XCTFail("run with \(started) threads allowed: \(String(describing: outcome.value))")
                continue
            }
            XCTAssertTrue(path.hasPrefix("thread sluice."), path)
            XCTAssertEqual(error.exitCode, 6)
        }
    }

    func testAnAsyncRunWhoseThreadCannotStartThrowsInsteadOfWaiting() async throws {
        let pipeline = try Pipeline("read /dev/null | stdout")
        EngineThread.refuseStarts(after: 0)
        do {
            try await pipeline.run()
            XCTFail("the run succeeded without a thread")
        } catch {
            XCTAssertEqual(error, .io(path: "thread sluice.run", operation: "start", errno: EAGAIN))
        }
    }
}
