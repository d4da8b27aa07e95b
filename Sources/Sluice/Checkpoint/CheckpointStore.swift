import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where a run's checkpoint lives: loads it, replaces it atomically and durably
/// (temporary file, fsync, rename, directory fsync; mode 0600), and holds the
/// exclusive lock that keeps two runs off the same output.
public final class CheckpointStore: @unchecked Sendable {
    public let path: String
    public var lockPath: String { path + ".lock" }
    private var temporaryPath: String { path + ".tmp" }
    private var lockFD: Int32 = -1

    public init(path: String) {
        self.path = path
    }

    deinit { unlock() }

    /// Takes the exclusive lock, or fails at once with `.locked` if another run has it.
    public func lock() throws {
        while true {
            let existed = POSIX.exists(lockPath)
            let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw SluiceError.io(path: lockPath, operation: "create lock file", errno: errno) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                close(fd)
                if !existed { unlink(lockPath) }
                if code == EWOULDBLOCK { throw SluiceError.locked(checkpoint: path) }
                throw SluiceError.io(path: lockPath, operation: "lock", errno: code)
            }
            // The run before us may have removed the file between our open and flock:
            // then we hold a lock nobody else can see. Lock the file that is there now.
            var held = stat(), current = stat()
            if fstat(fd, &held) == 0, stat(lockPath, &current) == 0,
               held.st_dev == current.st_dev, held.st_ino == current.st_ino {
                lockFD = fd
                createdLockFile = !existed
                return
            }
            close(fd)
        }
    }

    /// Whether this run created the lock file (so leaving nothing behind means removing it).
    public private(set) var createdLockFile = false

    /// Releases the lock; `removeFile` also deletes the lock file (while still holding it).
    public func unlock(removeFile: Bool = false) {
        guard lockFD >= 0 else { return }
        if removeFile { unlink(lockPath) }
        close(lockFD)
        lockFD = -1
    }

    public var exists: Bool { POSIX.exists(path) }

    /// The stored checkpoint, nil when there is none; refuses one it cannot trust.
    public func load() throws -> Checkpoint? {
        guard let data = FileManager.default.contents(atPath: path) else {
            if POSIX.exists(path) { throw SluiceError.io(path: path, operation: "read", errno: EACCES) }
            return nil
        }
        return try Checkpoint.decode(data, path: path)
    }

    public func save(_ checkpoint: Checkpoint) throws {
        let data = try checkpoint.encoded()
        let fd = open(temporaryPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SluiceError.io(path: temporaryPath, operation: "create", errno: errno) }
        do {
            defer { close(fd) }
            fchmod(fd, 0o600)  // an older temporary file may have had other bits
            try data.withUnsafeBytes { try POSIX.writeAll(fd, $0, path: temporaryPath) }
            try POSIX.fsync(fd, path: temporaryPath)
        } catch {
            unlink(temporaryPath)
            throw error
        }
        guard rename(temporaryPath, path) == 0 else {
            let code = errno
            unlink(temporaryPath)
            throw SluiceError.io(path: path, operation: "rename checkpoint to", errno: code)
        }
        try POSIX.fsyncDirectory(of: path)
    }

    public func remove() {
        unlink(path)
        unlink(temporaryPath)
    }
}
