import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where a run's checkpoint lives: loads it, and replaces it atomically and durably
/// (temporary file, fsync, rename, directory fsync; mode 0600).
public final class CheckpointStore: @unchecked Sendable {
    public let path: String
    private var temporaryPath: String { path + ".tmp" }
    public init(path: String) {
        self.path = path
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
