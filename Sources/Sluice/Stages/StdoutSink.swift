#if canImport(Glibc)
import Glibc
#endif

/// How much a stdout sink has written at a cut.
public struct StdoutSinkState: Codable, Sendable, Equatable {
    public var bytesWritten: UInt64
    /// When stdout is a regular file, its size at the cut: a resume cuts it back there.
    public var fileSize: UInt64?
    /// Its size when the run first began: `--restart` cuts it back there.
    public var startFileSize: UInt64?
}

/// `stdout`: writes the stream to standard output.
///
/// A pipe cannot take bytes back, so a resumed run continues at the checkpoint's
/// offset and the reader may have seen some bytes after it twice; when stdout is a
/// regular file (`>> out`), a resume truncates it to the checkpoint's length instead.
public final class StdoutSink: ByteSink {
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

    public func barrier(_ cut: Cut) throws {
        let size = isFile ? POSIX.fileSize(fd) : nil
        cut.record(.stdout(StdoutSinkState(bytesWritten: bytesWritten, fileSize: size, startFileSize: startFileSize)))
        guard isFile else { return cut.seal(makeDurable: nil) }
        let handle = try SyncHandle(duplicating: fd, path: "stdout")
        cut.seal(makeDurable: { try handle.sync() })
    }

    public func finish() throws {
        if isFile { try POSIX.fsync(fd, path: "stdout") }
    }
}
