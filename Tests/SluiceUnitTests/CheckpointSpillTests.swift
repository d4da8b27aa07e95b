import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A cut's windows wait for the store in an unnamed file beside the checkpoint
/// (`CheckpointSpill`) instead of in memory: the stored file must be exactly the one the
/// in-memory path writes, a spill that cannot be written must fail the cut with a typed
/// error, and a cut that goes must take its descriptor with it.
final class CheckpointSpillTests: XCTestCase {
    /// unxz (`xz -6`: an 8 MiB dictionary) and unzstd (`zstd -19`: 8 MiB window), each with
    /// over 1 MiB of window at the cut, so both windows spill. Made once: compressing
    /// takes a few seconds.
    private static let inputs: Result<(xz: [UInt8], zst: [UInt8]), any Error> = Result {
        let dir = NSTemporaryDirectory() + "/sluice-spill-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plain = makeTestData(count: 3_000_000, seed: 77)
        return (try XzTool.compress(plain, options: "-6", dir: dir), try zstdCompress(plain, "-19", in: dir))
    }

    /// Decoders fed two thirds of their input: windows of about 2 MB.
    private func decoders() throws -> [(decoder: ByteSink, spec: String)] {
        let (xz, zst) = try Self.inputs.get()
        let xzDecoder = try XzDecoder(next: MemorySink())
        try xzDecoder.write(Array(xz[..<(xz.count * 2 / 3)]))
        let zstdDecoder = try ZstdDecoder(next: MemorySink())
        try zstdDecoder.write(Array(zst[..<(zst.count * 2 / 3)]))
        let decompressor = try Decompressor(next: MemorySink())
        try decompressor.write(Array(zst[..<(zst.count / 2)]))
        return [
            (xzDecoder, "read x | unxz | stdout"), (zstdDecoder, "read x | unzstd | stdout"),
            (decompressor, "read x | decompress | stdout"),
        ]
    }

    private func spilledCount(_ checkpoint: Checkpoint) throws -> Int {
        let collector = CheckpointBlobCollector()
        let encoder = JSONEncoder()
        encoder.userInfo[.checkpointBlobs] = collector
        _ = try encoder.encode(checkpoint)
        return collector.blobs.filter { if case .spilled = $0 { return true } else { return false } }.count
    }

    func testASpilledCutIsStoredByteForByteAsTheInMemoryOne() throws {
        let dir = try makeTemporaryDirectory(self)
        for (decoder, spec) in try decoders() {
            var inMemory = try takeCut(decoder, offset: 0, spec: spec)
            var spilled = try takeCut(decoder, offset: 0, spec: spec, spill: CheckpointSpill(beside: dir + "/c"))
            XCTAssertEqual(try spilledCount(inMemory), 0)
            XCTAssertEqual(try spilledCount(spilled), 1, "\(spec): the window spilled, the small blobs did not")
            let fixed = Date(timeIntervalSince1970: 1_700_000_000)
            inMemory.writtenAt = fixed
            spilled.writtenAt = fixed
            let store = CheckpointStore(path: dir + "/memory", keyDirectory: dir + "/state")
            let other = CheckpointStore(path: dir + "/spilled", keyDirectory: dir + "/state")
            let size = try store.save(inMemory)
            let key = try XCTUnwrap(try CheckpointKey.existing(in: dir + "/state"))
            // Before the store, which frees the spill as it copies it.
            let sealedTwice = try spilled.encoded(key: key)
            XCTAssertEqual(spilled.stages, inMemory.stages, "a spilled blob compares by its bytes")
            let spilledSize = try other.save(spilled)
            XCTAssertEqual(spilledSize.bytes, size.bytes, "the same appendix")
            XCTAssertEqual(size.spilledBytes, 0)
            XCTAssertGreaterThanOrEqual(spilledSize.spilledBytes, 1 << 20, "the window, which the pacing prices as spilled")
            XCTAssertLessThanOrEqual(spilledSize.spilledBytes, spilledSize.bytes)
            XCTAssertGreaterThan(size.bytes, 1 << 20)
            let stored = try XCTUnwrap(FileManager.default.contents(atPath: dir + "/spilled"))
            XCTAssertEqual(stored, FileManager.default.contents(atPath: dir + "/memory"), spec)
            XCTAssertEqual(stored, sealedTwice, "sealing again reads the spill again")
            XCTAssertEqual(try other.load()?.stages, inMemory.stages, "it reads back as the state taken")
        }
    }

