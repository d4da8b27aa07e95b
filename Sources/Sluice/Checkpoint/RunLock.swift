#if canImport(Glibc)
import Glibc
#endif

/// An exclusive `flock` on a lock file beside what a run owns (its output, its
/// checkpoint), so a second run for the same output is refused and touches nothing.
///
/// The lock is the `flock`, not the file: it dies with the process, so a lock file left by
/// a crash never blocks anyone. The file is removed by its holder on release, so nothing is
/// left on disk (a run refused with exit 2 removes only a lock file it created, so it
/// changes nothing); that is safe because a run keeps a lock only after checking, while holding
/// it, that the name still leads to the file it locked (a run that locked a file its holder
/// had just removed sees that and starts again). A run never removes a lock it does not hold.
public final class RunLock {
    public let path: String
    /// Whether this run created the lock file (a refused run removes only those).
    public private(set) var createdFile = false
    private var fd: Int32 = -1

    public init(path: String) {
        self.path = path
    }

    deinit { release() }

    /// Takes the lock, or fails at once with `.locked` if another run holds it.
    public func acquire() throws {
        // Each retry means another run removed the file between our open and our flock;
        // a bound keeps a pathological loop from spinning forever.
        for _ in 0..<1000 {
            DebugGate.pass("LOCK_OPEN")
            let (fd, created) = try openOrCreate()
            DebugGate.pass("LOCK_FLOCK")
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                close(fd)
                if code == EWOULDBLOCK { throw SluiceError.locked(checkpoint: path) }
                throw SluiceError.io(path: path, operation: "lock", errno: code)
            }
            if namesHeldFile(fd) {
                self.fd = fd
                createdFile = created
                return
            }
            close(fd)
        }
        throw SluiceError.io(path: path, operation: "lock", errno: EAGAIN)
    }

    /// Releases the lock; `removeFile` removes the lock file first — while still holding
    /// it, only when the name still leads to the file this run locked, and only when that
    /// file is empty: sluice never writes into a lock file, so one with contents is
    /// someone's file that happens to have the lock's name (`--checkpoint notes`, `notes.lock`).
    public func release(removeFile: Bool = true) {
        guard fd >= 0 else { return }
        if removeFile && namesHeldFile(fd) && POSIX.fstatFacts(fd)?.size == 0 { unlink(path) }
        close(fd)
        fd = -1
    }

    /// A new lock file, or the existing one; never through a link, never blocking on a FIFO.
    /// Read-only is enough for `flock`, so a leftover lock file we cannot write still works.
    private func openOrCreate() throws -> (fd: Int32, created: Bool) {
        for _ in 0..<1000 {
            do {
                return (try POSIX.createNew(path, access: O_RDONLY, mode: 0o600, operation: "create lock file"), true)
            } catch SluiceError.io(_, _, let code) where code == EEXIST {}
            if let fd = try POSIX.openRegular(path, access: O_RDONLY, operation: "open lock file") { return (fd, false) }
            // Removed between the two opens: create it again.
        }
        throw SluiceError.io(path: path, operation: "create lock file", errno: EAGAIN)
    }

    private func namesHeldFile(_ fd: Int32) -> Bool {
        guard let held = POSIX.fstatFacts(fd), let named = POSIX.lstatFacts(path) else { return false }
        return named.kind == .regular && held.identity == named.identity
    }
}

/// Whether a run holds a lock file, found without opening or locking it: `sluice inspect`
/// must never take a running job's lock, not even for a moment (a run starting then would
/// be refused as if another held it). Linux lists every `flock` in /proc/locks by device
/// and inode, with the pid of the process that took it.
public struct LockHolder: Equatable, Sendable {
    /// The holder's process id; nil when the lock is held but the pid is not known.
    public let pid: Int32?

    /// Who holds the lock at `path`; nil when nothing is there, it is not a regular file,
    /// or no process holds it (a lock file left by `kill -9`).
    public static func of(_ path: String, locks: String? = readProcLocks()) -> LockHolder? {
        guard let facts = POSIX.lstatFacts(path), facts.kind == .regular, let locks else { return nil }
        let device = facts.identity.device
        // The kernel's major and minor numbers, as glibc's gnu_dev_major/minor split them.
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let file = String(major, radix: 16) + ":" + String(minor, radix: 16) + ":" + String(facts.identity.inode)
        // "1: FLOCK  ADVISORY  WRITE 27872 fe:00:5318790 0 EOF"; "1: -> FLOCK …" is a waiter.
        for line in locks.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] == "FLOCK", let spot = Self.identity(fields[5]), spot == file else { continue }
            return LockHolder(pid: Int32(fields[4]).flatMap { $0 > 0 ? $0 : nil })
        }
        return nil
    }

    /// "fe:00:5318790" with the leading zeros of its hex numbers dropped, to compare.
    private static func identity(_ field: Substring) -> String? {
        let parts = field.split(separator: ":")
        guard parts.count == 3, let major = UInt64(parts[0], radix: 16), let minor = UInt64(parts[1], radix: 16),
            let inode = UInt64(parts[2])
        else { return nil }
        return String(major, radix: 16) + ":" + String(minor, radix: 16) + ":" + String(inode)
    }

    /// /proc/locks, or nil where it cannot be read (then a holder cannot be told).
    public static func readProcLocks() -> String? {
        let fd = open("/proc/locks", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        // Bounded: a machine with millions of locks is not worth reading to the end.
        while text.count < 64 << 20 {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            text += chunk[..<n]
        }
        return String(decoding: text, as: UTF8.self)
    }
}
