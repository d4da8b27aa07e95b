import CCrypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The per-user secret that authenticates checkpoints (HMAC-SHA256).
///
/// It lives outside every output directory — `$SLUICE_STATE_DIR/key`, else
/// `$XDG_STATE_HOME/sluice/key`, else `~/.local/state/sluice/key` — so someone who can
/// write beside the output but is not the user cannot forge a checkpoint a resume trusts.
/// Created on first use: 32 random bytes, mode 0600, in a 0700 directory.
public struct CheckpointKey: Sendable {
    static let size = 32
    static let fileName = "key"
    let bytes: [UInt8]

    init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// The directory that holds the key, from the environment.
    public static func directory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let dir = environment["SLUICE_STATE_DIR"], !dir.isEmpty { return dir }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/sluice" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? homeFromPasswd()
        return home + "/.local/state/sluice"
    }

    /// HMAC-SHA256 of `data` under this key.
    func mac(_ data: [UInt8]) -> [UInt8] {
        hmac { update in data.withUnsafeBytes(update) }
    }

    /// HMAC-SHA256 of the concatenation of `parts`, without joining them (a checkpoint's
    /// JSON and its appendix's blobs, which may be hundreds of MiB).
    func mac(parts: [Data]) -> [UInt8] {
        hmac { update in
            for part in parts { part.withUnsafeBytes(update) }
        }
    }

    /// The same over blobs that may lie in a spill file: read back a chunk at a time.
    func mac(parts: [CheckpointBytes]) throws -> [UInt8] {
        try hmac { update in
            for part in parts { try part.forEachChunk(update) }
        }
    }

    /// HMAC (RFC 2104) over SHA-256, on the low-level SHA256_* calls: OpenSSL's HMAC and
    /// EVP calls load its provider machinery first, about 2 MiB of resident memory in every
    /// run that writes a checkpoint, for the same digest. `feed` passes the message to
    /// `update`, in pieces.
    private func hmac(_ feed: ((UnsafeRawBufferPointer) -> Void) throws -> Void) rethrows -> [UInt8] {
        let blockSize = 64
        var key = bytes
        if key.count > blockSize { key = Self.sha256(key) }
        key += [UInt8](repeating: 0, count: blockSize - key.count)
        var inner = SHA256_CTX()
        SHA256_Init(&inner)
        SHA256_Update(&inner, key.map { $0 ^ 0x36 }, blockSize)
        try feed { raw in
            if let base = raw.baseAddress, raw.count > 0 { SHA256_Update(&inner, base, raw.count) }
        }
        var innerDigest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        SHA256_Final(&innerDigest, &inner)
        return Self.sha256(key.map { $0 ^ 0x5C } + innerDigest)
    }

    private static func sha256(_ data: [UInt8]) -> [UInt8] {
        var context = SHA256_CTX()
        SHA256_Init(&context)
        SHA256_Update(&context, data, data.count)
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        SHA256_Final(&digest, &context)
        return digest
    }

    /// The key stored in `directory`, or nil when there is none yet (a new machine or user).
    static func existing(in directory: String) throws -> CheckpointKey? {
        let dir = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dir >= 0 else {
            if errno == ENOENT { return nil }
            throw SluiceError.io(path: directory, operation: "open the checkpoint key directory", errno: errno)
        }
        defer { close(dir) }
        return try read(in: dir, path: directory + "/" + fileName)
    }

    /// The key stored in `directory`, created (with the directory) when there is none.
    static func loadOrCreate(in directory: String) throws -> CheckpointKey {
        let dir = try openPrivateDirectory(directory)
        defer { close(dir) }
        let path = directory + "/" + fileName
        if let key = try read(in: dir, path: path) { return key }
        var fresh = [UInt8](repeating: 0, count: size)
        guard getrandom(&fresh, size, 0) == size else {
            throw SluiceError.io(path: path, operation: "get random bytes for", errno: errno)
        }
        // Written under a private name and linked into place, so a concurrent run never
        // reads a half-written key; the run that loses the race uses the winner's key.
        let temporary = "\(fileName).\(getpid()).tmp"
        let fd = openat(dir, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SluiceError.io(path: directory + "/" + temporary, operation: "create", errno: errno) }
        defer { unlinkat(dir, temporary, 0) }
        do {
            defer { close(fd) }
            try fresh.withUnsafeBytes { try POSIX.writeAll(fd, $0, path: path) }
            try POSIX.fsync(fd, path: path)
        }
        if linkat(dir, temporary, dir, fileName, 0) != 0 {
            guard errno == EEXIST, let winner = try read(in: dir, path: path) else {
                throw SluiceError.io(path: path, operation: "create", errno: errno)
            }
            return winner
        }
        try POSIX.fsync(dir, path: directory)
        return CheckpointKey(bytes: fresh)
    }

    /// Reads the key file in `dir`; nil when it does not exist. A key someone else could
    /// have written or read (not ours, not 0600-or-stricter, not 32 bytes) is refused.
    private static func read(in dir: Int32, path: String) throws -> CheckpointKey? {
        let fd = openat(dir, fileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw SluiceError.io(path: path, operation: "open the checkpoint key", errno: errno)
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw SluiceError.io(path: path, operation: "stat", errno: errno) }
        guard (st.st_mode & S_IFMT) == S_IFREG, st.st_uid == geteuid(), st.st_mode & 0o077 == 0, st.st_size == size else {
            throw SluiceError.usage(
                "the checkpoint key \(path) must be a \(size)-byte regular file owned by you with mode 0600; remove it to have a new one made (checkpoints made with it will then start over)"
            )
        }
        var bytes = [UInt8](repeating: 0, count: size)
        let n = try bytes.withUnsafeMutableBytes { try POSIX.read(fd, into: $0, path: path) }
        guard n == size else { throw SluiceError.io(path: path, operation: "read", errno: EIO) }
        return CheckpointKey(bytes: bytes)
    }

    /// Opens `path` as a directory only this user can enter, creating it (and missing
    /// parents) with mode 0700.
    private static func openPrivateDirectory(_ path: String) throws -> Int32 {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw unmade(path, "make the directory", prefix, errno: errno)
            }
        }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw unmade(path, "open the directory", path, errno: errno) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_uid == geteuid() else {
            close(fd)
            throw SluiceError.usage("the checkpoint key directory \(path) belongs to another user; set SLUICE_STATE_DIR to a directory of yours")
        }
        if st.st_mode & 0o077 != 0 { fchmod(fd, 0o700) }
        return fd
    }

    /// The key directory cannot be made or opened (an unwritable or missing HOME): the
    /// message names the key it is for, the directory that failed, and the variable that
    /// puts the key elsewhere.
    private static func unmade(_ directory: String, _ step: String, _ failed: String, errno code: Int32) -> SluiceError {
        .io(
            path: failed,
            operation: "create the checkpoint key \(directory)/\(fileName) (set SLUICE_STATE_DIR to a directory you"
                + " can write to keep it there instead): cannot \(step)",
            errno: code)
    }

    private static func homeFromPasswd() -> String {
        guard let entry = getpwuid(geteuid()), let dir = entry.pointee.pw_dir else { return "/" }
        return String(cString: dir)
    }
}

/// A checkpoint this run cannot trust: no key to check it with, or a MAC that does not
/// match. A file sink starts over from zero; a stdout sink refuses (exit 2).
struct CheckpointDistrust: Error, Equatable {
    let path: String
    let reason: String
}