    /// Without unnamed files (`openFile` gives nil) the blobs stay in memory, as before.
    func testWithoutUnnamedFilesTheWindowStaysInMemory() throws {
        let (decoder, spec) = try decoders()[1]
        let spill = CheckpointSpill(checkpointPath: "/nowhere/c") { () throws(SluiceError) in nil }
        let checkpoint = try takeCut(decoder, offset: 0, spec: spec, spill: spill)
        XCTAssertEqual(try spilledCount(checkpoint), 0)
        XCTAssertNil(spill.failure)
        XCTAssertEqual(checkpoint.stages, try takeCut(decoder, offset: 0, spec: spec).stages)
    }

    /// `/dev/full` fails every write with ENOSPC, as a full disk does: the barrier throws the
    /// typed error naming the checkpoint, the cut never reaches the sink, and the writer
    /// would not store it.
    func testASpillOnAFullDiskFailsTheCutWithTheTypedError() throws {
        for (decoder, spec) in try decoders() {
            let spill = CheckpointSpill(checkpointPath: "/dir/c") { () throws(SluiceError) in
                let fd = open("/dev/full", O_WRONLY | O_CLOEXEC)
                guard fd >= 0 else { throw .io(path: "/dev/full", operation: "open", errno: errno) }
                return fd
            }
            XCTAssertThrowsError(try takeCut(decoder, offset: 0, spec: spec, spill: spill), spec) { error in
                guard case .io(let path, _, let code)? = error as? SluiceError else { return XCTFail("\(error)") }
                XCTAssertEqual(path, "/dir/c")
                XCTAssertEqual(code, ENOSPC)
                XCTAssertEqual((error as? SluiceError)?.exitCode, 6)
            }
            XCTAssertThrowsError(try spill.check())
        }
    }

    /// A directory the spill cannot be made in is a typed error too, never a trap.
    func testASpillThatCannotBeMadeIsATypedError() throws {
        let (decoder, spec) = try decoders()[0]
        let dir = try makeTemporaryDirectory(self)
        XCTAssertThrowsError(
            try takeCut(decoder, offset: 0, spec: spec, spill: CheckpointSpill(beside: dir + "/missing/c"))
        ) { error in
            guard case .io(let path, _, let code)? = error as? SluiceError else { return XCTFail("\(error)") }
            XCTAssertEqual(path, dir + "/missing/c")
            XCTAssertEqual(code, ENOENT)
        }
    }

