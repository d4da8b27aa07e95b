#if canImport(Glibc)
import Glibc
#endif

/// Reads and writes on descriptors that can block for good — a pipe or FIFO nobody
/// writes to, a terminal, a stdout whose reader stopped reading — without becoming deaf
/// to a stop of the run (SIGINT, `Pipeline.cancel()`): they wait in `poll()` in short
/// slices and look at the run's stop flag in between, so a stop reaches them within one
/// slice. Regular files never block for good and keep the plain calls.
extension POSIX {
    /// How long one `poll()` waits before the stop flag is looked at again (ms).
    static let stopCheckSlice: Int32 = 100

    /// Whether reads or writes on `fd` can wait indefinitely (anything but a regular file).
    static func mayBlock(_ fd: Int32) -> Bool {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return true }
        return (st.st_mode & S_IFMT) != S_IFREG && (st.st_mode & S_IFMT) != S_IFBLK
    }

    /// Waits until `fd` is ready for `events` (POLLIN or POLLOUT). Hang-up and errors count
    /// as ready: the read or write that follows reports them. Throws the run's failure
    /// (`.cancelled` for an interrupt) once it has stopped, before waiting at all.
    static func waitReady(_ fd: Int32, for events: Int32, control: RunControl?) throws {
        var entry = pollfd(fd: fd, events: Int16(truncatingIfNeeded: events), revents: 0)
        while true {
            try control?.check()
            let ready = poll(&entry, 1, control == nil ? -1 : stopCheckSlice)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR && errno != EAGAIN { return }
        }
    }

    /// `read`, waiting in `poll()` first when `fd` may block, so a stop ends the wait.
    static func read(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String,
        control: RunControl?, mayBlock: Bool
    ) throws -> Int {
        if mayBlock { try waitReady(fd, for: Int32(POLLIN), control: control) }
        return try read(fd, into: buffer, path: path)
    }
}

/// Writes to a descriptor that may block for good (stdout as a pipe, FIFO, terminal or
/// socket) without ever blocking in `write`: through a non-blocking descriptor of its
/// own, waiting in `POSIX.waitReady` while the reader is behind. Once the run has
/// stopped it writes only what the reader takes at once, then gives up.
///
/// O_NONBLOCK belongs to the open file, which stdout shares with the shell and the other
/// commands of a pipeline, so setting it on fd 1 would change their stdout too. Instead
/// the pipe (or terminal) is opened anew through /proc/self/fd, which gives this process
/// an open file of its own; a socket takes MSG_DONTWAIT per call instead.
final class StoppableWriter {
    private let fd: Int32
    private let ownsDescriptor: Bool
    private let isSocket: Bool
    private let path: String
    private let control: RunControl?

    /// nil when `fd` is a regular file or a block device: plain writes never block for good there.
    init?(fd: Int32, path: String, control: RunControl?) {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        let type = st.st_mode & S_IFMT
        guard type != S_IFREG && type != S_IFBLK else { return nil }
        self.path = path
        self.control = control
        isSocket = type == S_IFSOCK
        var own: Int32 = -1
        if !isSocket {
            own = open("/proc/self/fd/\(fd)", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
            // Only if it really is the same pipe or terminal.
            var mine = stat()
            if own >= 0 && (fstat(own, &mine) != 0 || mine.st_dev != st.st_dev || mine.st_ino != st.st_ino) {
                close(own)
                own = -1
            }
        }
        ownsDescriptor = own >= 0
        self.fd = ownsDescriptor ? own : fd
    }

    deinit {
        if ownsDescriptor { close(fd) }
    }

    /// Writes all of `bytes`, or throws: `.io` (EPIPE when the reader is gone), or the
    /// run's failure when it stopped while the reader was behind.
    func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            // Without a descriptor of its own (no /proc), wait first: the write may still
            // block once the reader falls behind again, but not before a stop is seen.
            if !ownsDescriptor && !isSocket { try POSIX.waitReady(fd, for: Int32(POLLOUT), control: control) }
            let n =
                isSocket
                ? send(fd, base + offset, bytes.count - offset, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                : write(fd, base + offset, bytes.count - offset)
            if n >= 0 {
                offset += n
                continue
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: try POSIX.waitReady(fd, for: Int32(POLLOUT), control: control)
            default: throw SluiceError.io(path: path, operation: "write to", errno: errno)
            }
        }
    }
}
