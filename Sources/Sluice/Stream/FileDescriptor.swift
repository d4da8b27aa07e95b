import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// Thin, typed wrappers over the POSIX calls the stages need; each failure becomes a
/// `SluiceError.io` naming the file and the operation.
enum POSIX {
    /// Writes all of `bytes`, retrying short writes and EINTR.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw SluiceError.io(path: path, operation: "write to", errno: errno)
            }
            offset += n
        }
    }

    /// Writes all of `bytes` at `offset` (`pwrite`: the file position stays), retrying short
    /// writes and EINTR; a write that takes nothing is a full disk.
    static func writeAll(
        _ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: UInt64, path: String, operation: String = "write to"
    ) throws(SluiceError) {
        guard let base = bytes.baseAddress else { return }
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, base + done, bytes.count - done, off_t(offset) + off_t(done))
            if n > 0 {
                done += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                throw .io(path: path, operation: operation, errno: n == 0 ? ENOSPC : errno)
            }
        }
    }

    /// Reads up to `buffer.count` bytes; 0 at end of file.
    static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws -> Int {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return n }
            if errno == EINTR { continue }
            throw SluiceError.io(path: path, operation: "read", errno: errno)
        }
    }

    static func fsync(_ fd: Int32, path: String) throws {
        while Glibc.fsync(fd) != 0 {
            if errno == EINTR { continue }
            throw SluiceError.io(path: path, operation: "sync", errno: errno)
        }
    }

    /// Makes a rename or create in `directory` durable.
    static func fsyncDirectory(of path: String) throws {
        let directory = parentDirectory(of: path)
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw SluiceError.io(path: directory, operation: "open directory", errno: errno) }
        defer { close(fd) }
        try fsync(fd, path: directory)
    }

    static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let parent = String(path[..<slash])
        return parent.isEmpty ? "/" : parent
    }

    /// Cuts the file to `size` bytes and puts the write position there.
    static func truncate(_ fd: Int32, to size: UInt64, path: String) throws {
        guard ftruncate(fd, off_t(size)) == 0, lseek(fd, off_t(size), SEEK_SET) >= 0 else {
            throw SluiceError.io(path: path, operation: "truncate", errno: errno)
        }
    }

    static func fileSize(_ fd: Int32) -> UInt64? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return UInt64(st.st_size)
    }

    static func isRegularFile(_ fd: Int32) -> Bool {
        var st = stat()
        return fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
    }

    /// What is at `path` itself (a symbolic link is reported as one, not followed);
    /// nil when nothing is there.
    static func lstatFacts(_ path: String) -> FileFacts? {
        var st = stat()
        return lstat(path, &st) == 0 ? FileFacts(st) : nil
    }

    /// What `path` names after following links; nil when it does not resolve.
    static func statFacts(_ path: String) -> FileFacts? {
        var st = stat()
        return stat(path, &st) == 0 ? FileFacts(st) : nil
    }

    static func fstatFacts(_ fd: Int32) -> FileFacts? {
        var st = stat()
        return fstat(fd, &st) == 0 ? FileFacts(st) : nil
    }

    /// Creates `path` as a new file, never following or reusing what is there: throws
    /// `.io` with EEXIST when the name is taken (by anything, a dangling link included).
    static func createNew(
        _ path: String, access: Int32 = O_WRONLY, mode: mode_t = 0o600,
        operation: String = "create"
    ) throws -> Int32 {
        let fd = open(path, access | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { throw SluiceError.io(path: path, operation: operation, errno: errno) }
        return fd
    }

    /// Opens the regular file at `path` without following a link there and without
    /// blocking on a FIFO; nil when nothing is there. Anything but a regular file is
    /// refused (exit 2) and left as it was.
    static func openRegular(_ path: String, access: Int32, operation: String) throws -> Int32? {
        let fd = open(path, access | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            // ELOOP: a link; ENXIO: a FIFO with no reader or a device; EISDIR: a directory.
            if code == ELOOP || code == ENXIO || code == EISDIR || code == ENODEV {
                let kind = lstatFacts(path)?.kind ?? .other
                throw SluiceError.unsafePath(path: path, reason: kind.refusal)
            }
            throw SluiceError.io(path: path, operation: operation, errno: code)
        }
        guard let facts = fstatFacts(fd), facts.kind == .regular else {
            let kind = fstatFacts(fd)?.kind ?? .other
            close(fd)
            throw SluiceError.unsafePath(path: path, reason: kind.refusal)
        }
        // Regular files ignore O_NONBLOCK, but clear it so later reads and writes are plain.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }
}

/// Which file a name refers to, whatever the name: two names with the same identity
/// are the same file (a hard link, a link, `./x` and `a/../x`).
public struct FileIdentity: Hashable, Sendable, Codable {
    public var device: UInt64
    public var inode: UInt64

    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }
}

