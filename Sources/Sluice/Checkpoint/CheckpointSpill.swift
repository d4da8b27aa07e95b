import CLinux
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Where one cut's large blobs (decoders' windows) wait between the cut and the store: an
/// unnamed file (`O_TMPFILE`) in the checkpoint's directory. The kernel's page cache holds
/// them there, not the process, so a window is not held once in its decoder's ring and
/// again for every cut in flight. The file never has a name: nothing can be planted at it,
/// nothing is followed, and a kill leaves nothing behind. Its descriptor closes, and its
/// space is freed, when the last blob in it goes (the cut stored, or replaced by a newer one).
///
/// The stages of a cut append to it in turn as the barrier passes them; the checkpoint
/// writer reads it back (`SpilledBytes`). Where the filesystem cannot make unnamed files,
/// blobs stay in memory, as they did before.
final class CheckpointSpill: @unchecked Sendable {
    /// Blobs under this size stay in memory: a unit's pending bytes and the LZMA
    /// probabilities are not worth a system call.
    static let threshold = 1 << 20

    /// The checkpoint this spill is for: errors name it.
    let checkpointPath: String
    private let openFile: () throws(SluiceError) -> Int32?
    // Guards the fields below: stages append on their threads in turn, the writer reads.
    private let lock = ThreadCondition()
    private var fd: Int32 = -1
    private var opened = false
    private var length: UInt64 = 0
    private var firstFailure: SluiceError?
    /// Ranges already copied into a checkpoint and given back to the filesystem: they read
    /// as zeros now, so reading them again is refused rather than stored.
    private var freed: [Range<UInt64>] = []

    /// A spill beside the checkpoint at `checkpointPath`; the file is made at the first blob.
    convenience init(beside checkpointPath: String) {
        self.init(checkpointPath: checkpointPath) { () throws(SluiceError) in
            try Self.openUnnamed(beside: checkpointPath)
        }
    }

    /// `openFile` makes the file (a test may hand in `/dev/full`); nil: keep blobs in memory.
    init(checkpointPath: String, openFile: @escaping () throws(SluiceError) -> Int32?) {
        self.checkpointPath = checkpointPath
        self.openFile = openFile
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// The first failure to write a blob, which makes the cut unusable: the stage throws it
    /// at the barrier, and the writer never stores such a cut.
    var failure: SluiceError? {
        lock.lock()
        defer { lock.unlock() }
        return firstFailure
    }

    func check() throws(SluiceError) {
        if let failure { throw failure }
    }

    /// Appends `pieces` as one blob; nil when the bytes should stay in memory (this
    /// filesystem has no unnamed files, or an earlier write failed: see `failure`).
    func append(_ pieces: [UnsafeRawBufferPointer]) -> SpilledBytes? {
        lock.lock()
        defer { lock.unlock() }
        guard firstFailure == nil else { return nil }
        do throws(SluiceError) {
            if !opened {
                opened = true
                fd = try openFile() ?? -1
            }
            guard fd >= 0, Self.leavesRoom(fd, after: pieces.reduce(0) { $0 + UInt64($1.count) }) else { return nil }
            let start = length
            for piece in pieces {
                try POSIX.writeAll(fd, piece, at: length, path: checkpointPath, operation: Self.writeOperation)
                length += UInt64(piece.count)
            }
            return SpilledBytes(file: self, offset: start, count: Int(length - start))
        } catch {
            firstFailure = error
            return nil
        }
    }

    /// Reads `count` bytes at `offset` into `buffer` (which holds at least `count`).
    fileprivate func read(_ buffer: UnsafeMutableRawPointer, count: Int, at offset: UInt64) throws(SluiceError) {
        let fd = try descriptor(for: offset..<(offset + UInt64(count)))
        var done = 0
        while done < count {
            let n = pread(fd, buffer + done, count - done, off_t(offset) + off_t(done))
            if n > 0 {
                done += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                throw SluiceError.io(path: checkpointPath, operation: "read back the state spilled beside", errno: n == 0 ? EIO : errno)
            }
        }
    }

    /// The descriptor, to read `range` from: refused once part of it was freed.
    fileprivate func descriptor(for range: Range<UInt64>) throws(SluiceError) -> Int32 {
        lock.lock()
        defer { lock.unlock() }
        guard !freed.contains(where: { $0.overlaps(range) }) else {
            throw SluiceError.io(path: checkpointPath, operation: "read again the state already stored from", errno: EIO)
        }
        return fd
    }

    /// Gives back the blocks of `range`, copied into the checkpoint being stored: while
    /// it is, the checkpoint's disk holds the old checkpoint, the new one and only what is
    /// left of the spill — about two windows, as when the cut was in memory, not three.
    /// Where the filesystem cannot free a range the space comes back with the file.
    fileprivate func free(_ range: Range<UInt64>) {
        guard !range.isEmpty else { return }
        lock.lock()
        if let last = freed.last, last.upperBound == range.lowerBound {
            freed[freed.count - 1] = last.lowerBound..<range.upperBound
        } else {
            freed.append(range)
        }
        let fd = self.fd
        lock.unlock()
        _ = sluice_punch_hole(fd, Int64(range.lowerBound), Int64(range.count))
    }

    /// Whether the disk keeps room for one more blob this size after it: the checkpoint
    /// being stored needs that much while the spills of newer cuts wait. A spill that
    /// took it would fail a store that fits without spills; such a blob stays in memory.
    private static func leavesRoom(_ fd: Int32, after count: UInt64) -> Bool {
        var facts = statvfs()
        guard fstatvfs(fd, &facts) == 0 else { return true }
        let (free, overflow) = UInt64(facts.f_bavail).multipliedReportingOverflow(by: UInt64(facts.f_frsize))
        return overflow || free / 2 >= count
    }

    /// The unnamed file in the checkpoint's directory (mode 0600, never linkable:
    /// `O_EXCL`); nil when the filesystem cannot make one.
    static func openUnnamed(beside checkpointPath: String) throws(SluiceError) -> Int32? {
        let fd = open(POSIX.parentDirectory(of: checkpointPath), SLUICE_O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0o600)
        if fd >= 0 { return fd }
        let code = errno
        // EISDIR: a kernel without O_TMPFILE; EOPNOTSUPP: a filesystem without it.
        if code == EOPNOTSUPP || code == EISDIR { return nil }
        throw failed(checkpointPath, errno: code)
    }

    private static let writeOperation = "write the next checkpoint's state beside"

    private static func failed(_ checkpointPath: String, errno code: Int32) -> SluiceError {
        .io(path: checkpointPath, operation: writeOperation, errno: code)
    }
}

/// A blob's bytes in a `CheckpointSpill`.
struct SpilledBytes: Sendable {
    let file: CheckpointSpill
    let offset: UInt64
    let count: Int

