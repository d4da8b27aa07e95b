#if canImport(Glibc)
import Glibc
#endif

/// How much of a file sink's output is durable at a cut.
public struct FileSinkState: StageStateValue {
    public static let stage = "file"
    public var path: String
    public var bytesWritten: UInt64
    /// CRC-64 of those bytes: a resume reads the partial file back and compares.
    public var crc64: UInt64 = 0

    public var position: StagePosition { StagePosition(input: bytesWritten, output: bytesWritten) }

    public func resumeProblem() -> String? {
        let partial = FileSink.partialPath(for: path)
        var st = stat()
        guard stat(partial, &st) == 0 else { return "\(partial) is missing (\(Counted.bytes(bytesWritten)) recorded)" }
        guard st.st_size >= 0, UInt64(st.st_size) >= bytesWritten else {
            return "\(partial) is shorter than the \(Counted.bytes(bytesWritten)) recorded"
        }
        return nil
    }
}

/// `file PATH`: writes beside `PATH` under a temporary name, makes it durable before
/// every checkpoint, and renames it to `PATH` only when the whole stream succeeded,
/// so `PATH` never holds output that failed verification.
public final class FileSink: TerminalSink, AheadWritingSink {
    public let path: String
    public let partialPath: String
    private var fd: Int32
    private var bytesWritten: UInt64
    private var checksum: OutputChecksum
    /// Up to where writeback has been started (see `startWriteback`).
    private var writebackStarted: UInt64
    private static let writebackStep: UInt64 = 8 << 20

    /// The temporary name beside `path` that holds output until it is complete.
    public static func partialPath(for path: String) -> String { path + ".sluice-part" }

