import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice

/// The relay in its three parts: the locked queue, the producer's batching, and the
/// whole relay with a real consumer thread. Every wait is bounded, so a bug that would
/// hang shows up as a failure instead.
final class RelayTests: XCTestCase {
    private static let guardTimeout: TimeInterval = 30

    // MARK: RelayQueue

    func testQueueLendsEachBufferOnceAndTakesItBack() throws {
        let queue = RelayQueue(bufferCount: 3)
        let lent = try (0..<3).map { _ in try queue.acquire() }
        XCTAssertEqual(Set(lent), [0, 1, 2])
        queue.release(lent[1])
        XCTAssertEqual(try queue.acquire(), lent[1])
    }

    func testQueueHandsItemsOverInOrder() {
        let queue = RelayQueue(bufferCount: 2)
        let cut = Self.cut()
        queue.send(.data(buffer: 1, count: 10))
        queue.send(.barrier(cut))
        queue.send(.data(buffer: 0, count: 7))
        queue.send(.finish)
        XCTAssertEqual(Self.describe(queue.take().item), "data 1:10")
        let barrier = queue.take().item
        guard case .barrier(let taken) = barrier else { return XCTFail("expected the barrier, got \(barrier)") }
        XCTAssertTrue(taken === cut)
        XCTAssertEqual(Self.describe(queue.take().item), "data 0:7")
        XCTAssertEqual(Self.describe(queue.take().item), "finish")
    }

    func testQueueFailureReachesTheProducerAndTheConsumer() throws {
        let queue = RelayQueue(bufferCount: 1)
        _ = try queue.acquire()
        queue.send(.data(buffer: 0, count: 1))
        queue.record(SluiceError.io(path: "x", operation: "write to", errno: EIO))
        queue.record(SluiceError.cancelled)  // only the first failure counts
        XCTAssertThrowsError(try queue.throwIfFailed()) { XCTAssertEqual($0 as? SluiceError, .io(path: "x", operation: "write to", errno: EIO)) }
        XCTAssertThrowsError(try queue.acquire()) { XCTAssertEqual($0 as? SluiceError, .io(path: "x", operation: "write to", errno: EIO)) }
        XCTAssertTrue(queue.take().failed, "the consumer learns that items after a failure are only to be dropped")
    }

    func testQueueFailureWakesAProducerWaitingForABuffer() throws {
        let queue = RelayQueue(bufferCount: 1)
        _ = try queue.acquire()
        let woke = expectation(description: "the waiting producer gives up")
        Thread.detachNewThread {
            if (try? queue.acquire()) == nil { woke.fulfill() }
        }
        queue.record(SluiceError.cancelled)
        wait(for: [woke], timeout: Self.guardTimeout)
    }

    func testStopQueuesOneStopAndWaitsForTheConsumer() {
        let queue = RelayQueue(bufferCount: 1)
        let taken = LockedList<String>()
        Thread.detachNewThread {
            while true {
                let item = queue.take().item
                taken.append(Self.describe(item))
                if case .stop = item { break }
            }
            queue.consumerExited()
        }
        queue.send(.data(buffer: 0, count: 3))
        let stopped = expectation(description: "stopConsumer returns")
        Thread.detachNewThread {
            queue.stopConsumer()
            queue.stopConsumer()  // a second close finds the consumer gone and returns
            stopped.fulfill()
        }
        wait(for: [stopped], timeout: Self.guardTimeout)
        XCTAssertEqual(taken.items, ["data 0:3", "stop"])
    }

    func testFinishWaitsForTheConsumerAndThrowsItsFailure() {
        let queue = RelayQueue(bufferCount: 1)
        Thread.detachNewThread {
            _ = queue.take()
            queue.record(SluiceError.checksumMismatch(expected: "a", actual: "b"))
            queue.consumerExited()
        }
        queue.send(.finish)
        XCTAssertThrowsError(try queue.waitForConsumer()) {
            XCTAssertEqual($0 as? SluiceError, .checksumMismatch(expected: "a", actual: "b"))
        }
    }

    // MARK: RelayBatcher

    func testSmallWritesAreGatheredIntoOneBuffer() throws {
        let (batcher, queue, buffers) = Self.batcher(bufferSize: 64)
        defer { buffers.forEach { $0.deallocate() } }
        try batcher.write(bytes: "abc")
        try batcher.write(bytes: "def")
        batcher.flush()
        queue.send(.finish)
        let item = queue.take().item
        guard case .data(let index, let count) = item else { return XCTFail("expected data, got \(item)") }
        XCTAssertEqual(Array(buffers[index][0..<count]), Array("abcdef".utf8))
        XCTAssertEqual(Self.describe(queue.take().item), "finish", "one buffer for both writes")
    }