    private func openDescriptors() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
    }

    /// Each cut's spill is one descriptor, held while the cut is, closed when the cut goes
    /// — stored, or replaced by a newer one in the writer.
    func testCutsThatGoCloseTheirSpillFiles() throws {
        let dir = try makeTemporaryDirectory(self)
        let (decoder, spec) = try decoders()[1]
        let before = try openDescriptors()
        var held: [Checkpoint] = []
        for _ in 0..<5 { held.append(try takeCut(decoder, offset: 0, spec: spec, spill: CheckpointSpill(beside: dir + "/c"))) }
        XCTAssertEqual(try openDescriptors(), before + 5, "one unnamed file per cut")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [], "none of them has a name")
        held.removeAll()
        XCTAssertEqual(try openDescriptors(), before)

        // Through the writer: cuts submitted back to back replace each other; all of them
        // are closed once it is done.
        let control = RunControl(progress: ProgressReporter(handler: nil))
        let writer = try CheckpointWriter(
            store: CheckpointStore(path: dir + "/c", keyDirectory: dir + "/state"), spec: spec, control: control)
        for _ in 0..<8 {
            let box = CutBox()
            let source = SourceState(kind: "read", location: "x", offset: 0)
            try decoder.barrier(Cut(source: source, spill: CheckpointSpill(beside: dir + "/c"), onSeal: { box.cut = $0 }))
            writer.submit(try XCTUnwrap(box.cut))
            box.cut = nil
        }
        try writer.flush()
        writer.stop()
        XCTAssertEqual(try openDescriptors(), before)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir).sorted(), ["c", "state"])
    }

    /// The copy into the checkpoint without `copy_file_range` (another filesystem, an old
    /// kernel) writes the same bytes.
    func testTheCopyByHandWritesTheSameBytes() throws {
        let dir = try makeTemporaryDirectory(self)
        let bytes = makeTestData(count: 3 << 20 | 12345, seed: 5)
        for inKernel in [true, false] {
            // A spill is copied once: the copy frees it.
            let spill = CheckpointSpill(beside: dir + "/c")
            let spilled = try XCTUnwrap(bytes.withUnsafeBytes { spill.append([$0]) })
            let path = dir + "/copy-\(inKernel)"
            let fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            XCTAssertGreaterThanOrEqual(fd, 0)
            try Data("head".utf8).withUnsafeBytes { try POSIX.writeAll(fd, $0, path: path) }
            try spilled.copy(to: fd, path: path, inKernel: inKernel)
            close(fd)
            XCTAssertEqual(FileManager.default.contents(atPath: path), Data("head".utf8) + Data(bytes), "in kernel: \(inKernel)")
        }
    }

    /// The store copies a spilled blob into the checkpoint and frees it in the spill as it
    /// goes, so the checkpoint's disk holds about two windows while a cut is stored (the
    /// old checkpoint and the new one), as with cuts in memory, not three: with a 20 MiB
    /// disk and 8 MiB windows most runs stopped with exit 6. A freed blob is never read
    /// again (it would read as zeros and be stored as such).
    func testACopiedBlobIsFreedInTheSpillAndNotReadAgain() throws {
        let dir = try makeTemporaryDirectory(self)
        // Two blobs back to back, not block aligned: freeing the first keeps the second.
        let first = makeTestData(count: 20 << 20 | 4321, seed: 8)
        let second = makeTestData(count: 2 << 20 | 77, seed: 9)
        for inKernel in [true, false] {
            let spill = CheckpointSpill(beside: dir + "/c")
            let a = try XCTUnwrap(first.withUnsafeBytes { spill.append([$0]) })
            let b = try XCTUnwrap(second.withUnsafeBytes { spill.append([$0]) })
            let fd = try XCTUnwrap(unnamedDescriptor(in: dir))
            var before = stat()
            XCTAssertEqual(fstat(fd, &before), 0)
            let path = dir + "/copy-\(inKernel)"
            let out = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            XCTAssertGreaterThanOrEqual(out, 0)
            try a.copy(to: out, path: path, inKernel: inKernel)
            close(out)
            var after = stat()
            XCTAssertEqual(fstat(fd, &after), 0)
            XCTAssertLessThan(Int(after.st_blocks) * 512, (3 << 20) + 8192, "in kernel: \(inKernel): the copied blob's blocks are freed")
            XCTAssertGreaterThan(Int(before.st_blocks) * 512, 22 << 20)
            XCTAssertEqual(FileManager.default.contents(atPath: path), Data(first), "in kernel: \(inKernel)")
            XCTAssertEqual(try b.loaded(), Data(second), "the next blob is whole")
            XCTAssertThrowsError(try a.loaded(), "a freed blob is not read again")
            let again = open(path + ".again", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            defer { close(again) }
            XCTAssertThrowsError(try a.copy(to: again, path: path, inKernel: inKernel))
        }
    }

    /// The open unnamed file (a spill) in `dir`: the newest if several.
    private func unnamedDescriptor(in dir: String) throws -> Int32? {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap { Int32($0) }.sorted().last { fd in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)") else { return false }
            return target.hasPrefix(dir + "/") && target.hasSuffix("(deleted)")
        }
    }
}
