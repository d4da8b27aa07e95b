#if canImport(Glibc)
import Glibc
#endif

/// An exclusive `flock` on a lock file beside what a run owns (its output, its
/// checkpoint), so a second run for the same output is refused and touches nothing.
public final class RunLock {
    public let path: String
    /// Whether this run created the lock file (so leaving nothing behind means removing it).
    public private(set) var createdFile = false
    private var fd: Int32 = -1

    public init(path: String) {
        self.path = path
    }

    deinit { release() }

    /// Takes the lock, or fails at once with `.locked` if another run holds it.
    public func acquire() throws {
        while true {
            let existed = POSIX.exists(path)
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw SluiceError.io(path: path, operation: "create lock file", errno: errno) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                close(fd)
                if !existed { unlink(path) }
                if code == EWOULDBLOCK { throw SluiceError.locked(checkpoint: path) }
                throw SluiceError.io(path: path, operation: "lock", errno: code)
            }
            // The run before us may have removed the file between our open and flock:
            // then we hold a lock nobody else can see. Lock the file that is there now.
            var held = stat(), current = stat()
            if fstat(fd, &held) == 0, stat(path, &current) == 0,
               held.st_dev == current.st_dev, held.st_ino == current.st_ino {
                self.fd = fd
                createdFile = !existed
                return
            }
            close(fd)
        }
    }

    /// Releases the lock; `removeFile` also deletes the lock file (while still holding it).
    public func release(removeFile: Bool = false) {
        guard fd >= 0 else { return }
        if removeFile { unlink(path) }
        close(fd)
        fd = -1
    }
}