    func testAFullBufferGoesOutAtOnceAndTheRestFollows() throws {
        let (batcher, queue, buffers) = Self.batcher(bufferSize: 4)
        defer { buffers.forEach { $0.deallocate() } }
        try batcher.write(bytes: "0123456")
        guard case .data(let first, let count) = queue.take().item else { return XCTFail("a full buffer was not sent") }
        XCTAssertEqual(Array(buffers[first][0..<count]), Array("0123".utf8))
        batcher.flush()
        guard case .data(let second, let rest) = queue.take().item else { return XCTFail("the rest was not sent") }
        XCTAssertEqual(Array(buffers[second][0..<rest]), Array("456".utf8))
    }

    func testAPartlyFilledBufferGoesOutOnceItIsStale() throws {
        let clock = LockedValue<UInt64>(1_000)
        let (batcher, queue, buffers) = Self.batcher(bufferSize: 64, now: { clock.value })
        defer { buffers.forEach { $0.deallocate() } }
        try batcher.write(bytes: "a")
        clock.value += RelayBatcher.maxDelay - 1
        try batcher.write(bytes: "b")
        queue.send(.finish)
        XCTAssertEqual(Self.describe(queue.take().item), "finish", "sent before maxDelay passed")

        let (late, lateQueue, lateBuffers) = Self.batcher(bufferSize: 64, now: { clock.value })
        defer { lateBuffers.forEach { $0.deallocate() } }
        try late.write(bytes: "a")
        clock.value += RelayBatcher.maxDelay
        try late.write(bytes: "b")
        guard case .data(let index, let count) = lateQueue.take().item else { return XCTFail("a stale buffer was kept") }
        XCTAssertEqual(Array(lateBuffers[index][0..<count]), Array("ab".utf8))
    }

    func testBorrowedRoomIsCommittedAndTooLittleRoomSendsTheBufferFirst() throws {
        let size = RelayBatcher.minimumRoom * 2
        let (batcher, queue, buffers) = Self.batcher(bufferSize: size)
        defer { buffers.forEach { $0.deallocate() } }
        let room = try batcher.borrow()
        XCTAssertEqual(room.count, size)
        room.storeBytes(of: 0x5A, toByteOffset: 0, as: UInt8.self)
        batcher.commit(size - RelayBatcher.minimumRoom + 1)
        // Less than minimumRoom is left: the next borrow sends this buffer and lends a fresh one.
        let fresh = try batcher.borrow()
        XCTAssertEqual(fresh.count, size)
        batcher.commit(0)
        guard case .data(let index, let count) = queue.take().item else { return XCTFail("the nearly full buffer was not sent") }
        XCTAssertEqual(count, size - RelayBatcher.minimumRoom + 1)
        XCTAssertEqual(buffers[index][0], 0x5A)
    }

    func testFlushingAnEmptyBufferReturnsItToThePool() throws {
        let (batcher, queue, buffers) = Self.batcher(bufferSize: 64, count: 1)
        defer { buffers.forEach { $0.deallocate() } }
        _ = try batcher.borrow()
        batcher.commit(0)
        batcher.flush()
        XCTAssertEqual(try queue.acquire(), 0, "the only buffer is free again")
    }

    // MARK: Relay

    func testBytesAndBarriersArriveInOrderAndFinishReachesTheSink() throws {
        let sink = RecordingSink()
        let control = Self.control()
        let relay = try Relay(next: sink, control: control, name: "test", bufferCount: 2, bufferSize: 8)
        var expected: [String] = []
        for round in 0..<20 {
            let chunk = [UInt8](repeating: UInt8(round), count: round % 13)
            try relay.write(chunk)
            expected.append(contentsOf: chunk.map { "\($0)" })
            if round % 4 == 3 {
                try relay.barrier(Self.cut())
                expected.append("|")
            }
        }
        try relay.finish()
        expected.append("end")
        XCTAssertEqual(sink.log, expected)
    }

    /// Writes through a relay into `sink` until it fails: what the producer caught, and the run's control.
    private func failureDownstream(of sink: RecordingSink) throws -> (thrown: Error?, control: RunControl) {
        let control = Self.control()
        let relay = try Relay(next: sink, control: control, name: "test", bufferCount: 2, bufferSize: 4)
        defer { relay.close() }
        do {
            for _ in 0..<1_000 { try relay.write([1, 2, 3, 4]) }
            try relay.finish()
        } catch {
            return (error, control)
        }
        return (nil, control)
    }