    /// How much is read back at a time: the MAC and the fallback copy read through a
    /// buffer this size, never the whole blob (nor a mapping of it: mapped pages count as
    /// the process's memory too).
    static let chunk = 1 << 20

    /// Passes the bytes to `body` in chunks, in order.
    func forEachChunk(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.chunk, alignment: 16)
        defer { buffer.deallocate() }
        var done = 0
        while done < count {
            let n = min(Self.chunk, count - done)
            try file.read(buffer, count: n, at: offset + UInt64(done))
            try body(UnsafeRawBufferPointer(start: buffer, count: n))
            done += n
        }
    }

    /// The bytes, in memory (tests, comparisons).
    func loaded() throws -> Data {
        var data = Data(capacity: count)
        try forEachChunk { data.append(contentsOf: $0) }
        return data
    }

    /// How much is copied before its blocks in the spill are freed.
    static let freedPiece = 8 << 20

    /// Appends the bytes to `out` at its file position, in the kernel (`copy_file_range`)
    /// where it can, else chunk by chunk (`inKernel` false: tests of that path). Each piece
    /// copied is freed in the spill: the bytes are stored once (the writer stores a cut
    /// once; the MAC was read before), and cannot be read again.
    func copy(to out: Int32, path: String, inKernel: Bool = true) throws {
        let fd = try file.descriptor(for: offset..<(offset + UInt64(count)))
        var from = Int64(offset)
        var remaining = count
        while remaining > 0 && inKernel {
            let n = sluice_copy_file_range(fd, &from, out, min(remaining, Self.freedPiece))
            if n > 0 {
                remaining -= n
                file.free(UInt64(from - Int64(n))..<UInt64(from))
                continue
            }
            if n < 0 && errno == EINTR { continue }
            // Another filesystem, or a kernel without it: copy by hand. 0 means the spill
            // ended early, which the read below reports.
            let code = n == 0 ? EXDEV : errno
            guard [EXDEV, EINVAL, ENOSYS, EOPNOTSUPP].contains(code) else {
                throw SluiceError.io(path: path, operation: "write to", errno: code)
            }
            break
        }
        guard remaining > 0 else { return }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.chunk, alignment: 16)
        defer { buffer.deallocate() }
        var at = UInt64(from)
        while remaining > 0 {
            let n = min(Self.chunk, remaining)
            try file.read(buffer, count: n, at: at)
            try POSIX.writeAll(out, UnsafeRawBufferPointer(start: buffer, count: n), path: path)
            file.free(at..<(at + UInt64(n)))
            at += UInt64(n)
            remaining -= n
        }
    }
}
