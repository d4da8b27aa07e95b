#if canImport(Glibc)
import Glibc
#endif

/// How much a stdout sink has written at a cut.
public struct StdoutSinkState: StageStateValue {
    public static let stage = "stdout"
    public var bytesWritten: UInt64
    /// When stdout is a regular file, its size at the cut: a resume cuts it back there.
    public var fileSize: UInt64?
    /// Its size when the run first began: `--restart` cuts it back there.
    public var startFileSize: UInt64?
    /// Which file stdout was (device and inode): a resume or `--restart` cuts back only that file.
    public var file: FileIdentity?
    /// CRC-64 of the bytes written: a resume onto the same regular file reads the last
    /// `bytesWritten` bytes before `fileSize` back and compares.
    public var crc64: UInt64

    public init(
        bytesWritten: UInt64, fileSize: UInt64? = nil, startFileSize: UInt64? = nil, file: FileIdentity? = nil,
        crc64: UInt64 = 0
    ) {
        self.bytesWritten = bytesWritten
        self.fileSize = fileSize
        self.startFileSize = startFileSize
        self.file = file
        self.crc64 = crc64
    }

    public var position: StagePosition { StagePosition(input: bytesWritten, output: bytesWritten) }
}

/// `stdout`: writes the stream to standard output.
///
/// A pipe cannot take bytes back, so a resumed run continues at the checkpoint's
/// offset and the reader may have seen some bytes after it twice; when stdout is a
/// regular file (`>> out`), a resume truncates it to the checkpoint's length instead.
public final class StdoutSink: TerminalSink {
    private let fd: Int32
    private var bytesWritten: UInt64
    private let isFile: Bool
    private let startFileSize: UInt64?
    private let identity: FileIdentity?
    private var checksum: OutputChecksum
    /// For a pipe, FIFO, terminal or socket: writes that a stop can interrupt.
    private let stoppable: StoppableWriter?
    /// What the resume did to stdout, for the run's report.
    public private(set) var resumeNote: String?
    /// Where a resume cuts the file on stdout back to, done when the run first uses the
    /// sink: a resume refused while the stages before it are restored (exit 2) must leave
    /// the file as it was.
    private var pendingCut: UInt64?

    public init(fd: Int32 = STDOUT_FILENO, restoring state: StdoutSinkState? = nil, control: RunControl? = nil) throws {
        self.fd = fd
        let facts = POSIX.fstatFacts(fd)
        isFile = facts?.kind == .regular
        identity = isFile ? facts?.identity : nil
        stoppable = StoppableWriter(fd: fd, path: "stdout", control: control)
        bytesWritten = state?.bytesWritten ?? 0
        startFileSize = state?.startFileSize ?? (isFile ? facts?.size : nil)
        checksum = OutputChecksum(state?.crc64 ?? 0)
        guard let state else { return }
        // Offsets reach off_t: anything past its range is not from a real run.
        let limit = UInt64(Int64.max)
        guard state.bytesWritten <= limit, (state.fileSize ?? 0) <= limit, (state.startFileSize ?? 0) <= limit else {
            throw StateRejected("the stdout state is malformed: an offset beyond \(limit)")
        }
        if isFile, let size = state.fileSize {
            try Self.requireSameFile(state, fd: fd, doing: "cut it back to the checkpoint")
            // A file shorter than at the cut was truncated (`>` instead of `>>`): what the
            // interrupted run wrote is gone, and resuming would leave only the tail.
            guard let current = POSIX.fileSize(fd), current >= size else {
                throw StateRejected(
                    "stdout is a file shorter than the \(Counted.bytes(size)) it had at the checkpoint (append with >> to the same file to resume)")
            }
            try Self.checkWritten(state, endingAt: size, in: fd)
            pendingCut = size
        } else {
            resumeNote =
                "stdout continues at output byte \(state.bytesWritten); the interrupted run wrote the bytes before it (and may have written some after it, which follow again)"
        }
    }