    func testAFailureDownstreamStopsTheRunAndReachesTheProducer() throws {
        let (thrown, control) = try failureDownstream(
            of: RecordingSink(failAfter: 3, with: .io(path: "out", operation: "write to", errno: ENOSPC)))
        XCTAssertEqual(thrown as? SluiceError, .io(path: "out", operation: "write to", errno: ENOSPC))
        XCTAssertTrue(control.isStopped)
        XCTAssertEqual(control.failure, .io(path: "out", operation: "write to", errno: ENOSPC))
    }

    /// A stage that throws something other than a SluiceError mid-stream (a bug) was
    /// recorded as `.cancelled`, so the run ended as if the user had interrupted it (exit 130).
    /// It is an unexpected failure (exit 1) that names what was thrown.
    func testAFailureThatIsNotASluiceErrorIsUnexpectedNotAnInterruption() throws {
        struct StageBug: Error, CustomStringConvertible {
            var description: String { "the stage's own bug" }
        }
        let (thrown, control) = try failureDownstream(of: RecordingSink(failAfter: 3, throwing: StageBug()))
        XCTAssertNotNil(thrown, "the producer never learned of the failure")
        XCTAssertTrue(control.isStopped)
        XCTAssertEqual(control.failure, .unexpected("the stage's own bug"))
        XCTAssertEqual(control.failure?.exitCode, 1)
    }

    /// A producer waits for a buffer while the consumer is stuck in a write that only a
    /// stop ends (as stdout's is when its reader stopped reading): cancelling the run
    /// releases both, and close() returns.
    func testCancellingTheRunReleasesAProducerBlockedBehindAStuckConsumer() throws {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let control = Self.control()
        let sink = StuckSink(fd: fds[0], control: control)
        let relay = try Relay(next: sink, control: control, name: "test", bufferCount: 2, bufferSize: 4)
        let producerDone = expectation(description: "the producer is released")
        let outcome = LockedValue<Error?>(nil)
        Thread.detachNewThread {
            do {
                // More than the two buffers hold: the producer ends up waiting for one.
                for _ in 0..<100 { try relay.write([1, 2, 3, 4]) }
                try relay.finish()
            } catch {
                outcome.value = error
            }
            producerDone.fulfill()
        }
        XCTAssertTrue(sink.entered.wait(timeout: .now() + Self.guardTimeout) == .success, "the consumer never wrote")
        control.cancel()
        wait(for: [producerDone], timeout: Self.guardTimeout)
        XCTAssertEqual(outcome.value as? SluiceError, .cancelled)
        relay.close()
    }

