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

    static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
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