    /// Opens the partial file: empty for a fresh run, cut back to the checkpoint's
    /// length when restoring (bytes written after the last checkpoint are not trusted),
    /// after reading the kept bytes back once to check they are the ones written.
    public init(path: String, restoring state: FileSinkState? = nil) throws {
        self.path = path
        self.partialPath = Self.partialPath(for: path)
        if let state, state.bytesWritten > UInt64(Int64.max) {
            throw StateRejected("the file state is malformed: \(state.bytesWritten) bytes written")
        }
        let (opened, created) = try Self.openPartial(partialPath, fresh: state == nil)
        fd = opened
        let keep = state?.bytesWritten ?? 0
        if state != nil, created, keep > 0 {
            close(fd)
            throw FileSinkError.partialMissing(path: partialPath, expected: keep)
        }
        if let state, (POSIX.fileSize(fd) ?? 0) < state.bytesWritten {
            close(fd)
            throw FileSinkError.partialTooShort(path: partialPath, expected: state.bytesWritten)
        }
        checksum = OutputChecksum(state?.crc64 ?? 0)
        do {
            if let state, try OutputChecksum.of(fd, from: 0, count: keep, path: partialPath) != checksum {
                throw FileSinkError.partialChanged(path: partialPath, bytes: state.bytesWritten)
            }
            try POSIX.truncate(fd, to: keep, path: partialPath)
        } catch {
            close(fd)
            throw error
        }
        bytesWritten = keep
        writebackStarted = keep
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// A new partial file (O_EXCL), or the one a checkpoint continues — never through a
    /// link, never a FIFO or device, never a file with other names (cutting it back would
    /// change those too), never another user's.
    /// The partial file, and whether it was just created (it was missing).
    private static func openPartial(_ path: String, fresh: Bool) throws -> (fd: Int32, created: Bool) {
        for _ in 0..<1000 {
            do {
                return (try POSIX.createNew(path, mode: 0o644), true)
            } catch SluiceError.io(_, _, let code) where code == EEXIST {}
            // A fresh run never writes into a file it finds at the name (left by a crash, or
            // put there by someone who keeps it open to read or change what we write, and
            // whose file would become PATH): it is removed and a new one made.
            if fresh, let found = POSIX.lstatFacts(path), found.kind == .regular, found.links == 1 {
                if unlink(path) != 0 && errno != ENOENT {
                    throw SluiceError.unsafePath(
                        path: path, reason: "a file is there that sluice cannot remove (\(String(cString: strerror(errno)))); it may be another user's")
                }
                continue
            }
            // Read as well as written: a resume reads the kept bytes back.
            guard let fd = try POSIX.openRegular(path, access: O_RDWR, operation: "open") else { continue }
            guard let facts = POSIX.fstatFacts(fd), facts.links == 1 else {
                close(fd)
                throw SluiceError.unsafePath(path: path, reason: "it has other hard links, so cutting it back would change another file too")
            }
            var owner = stat()
            guard fstat(fd, &owner) == 0, owner.st_uid == geteuid() else {
                close(fd)
                throw SluiceError.unsafePath(path: path, reason: "it belongs to another user, who could change it while sluice writes to it")
            }
            return (fd, false)
        }
        throw SluiceError.io(path: path, operation: "create", errno: EAGAIN)
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        try POSIX.writeAll(fd, bytes, path: partialPath)
        checksum.update(bytes)
        bytesWritten &+= UInt64(bytes.count)
        if bytesWritten - writebackStarted >= Self.writebackStep { startWriteback() }
    }

    /// Nil when no descriptor is left to duplicate: the stage in front then hands its bytes
    /// on in order, as without a writer.
    func aheadWriter() -> AheadWriter? {
        try? FileAheadWriter(duplicating: fd, path: partialPath, base: bytesWritten)
    }

    /// The next `count` bytes were written ahead at their place: they count now, and the
    /// in-order writes go on after them.
    func advance(_ count: UInt64, crc64: UInt64) throws {
        guard let end = bytesWritten.addingReportingOverflowIfFits(count), end <= UInt64(Int64.max) else {
            throw SluiceError.unexpected("an advance past the largest file offset")
        }
        guard lseek(fd, off_t(end), SEEK_SET) >= 0 else { throw SluiceError.io(path: partialPath, operation: "seek in", errno: errno) }
        checksum.append(crc64: crc64, count: count)
        bytesWritten = end
        if bytesWritten - writebackStarted >= Self.writebackStep { startWriteback() }
    }

    /// Starts writing what we wrote back to disk now, without waiting for it, so the
    /// fsync before a checkpoint or the final rename finds little left to do. (For dirty
    /// pages, POSIX_FADV_DONTNEED starts asynchronous writeback; it also keeps a large
    /// download from crowding the page cache.)
    private func startWriteback() {
        _ = posix_fadvise(fd, off_t(writebackStarted), off_t(bytesWritten - writebackStarted), POSIX_FADV_DONTNEED)
        writebackStarted = bytesWritten
    }

    public func snapshot() -> FileSinkState {
        FileSinkState(path: path, bytesWritten: bytesWritten, crc64: checksum.value)
    }

    public func durability() throws -> (@Sendable () throws -> Void)? {
        // The checkpoint writer syncs on its own thread while we keep writing; a
        // duplicate descriptor stays valid even after this sink closes its own.
        let handle = try SyncHandle(duplicating: fd, path: partialPath)
        return { try handle.sync() }
    }

    public func finish() throws {
        // Bytes written ahead that never came in order (a bug, never a user's input) must
        // not be published as part of the output.
        if let size = POSIX.fileSize(fd), size != bytesWritten {
            throw SluiceError.unexpected("\(partialPath) holds \(size) bytes, the stream \(bytesWritten); it is not renamed to \(path)")
        }
        try POSIX.fsync(fd, path: partialPath)
        let written = POSIX.fstatFacts(fd)?.identity
        close(fd)
        fd = -1
        // The rename goes by name: if another file was put at the partial name during the
        // run (another run whose own output is PATH.sluice-part renames onto it), renaming
        // it would publish someone else's bytes as this run's verified output.
        // Either is something put there during the run (exit 6, the checkpoint stays), not a
        // refusal before it.
        guard let found = POSIX.lstatFacts(partialPath), found.kind == .regular, found.identity == written else {
            throw SluiceError.obstructed(
                path: partialPath,
                reason: "it is no longer the file this run wrote (it was replaced or removed during the run), so it is not renamed to \(path);"
                    + " sluice leaves what is there as it is")
        }
        // The run checked PATH before it began; something that is not a file put there
        // since (a FIFO, a device, a directory) is still not replaced.
        if let there = POSIX.lstatFacts(path), there.kind != .regular && there.kind != .symlink {
            throw SluiceError.obstructed(
                path: path,
                reason: "\(there.kind.named) was put there during the run; sluice leaves it as it is and keeps what it wrote in \(partialPath):"
                    + " a rerun resumes from the last checkpoint (with none written, it starts over)")
        }
        guard rename(partialPath, path) == 0 else {
            throw SluiceError.io(path: path, operation: "rename \(partialPath) to", errno: errno)
        }
        try POSIX.fsyncDirectory(of: path)
    }

    /// Removes the partial output (after a failed verification, or to start over).
    /// Only a regular file is removed: a link or FIFO someone put at the name stays.
    public static func discard(path: String) {
        let partial = partialPath(for: path)
        if POSIX.lstatFacts(partial)?.kind == .regular { unlink(partial) }
    }
}

/// A file sink's partial file written at given places from any thread (`AheadWriter`):
/// its own descriptor, so the sink closing its own never leaves a worker writing into
/// whatever file reuses the number. `pwrite` leaves the in-order writes' file offset alone.
final class FileAheadWriter: AheadWriter {
    private let fd: Int32
    private let path: String
    /// The sink's bytes written when it handed this out: offset 0.
    private let base: UInt64