    /// Bytes handed over as they are go out in order with the rest, and are given back
    /// once written.
    func testHandedOverBytesArriveInOrderAndAreGivenBack() throws {
        let sink = RecordingSink()
        let relay = try Relay(next: sink, control: Self.control(), name: "test", bufferCount: 2, bufferSize: 8)
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 3, alignment: 8)
        defer { block.deallocate() }
        block.copyBytes(from: [7, 8, 9])
        let given = LockedValue(0)
        try relay.write([1, 2])
        try relay.write(handingOver: UnsafeRawBufferPointer(block)) { given.value += 1 }
        try relay.write([3])
        try relay.barrier(Self.cut())
        try relay.finish()
        XCTAssertEqual(sink.log, ["1", "2", "7", "8", "9", "3", "|", "end"])
        XCTAssertEqual(given.value, 1)
    }

    /// A lender that asks goes back to its buffer piece by piece: each part is released only
    /// once written (unxz's worker decodes its next block into it right behind), and the
    /// whole given back after the last.
    func testHandedOverBytesAreReleasedAsTheyAreWritten() throws {
        let events = LockedValue<[String]>([])
        let sink = EventSink(events)
        let relay = try Relay(next: sink, control: Self.control(), name: "test", bufferCount: 2, bufferSize: 8)
        let piece = Relay.handOverPiece
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 2 * piece + piece / 2, alignment: 8)
        defer { block.deallocate() }
        for i in 0..<block.count { block[i] = UInt8(truncatingIfNeeded: i &* 7) }
        try relay.write(handingOver: UnsafeRawBufferPointer(block), released: { n in events.value.append("released \(n)") }) {
            events.value.append("done")
        }
        try relay.finish()
        XCTAssertEqual(
            events.value,
            [
                "wrote \(piece)", "released \(piece)", "wrote \(2 * piece)", "released \(2 * piece)", "wrote \(block.count)",
                "released \(block.count)", "done",
            ])
        XCTAssertTrue(sink.received.elementsEqual(block))
    }

    /// After a failure downstream handed-over bytes are given back too, whether the
    /// consumer drops them or the producer's call throws.
    func testHandedOverBytesAreGivenBackAfterAFailure() throws {
        let sink = RecordingSink(failAfter: 0, with: .io(path: "out", operation: "write to", errno: ENOSPC))
        let relay = try Relay(next: sink, control: Self.control(), name: "test", bufferCount: 2, bufferSize: 8)
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 3, alignment: 8)
        defer { block.deallocate() }
        let given = LockedValue(0)
        try relay.write([1])
        try relay.write(handingOver: UnsafeRawBufferPointer(block)) { given.value += 1 }
        XCTAssertThrowsError(try relay.finish())
        XCTAssertEqual(given.value, 1, "dropped by the consumer")
        XCTAssertThrowsError(try relay.write(handingOver: UnsafeRawBufferPointer(block)) { given.value += 1 })
        XCTAssertEqual(given.value, 2, "refused at once")
        relay.close()
        // Never taken by a consumer: given back when the queue is dropped.
        let queue = RelayQueue(bufferCount: 1)
        queue.send(.handedOver(UnsafeRawBufferPointer(block), { given.value += 1 }))
        queue.dropHandedOver()
        XCTAssertEqual(given.value, 3)
    }

    func testAThreadThatCannotStartIsAnErrorNotAHang() {
        let refuse: EngineThread.Starter = { name, _ throws(SluiceError) in
            throw .io(path: "thread " + name, operation: "start", errno: EAGAIN)
        }
        XCTAssertThrowsError(try Relay(next: RecordingSink(), control: Self.control(), name: "gunzip", startThread: refuse)) { error in
            XCTAssertEqual(error as? SluiceError, .io(path: "thread sluice.gunzip", operation: "start", errno: EAGAIN))
            XCTAssertEqual((error as? SluiceError)?.exitCode, 6)
        }
    }

    // MARK: helpers

    private static func control() -> RunControl {
        RunControl(progress: ProgressReporter(handler: nil))
    }

    private static func cut() -> Cut {
        Cut(source: SourceState(kind: "read", location: "x"), onSeal: { _ in })
    }

    private static func batcher(bufferSize: Int, count: Int = 4, now: @escaping () -> UInt64 = { 0 })
        -> (RelayBatcher, RelayQueue, [UnsafeMutableRawBufferPointer])
    {
        let buffers = (0..<count).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 8) }
        let queue = RelayQueue(bufferCount: count)
        return (RelayBatcher(buffers: buffers, queue: queue, now: now), queue, buffers)
    }

    private static func describe(_ item: RelayQueue.Item) -> String {
        switch item {
        case .data(let buffer, let count): return "data \(buffer):\(count)"
        case .handedOver(let bytes, _, _): return "handed over \(bytes.count)"
        case .barrier: return "barrier"
        case .advance(let count, _): return "advance \(count)"
        case .finish: return "finish"
        case .stop: return "stop"
        }
    }
}

extension RelayBatcher {
    fileprivate func write(bytes text: String) throws {
        try Array(text.utf8).withUnsafeBytes { try write($0) }
    }
}

/// Logs every byte ("7"), barrier ("|") and the end ("end"); can fail its n-th write.
private final class RecordingSink: ByteSink, @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [String] = []
    private var writes = 0
    private let failAfter: Int?
    private let failure: any Error

    init(failAfter: Int? = nil, with failure: SluiceError = .cancelled) {
        self.failAfter = failAfter
        self.failure = failure
    }

    init(failAfter: Int, throwing failure: any Error) {
        self.failAfter = failAfter
        self.failure = failure
    }

    var log: [String] { lock.withLock { entries } }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        try lock.withLock {
            writes += 1
            if let failAfter, writes > failAfter { throw failure }
            entries.append(contentsOf: bytes.map { "\($0)" })
        }
    }

    func barrier(_ cut: Cut) throws { lock.withLock { entries.append("|") } }
    func finish() throws { lock.withLock { entries.append("end") } }
}

/// Logs how far its writes have come, in one log with the lender's events.
private final class EventSink: ByteSink, @unchecked Sendable {
    private let events: LockedValue<[String]>
    private(set) var received: [UInt8] = []  // the consumer thread's, read after finish
    init(_ events: LockedValue<[String]>) { self.events = events }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        received.append(contentsOf: bytes)
        events.value.append("wrote \(received.count)")
    }

    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}

/// A sink whose write waits for input on a pipe nobody writes to — as stdout's write
/// waits for a reader that stopped reading — until the run stops.
private final class StuckSink: ByteSink, @unchecked Sendable {
    let entered = DispatchSemaphore(value: 0)
    private let fd: Int32
    private let control: RunControl

    init(fd: Int32, control: RunControl) {
        self.fd = fd
        self.control = control
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        entered.signal()
        try POSIX.waitReady(fd, for: Int32(POLLIN), control: control)
    }

    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}

final class LockedValue<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

final class LockedList<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [T] = []
    func append(_ item: T) { lock.withLock { stored.append(item) } }
    var items: [T] { lock.withLock { stored } }
}