    /// The bytes this sink wrote before the cut end at `size` in the file on stdout; they
    /// must still be the bytes it wrote. Stdout is open for writing only, so the file is
    /// reopened for reading through /proc and checked to be the same file.
    private static func checkWritten(_ state: StdoutSinkState, endingAt size: UInt64, in fd: Int32) throws {
        guard state.bytesWritten > 0 else { return }
        let changed = SluiceError.remoteChanged(
            url: "the file on stdout",
            reason: "the \(Counted.bytes(state.bytesWritten)) written to it before the checkpoint changed")
        guard size >= state.bytesWritten else { throw changed }
        let reader = open("/proc/self/fd/\(fd)", O_RDONLY | O_CLOEXEC)
        guard reader >= 0 else { throw SluiceError.io(path: "stdout", operation: "reopen for reading", errno: errno) }
        defer { close(reader) }
        var mine = stat(), theirs = stat()
        guard fstat(fd, &mine) == 0, fstat(reader, &theirs) == 0,
            mine.st_dev == theirs.st_dev, mine.st_ino == theirs.st_ino
        else {
            throw SluiceError.io(path: "stdout", operation: "reopen for reading", errno: ESTALE)
        }
        let read = try OutputChecksum.of(reader, from: size - state.bytesWritten, count: state.bytesWritten, path: "stdout")
        guard read == OutputChecksum(state.crc64) else { throw changed }
    }

    /// `--restart` with stdout appending to a file: drop what the abandoned run added.
    public static func undo(_ state: StdoutSinkState, fd: Int32 = STDOUT_FILENO) throws {
        guard POSIX.isRegularFile(fd), let start = state.startFileSize else { return }
        try requireSameFile(state, fd: fd, doing: "take back what the abandoned run appended")
        guard let current = POSIX.fileSize(fd), current >= start else { return }
        try POSIX.truncate(fd, to: start, path: "stdout")
    }

    /// Refuses (exit 2) to cut back a regular file on stdout that is not the one the
    /// checkpoint recorded: `>> other.log` must never lose its own bytes.
    static func requireSameFile(_ state: StdoutSinkState, fd: Int32, doing action: String) throws {
        let now = POSIX.fstatFacts(fd)?.identity
        guard let recorded = state.file else {
            throw SluiceError.unsafePath(
                path: "stdout",
                reason: "the checkpoint does not record which file stdout was, so sluice cannot tell whether to \(action)")
        }
        guard recorded == now else {
            let current = now.map { "device \($0.device) inode \($0.inode)" } ?? "unknown"
            throw SluiceError.unsafePath(
                path: "stdout",
                reason:
                    "it is not the file the checkpoint recorded (device \(recorded.device) inode \(recorded.inode), stdout is \(current)), so sluice will not \(action); append (>>) to that same file"
            )
        }
    }

    private func cutBackIfResumed() throws {
        guard let size = pendingCut else { return }
        try POSIX.truncate(fd, to: size, path: "stdout")
        pendingCut = nil
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        try cutBackIfResumed()
        if let stoppable { try stoppable.writeAll(bytes) } else { try POSIX.writeAll(fd, bytes, path: "stdout") }
        checksum.update(bytes)
        bytesWritten &+= UInt64(bytes.count)
    }

    public var notices: [String] { resumeNote.map { [$0] } ?? [] }

    public func barrier(_ cut: Cut) throws {
        try cutBackIfResumed()
        cut.record(snapshot())
        try cut.seal(makeDurable: try durability())
    }

    public func snapshot() -> StdoutSinkState {
        StdoutSinkState(
            bytesWritten: bytesWritten, fileSize: isFile ? pendingCut ?? POSIX.fileSize(fd) : nil, startFileSize: startFileSize,
            file: identity, crc64: checksum.value)
    }

    public func durability() throws -> (@Sendable () throws -> Void)? {
        guard isFile else { return nil }
        let handle = try SyncHandle(duplicating: fd, path: "stdout")
        return { try handle.sync() }
    }

    public func finish() throws {
        try cutBackIfResumed()
        if isFile { try POSIX.fsync(fd, path: "stdout") }
    }
}

extension StageKind {
    static let stdout = StageKind.sink(
        "stdout", summary: "sink: writes standard output", nsPerByte: 0.5, state: StdoutSinkState.self,
        output: { _ in nil }
    ) { _, context, saved in
        try StdoutSink(restoring: saved, control: context.control)
    }
}