/// The kinds of file a name can hold, as far as Sluice cares.
public enum FileKind: Sendable, Equatable {
    case regular, directory, symlink, fifo, socket, characterDevice, blockDevice, other

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFLNK: self = .symlink
        case S_IFIFO: self = .fifo
        case S_IFSOCK: self = .socket
        case S_IFCHR: self = .characterDevice
        case S_IFBLK: self = .blockDevice
        default: self = .other
        }
    }

    /// The kind as a message names it ("a FIFO").
    var named: String {
        switch self {
        case .symlink: return "a symbolic link"
        case .directory: return "a directory"
        case .fifo: return "a FIFO"
        case .socket: return "a socket"
        case .characterDevice, .blockDevice: return "a device"
        case .regular: return "a file"
        case .other: return "something that is not a regular file"
        }
    }

    /// Why a file of this kind is not used, for a refusal message.
    var refusal: String {
        switch self {
        case .symlink: return "it is a symbolic link, and sluice never follows a link at a name it writes; remove the link or choose another name"
        case .directory: return "it is a directory; name a file"
        case .fifo: return "it is a FIFO, not a regular file"
        case .socket: return "it is a socket, not a regular file"
        case .characterDevice, .blockDevice: return "it is a device, not a regular file"
        case .regular, .other: return "it is not a regular file"
        }
    }
}

/// The facts about one file that Sluice's safety checks need.
public struct FileFacts: Sendable, Equatable {
    public var kind: FileKind
    public var identity: FileIdentity
    public var links: UInt64
    public var size: UInt64

    public init(kind: FileKind, identity: FileIdentity, links: UInt64 = 1, size: UInt64 = 0) {
        self.kind = kind
        self.identity = identity
        self.links = links
        self.size = size
    }

    init(_ st: stat) {
        self.init(
            kind: FileKind(mode: st.st_mode),
            identity: FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino)),
            links: UInt64(st.st_nlink), size: UInt64(max(0, st.st_size)))
    }
}

/// A duplicate of a sink's descriptor that a checkpoint carries to make the sink's bytes
/// durable from the checkpoint writer's thread. Closed when the cut that holds it goes,
/// whether or not the checkpoint was ever written (a newer cut may replace it).
final class SyncHandle: @unchecked Sendable {
    private let fd: Int32
    private let path: String

    /// `wholeFilesystem`: sync the filesystem the descriptor is on (`syncfs`), for a sink
    /// whose output is many files (untar), instead of the one file.
    private let wholeFilesystem: Bool

    init(duplicating fd: Int32, path: String, wholeFilesystem: Bool = false) throws {
        self.fd = dup(fd)
        self.path = path
        self.wholeFilesystem = wholeFilesystem
        guard self.fd >= 0 else { throw SluiceError.io(path: path, operation: "duplicate descriptor of", errno: errno) }
    }

    func sync() throws {
        guard wholeFilesystem else { return try POSIX.fsync(fd, path: path) }
        if sluice_syncfs(fd) != 0 { throw SluiceError.io(path: path, operation: "sync", errno: errno) }
    }

    deinit { close(fd) }
}
