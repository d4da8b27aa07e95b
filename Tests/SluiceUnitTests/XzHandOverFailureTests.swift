import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Blocks lent to a relay (`HandOverSink`) whose sink fails while writing one of them,
/// picked at random: every lent buffer comes back (a worker waiting for one would hang the
/// decode, the stage's thread waiting for that worker), the sink got a prefix of the
/// output, and no worker is left running.
final class XzHandOverFailureTests: XCTestCase {
    func testLentBlocksComeBackWhereverTheSinkFails() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 600_000, seed: 91)
        var random = SeededRandom(seed: 92)
        let full = SluiceError.io(path: "out", operation: "write to", errno: ENOSPC)
        for layout in [
            "-0 --block-size=60000", "-0 --block-list=100,300,90000,200,600,70000,100,50000,1,2,700,100000",
            "--x86 --lzma2=preset=0 --block-size=40000", "-0 --block-size=600",
        ] {
            let xz = try XzParallelTests.multiBlock(plain, layout, dir: dir)
            for round in 0..<8 {
                let sink = FailingSink(failAtBlock: round == 0 ? nil : Int.random(in: 1...4, using: &random), larger: 4096, with: full)
                let relay = try Relay(
                    next: sink, control: RunControl(progress: ProgressReporter(handler: nil)), name: "test", bufferCount: 2, bufferSize: 4096)
                let decoder = try XzDecoder(next: relay, decoders: Int.random(in: 2...3, using: &random))
                let chunk = [7, 4096, 65536, 1 << 20][Int.random(in: 0..<4, using: &random)]
                let label = "\(layout), round \(round), \(chunk)-byte writes"
                do {
                    try write(xz, to: decoder, chunk: chunk)
                    try decoder.finish()
                    XCTAssertTrue(sink.bytes == plain, label)
                } catch {
                    XCTAssertEqual(error as? SluiceError, full, label)
                    relay.close()
                    XCTAssertTrue(plain.starts(with: sink.bytes), label)
                }
                XCTAssertEqual(decoder.workersRunning, 0, label)
            }
        }
    }
}

/// Blocks larger than the relay's pieces (`Relay.handOverPiece`): a worker decodes its next
/// block into the buffer the relay is still writing out, behind the relay's position. The
/// output must be exactly xz's, with the sink's writes large or small, on two to four decoders.
final class XzHandOverTrailingTests: XCTestCase {
    func testAWorkerDecodingBehindTheRelayWritesTheRightBytes() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 5 * Relay.handOverPiece + 12345, seed: 93)
        var random = SeededRandom(seed: 94)
        for layout in ["-0 --block-size=2200000 --check=sha256", "--delta=dist=2 --lzma2=preset=0 --block-size=1100000"] {
            let xz = try XzParallelTests.multiBlock(plain, layout, dir: dir)
            for round in 0..<2 {
                let sink = BytesSink()
                let relay = try Relay(
                    next: sink, control: RunControl(progress: ProgressReporter(handler: nil)), name: "test", bufferCount: 2,
                    bufferSize: [4096, 256 * 1024][round % 2])
                let decoder = try XzDecoder(next: relay, decoders: 2 + round)
                try write(xz, to: decoder, chunk: [4096, 65536, 1 << 20][Int.random(in: 0..<3, using: &random)])
                try decoder.finish()
                XCTAssertGreaterThan(decoder.blocksHandedOver, 0, layout)
                XCTAssertTrue(sink.bytes == plain, "\(layout), round \(round)")
                XCTAssertEqual(decoder.workersRunning, 0, layout)
            }
        }
    }
}

extension XzHandOverTrailingTests {
    /// Damage found while a worker decodes behind the relay (in its own block, or later in
    /// the input, which stops the pool): the run fails at the damage, the sink got a prefix
    /// of the output, and no worker is left (one stopped behind the relay lets go of the
    /// buffer, which the relay's give-back unmaps).
    func testDamageWhileAWorkerDecodesBehindTheRelayStopsCleanly() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 3 * Relay.handOverPiece + 999, seed: 95)
        let xz = try XzParallelTests.multiBlock(plain, "-0 --block-size=1100000", dir: dir)
        var random = SeededRandom(seed: 96)
        for round in 0..<4 {
            var damaged = xz
            let at = Int.random(in: (xz.count / 3)..<(xz.count - 40), using: &random)
            if round % 2 == 0 { damaged[at] ^= 0x55 } else { damaged.removeLast(xz.count - at) }
            let sink = BytesSink()
            let relay = try Relay(
                next: sink, control: RunControl(progress: ProgressReporter(handler: nil)), name: "test", bufferCount: 2, bufferSize: 4096)
            let decoder = try XzDecoder(next: relay, decoders: 2)
            do {
                try write(damaged, to: decoder, chunk: 65536)
                try decoder.finish()
                XCTFail("round \(round): damage at \(at) went unnoticed")
            } catch {
                guard case .corruptData? = error as? SluiceError else { return XCTFail("round \(round): \(error)") }
                relay.close()
                XCTAssertTrue(plain.starts(with: sink.bytes), "round \(round)")
            }
            XCTAssertEqual(decoder.workersRunning, 0, "round \(round)")
        }
    }
}

/// Keeps everything it is given (on the relay's thread; read after `finish`).
private final class BytesSink: ByteSink, @unchecked Sendable {
    private(set) var bytes: [UInt8] = []
    func write(_ buffer: UnsafeRawBufferPointer) throws { bytes.append(contentsOf: buffer) }
    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}

/// Keeps what it is given until its write number `failAtBlock` of more than `larger` bytes
/// (a lent block: the relay's own buffers hold `larger`), which throws.
private final class FailingSink: ByteSink, @unchecked Sendable {
    private let lock = NSLock()
    private var received: [UInt8] = []
    private var blocks = 0
    private let failAtBlock: Int?
    private let larger: Int
    private let failure: SluiceError

    init(failAtBlock: Int?, larger: Int, with failure: SluiceError) {
        self.failAtBlock = failAtBlock
        self.larger = larger
        self.failure = failure
    }

    var bytes: [UInt8] { lock.withLock { received } }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        try lock.withLock {
            if bytes.count > larger { blocks += 1 }
            if let failAtBlock, blocks >= failAtBlock { throw failure }
            received.append(contentsOf: bytes)
        }
    }

    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}
