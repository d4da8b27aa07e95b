import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where a run's checkpoint lives: loads it, and replaces it atomically and durably
/// (temporary file, fsync, rename, directory fsync; mode 0600).
public final class CheckpointStore: @unchecked Sendable {
    public let path: String
    /// Where the `CheckpointKey` that seals and checks this checkpoint lives.
    public let keyDirectory: String
    private var temporaryPath: String { path + ".tmp" }
    private let keyLock = NSLock()
    private var sealingKey: CheckpointKey?

    public init(path: String, keyDirectory: String = CheckpointKey.directory()) {
        self.path = path
        self.keyDirectory = keyDirectory
    }

    /// The key to seal with, made on first use (read once per store).
    private func keyForSaving() throws -> CheckpointKey {
        keyLock.lock()
        defer { keyLock.unlock() }
        if let sealingKey { return sealingKey }
        let key = try CheckpointKey.loadOrCreate(in: keyDirectory)
        sealingKey = key
        return key
    }

    public var exists: Bool { POSIX.exists(path) }

    /// The stored checkpoint, nil when there is none; refuses one it cannot read, and
    /// throws `CheckpointDistrust` for one it cannot authenticate.
    public func load() throws -> Checkpoint? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw SluiceError.io(path: path, operation: "open", errno: errno)
        }
        defer { close(fd) }
        guard POSIX.isRegularFile(fd) else {
            throw SluiceError.checkpointRefused(path: path, reason: "it is not a regular file")
        }
        // Checkpoints are a few hundred KiB at most; anything far larger is not one.
        var data = Data()
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { chunk.deallocate() }
        while true {
            let n = try POSIX.read(fd, into: chunk, path: path)
            if n == 0 { break }
            data.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
            if data.count > 64 << 20 {
                throw SluiceError.checkpointRefused(path: path, reason: "it is far too large to be a checkpoint")
            }
        }
        return try Checkpoint.decode(data, path: path, key: try CheckpointKey.existing(in: keyDirectory))
    }

    public func save(_ checkpoint: Checkpoint) throws {
        let data = try checkpoint.encoded(key: try keyForSaving())
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
