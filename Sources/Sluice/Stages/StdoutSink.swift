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
    /// What the resume did to stdout, for the run's report.
    public private(set) var resumeNote: String?

    public init(fd: Int32 = STDOUT_FILENO, restoring state: StdoutSinkState? = nil) throws {
        self.fd = fd
        isFile = POSIX.isRegularFile(fd)
        bytesWritten = state?.bytesWritten ?? 0
        startFileSize = state?.startFileSize ?? (isFile ? POSIX.fileSize(fd) : nil)
        guard let state else { return }
        if isFile, let size = state.fileSize {
            // A file shorter than at the cut was truncated (`>` instead of `>>`): what the
            // interrupted run wrote is gone, and resuming would leave only the tail.
            guard let current = POSIX.fileSize(fd), current >= size else {
                throw SluiceError.checkpointRefused(
                    path: "(stdout)",
                    reason: "stdout is a file shorter than the \(size) bytes it had at the checkpoint (append with >> to the same file to resume)")
            }
            try POSIX.truncate(fd, to: size, path: "stdout")
        } else {
            resumeNote = "stdout continues at output byte \(state.bytesWritten); bytes before it were written by the interrupted run"
        }
    }

    /// `--restart` with stdout appending to a file: drop what the abandoned run added.
    public static func undo(_ state: StdoutSinkState, fd: Int32 = STDOUT_FILENO) throws {
        guard POSIX.isRegularFile(fd), let start = state.startFileSize,
              let current = POSIX.fileSize(fd), current >= start else { return }
        try POSIX.truncate(fd, to: start, path: "stdout")
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        try POSIX.writeAll(fd, bytes, path: "stdout")
        bytesWritten &+= UInt64(bytes.count)
    }

    public var notices: [String] { resumeNote.map { [$0] } ?? [] }

    public func snapshot() -> StdoutSinkState {
        StdoutSinkState(bytesWritten: bytesWritten, fileSize: isFile ? POSIX.fileSize(fd) : nil, startFileSize: startFileSize)
    }

    public func durability() throws -> (@Sendable () throws -> Void)? {
        guard isFile else { return nil }
        let handle = try SyncHandle(duplicating: fd, path: "stdout")
        return { try handle.sync() }
    }

    public func finish() throws {
        if isFile { try POSIX.fsync(fd, path: "stdout") }
    }
}

extension StageKind {
    static let stdout = StageKind.sink(
        "stdout", summary: "sink: writes standard output", nsPerByte: 0.5, state: StdoutSinkState.self,
        output: { _ in nil }
    ) { _, _, saved in
        try StdoutSink(restoring: saved)
    }
}