    init(duplicating fd: Int32, path: String, base: UInt64) throws {
        self.fd = dup(fd)
        self.path = path
        self.base = base
        guard self.fd >= 0 else { throw SluiceError.io(path: path, operation: "duplicate descriptor of", errno: errno) }
    }

    deinit { close(fd) }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        guard let start = base.addingReportingOverflowIfFits(offset),
            let end = start.addingReportingOverflowIfFits(UInt64(bytes.count)), end <= UInt64(Int64.max)
        else { throw SluiceError.unexpected("an ahead write past the largest file offset") }
        try POSIX.writeAll(fd, bytes, at: start, path: path)
    }
}

/// Why a file sink cannot continue from a checkpoint; the pipeline starts over from zero.
enum FileSinkError: Error, Equatable {
    /// The partial file holds fewer bytes than the checkpoint says are durable.
    case partialTooShort(path: String, expected: UInt64)
    /// The partial file is not there at all, though the checkpoint records bytes in it.
    case partialMissing(path: String, expected: UInt64)
    /// The partial file's first `bytes` bytes are not the ones the checkpoint recorded.
    case partialChanged(path: String, bytes: UInt64)
}

extension StageKind {
    static let file = StageKind.sink(
        "file", arguments: [.path], summary: "sink: writes PATH (via PATH.sluice-part, renamed only on success)",
        nsPerByte: 0.3, state: FileSinkState.self,
        output: { spec in FileSink.output(path: spec.arguments[0]) }
    ) { spec, _, saved in
        try FileSink(path: spec.arguments[0], restoring: saved)
    }
}

extension FileSink {
    /// PATH, its partial file, and the refusals before anything is touched.
    static func output(path: String) -> OutputTarget {
        let partial = partialPath(for: path)
        // PATH must be a regular file or nothing (a FIFO or device is never replaced);
        // the partial file is never a link, a FIFO or a device.
        return OutputTarget(
            path: path, partialPath: partial,
            preflight: { _ in
                if let problem = RunPaths.fileOutputProblem(path) ?? RunPaths.writtenFileProblem(partial) { throw problem }
            }, discardPartial: { discard(path: path) })
    }
}
