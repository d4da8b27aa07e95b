import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// Every filesystem operation of an extraction, relative to the destination's directory
/// descriptor, with containment enforced by the kernel: parents are opened with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (no `..` out, no symlink followed —
/// which also rules out magic links), or component by component with `O_NOFOLLOW` where
/// openat2 is missing; the last component is always created with `O_EXCL`/`O_NOFOLLOW`
/// or the `*at` call that never follows it. Names reaching here are already normalised
/// (`MemberPath`): no `.`, `..` or empty components.
final class SafeExtractor {
    let root: Int32
    /// For messages: the partial directory's path.
    let rootPath: String
    /// The process umask, applied to every mode we set (as tar does for a normal user).
    let umask: UInt32
    private var hasOpenat2 = true
    /// Parent directories opened recently (O_PATH), keyed by their path: most files land
    /// in a directory just used. Valid because a directory is only ever replaced after
    /// we removed it, which empties the cache.
    private var parents: [DirectoryKey: Int32] = [:]
    /// Descriptors dropped from the cache while a member may still use one of them (the
    /// parent of a directory just removed): closed between members, never under a caller.
    private var retired: [Int32] = []
    /// The last parent looked up: consecutive members mostly share it.
    private var lastParent: (key: DirectoryKey, fd: Int32)?
    /// Whether a directory that is not empty, which a member replaces, may be removed with
    /// everything in it (a resumed run's members past the cut: see `UntarSink`). nil: never.
    var mayRemoveWithContents: ((MemberPath) -> Bool)?

    init(root: Int32, rootPath: String) {
        self.root = root
        self.rootPath = rootPath
        umask = Self.currentUmask()
    }

    deinit {
        retireCache()
        closeRetired()
    }

    /// Called between members, so no descriptor handed out is closed under a caller.
    func trimCache() {
        if parents.count >= 64 { retireCache() }
        closeRetired()
    }

    /// Empties the cache; the descriptors stay open until the member at hand is done.
    private func retireCache() {
        retired.append(contentsOf: parents.values)
        parents.removeAll(keepingCapacity: true)
        lastParent = nil
    }

    private func closeRetired() {
        for fd in retired { close(fd) }
        retired.removeAll(keepingCapacity: true)
    }

    // MARK: members

    /// Creates a regular file (replacing whatever is at the name) open for writing — and
    /// reading, so a cut can read back what it covers.
    /// Returns the descriptor and whether its mode still needs setting at the end.
    func createFile(_ path: MemberPath, mode: UInt32) throws(ExtractError) -> (fd: Int32, needsChmod: Bool) {
        let (parent, leaf) = try parentAndLeaf(path)
        let wanted = Self.permissions(mode)
        let created = (wanted | 0o600) & ~umask
        for attempt in 0..<2 {
            let fd = Self.withCString(leaf) { openat(parent, $0, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, created) }
            if fd >= 0 { return (fd, created != wanted & ~umask) }
            guard errno == EEXIST, attempt == 0 else { throw fail("create", path) }
            try remove(leaf, in: parent, path: path)
        }
        throw fail("create", path)
    }

    /// Makes sure a directory is at the name (an existing one is kept, anything else replaced).
    func makeDirectory(_ path: MemberPath) throws(ExtractError) {
        let (parent, leaf) = try parentAndLeaf(path)
        for attempt in 0..<2 {
            if Self.withCString(leaf, { mkdirat(parent, $0, 0o700) }) == 0 { return }
            guard errno == EEXIST, attempt == 0 else { throw fail("create directory", path) }
            if Self.fileType(leaf, in: parent) == S_IFDIR { return }
            try remove(leaf, in: parent, path: path)
        }
        throw fail("create directory", path)
    }

    func makeSymlink(_ path: MemberPath, target: [UInt8], mtime: TarTime) throws(ExtractError) {
        let (parent, leaf) = try parentAndLeaf(path)
        for attempt in 0..<2 {
            let made = Self.withCString(target) { t in Self.withCString(leaf) { symlinkat(t, parent, $0) } }
            if made == 0 {
                // Its mtime is part of what a resumed run checks, so it must be the archive's.
                guard Self.withTimes(mtime, { times in Self.withCString(leaf) { utimensat(parent, $0, times, AT_SYMLINK_NOFOLLOW) } }) == 0
                else { throw fail("set the mtime of", path) }
                return
            }
            guard errno == EEXIST, attempt == 0 else { throw fail("create symlink", path) }
            try remove(leaf, in: parent, path: path)
        }
        throw fail("create symlink", path)
    }

    /// Links `path` to the already extracted `target` (never following a symlink on the way).
    func makeHardLink(_ path: MemberPath, to target: MemberPath) throws(ExtractError) {
        guard let targetLeaf = target.leaf else { throw .refused("is a hard link to the destination itself") }
        let targetParent: Int32
        do {
            targetParent = try parentDirectory(target.parent, create: false)
        } catch .missing {
            throw .refused("is a hard link to \(TarName.display(target.joined)), which has not been extracted")
        }
        if path == target {
            // Linking a name to itself changes nothing, but only if the name is there (GNU tar refuses too).
            var info = stat()
            guard Self.withCString(targetLeaf, { fstatat(targetParent, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
                throw .refused("is a hard link to \(TarName.display(target.joined)), which has not been extracted")
            }
            return
        }
        try checkRelocatedSymlink(targetLeaf, in: targetParent, linkedAs: path, target: target)
        let (parent, leaf) = try parentAndLeaf(path)
        for attempt in 0..<2 {
            let linked = Self.withCString(targetLeaf) { t in Self.withCString(leaf) { linkat(targetParent, t, parent, $0, 0) } }
            if linked == 0 { return }
            switch errno {
            case EEXIST where attempt == 0:
                try remove(leaf, in: parent, path: path)
            case ENOENT, ENOTDIR:
                throw .refused("is a hard link to \(TarName.display(target.joined)), which has not been extracted")
            case EPERM:
                throw .refused("is a hard link to \(TarName.display(target.joined)), which is a directory")
            default:
                throw fail("create hard link", path)
            }
        }
        throw fail("create hard link", path)
    }

    /// A hard link to a symlink is the same symlink at another depth, and a relative target
    /// resolves from the link's own directory: `d/e/l -> ../..` linked as `h` would climb
    /// out of DIR. Its target is checked again from where the new name puts it.
    private func checkRelocatedSymlink(
        _ leaf: ArraySlice<UInt8>, in parent: Int32, linkedAs path: MemberPath, target: MemberPath
    ) throws(ExtractError) {
        guard Self.fileType(leaf, in: parent) == S_IFLNK else { return }
        var buffer = [UInt8](repeating: 0, count: MemberPath.maxLength + 1)
        let n = Self.withCString(leaf) { name in
            buffer.withUnsafeMutableBytes { readlinkat(parent, name, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) }
        }
        guard n >= 0 else { throw fail("read the symlink", target) }
        do {
            try MemberPath.checkSymlinkTarget(Array(buffer[..<n]), linkDirectoryDepth: path.depth - 1)
        } catch {
            throw .refused(
                "is a hard link to the symlink \(TarName.display(target.joined)), whose target would leave the destination from this name (\(error.reason))")
        }
    }

    /// The end of a regular file: mode (if creation could not give it), mtime, close.
    func completeFile(_ fd: Int32, mode: UInt32, needsChmod: Bool, mtime: TarTime, path: MemberPath) throws(ExtractError) {
        defer { close(fd) }
        if needsChmod, fchmod(fd, Self.permissions(mode) & ~umask) != 0 { throw fail("set the mode of", path) }
        if Self.withTimes(mtime, { futimens(fd, $0) }) != 0 { throw fail("set the mtime of", path) }
    }

    /// A directory's metadata, applied after its contents. Skipped (not an error) when a
    /// later member replaced the directory: what is there now is not a directory of its.
    func completeDirectory(_ path: MemberPath, mode: UInt32, mtime: TarTime) throws(ExtractError) {
        let fd: Int32
        if path.isEmpty {
            fd = root
        } else {
            do {
                fd = try open(path, flags: O_RDONLY | O_DIRECTORY)
            } catch .missing {
                return
            } catch {
                if case .io(_, _, let code) = error, code == ENOTDIR || code == ELOOP { return }
                throw error
            }
        }
        defer { if fd != root { close(fd) } }
        if fchmod(fd, Self.permissions(mode) & ~umask) != 0 { throw fail("set the mode of", path) }
        if Self.withTimes(mtime, { futimens(fd, $0) }) != 0 { throw fail("set the mtime of", path) }
    }

    /// A directory of the tree given the mode it had while it grew, when a run killed in its
    /// `finish` or a `chmod` left another (see `UntarSink.restoreGrowingModes`). Best effort:
    /// what is missing, not a directory or not ours is left for the tree check to judge.
    func restoreGrowingMode(_ path: MemberPath, mode: UInt32) {
        guard !path.isEmpty, let fd = try? open(path, flags: O_PATH | O_DIRECTORY) else { return }
        defer { close(fd) }
        Self.restoreGrowingMode(fd, mode: mode)
    }

    /// `fd` (O_PATH, so a mode 0 directory opens too) set to `mode` through /proc/self/fd:
    /// the descriptor's own inode, never a name looked up again.
    static func restoreGrowingMode(_ fd: Int32, mode: UInt32 = 0o700) {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == geteuid(), st.st_mode & 0o7777 != mode else { return }
        _ = chmod("/proc/self/fd/\(fd)", mode)
    }

    /// Opens an existing member beneath the root without following any symlink.
    func open(_ path: MemberPath, flags: Int32) throws(ExtractError) -> Int32 {
        if hasOpenat2 {
            let fd = Self.withCString(path.joined) {
                sluice_openat2(
                    root, $0, UInt64(flags | O_NOFOLLOW | O_CLOEXEC), 0,
                    UInt64(SLUICE_RESOLVE_BENEATH | SLUICE_RESOLVE_NO_SYMLINKS))
            }
            if fd >= 0 { return fd }
            if errno == ENOENT { throw .missing }
            if errno != ENOSYS { throw fail("open", path) }
            hasOpenat2 = false
        }
        let (parent, leaf) = try parentAndLeaf(path, create: false)
        let fd = Self.withCString(leaf) { openat(parent, $0, flags | O_NOFOLLOW | O_CLOEXEC) }
        if fd >= 0 { return fd }
        if errno == ENOENT { throw .missing }
        throw fail("open", path)
    }

    // MARK: resolution

    private func parentAndLeaf(_ path: MemberPath, create: Bool = true) throws(ExtractError) -> (Int32, ArraySlice<UInt8>) {
        guard let leaf = path.leaf else { throw .refused("would replace the destination directory itself") }
        return (try parentDirectory(path.parent, create: create), leaf)
    }

    /// The directory holding a member, opened beneath the root without following
    /// symlinks; missing ones are created (archives need not list every directory).
    private func parentDirectory(_ name: ArraySlice<UInt8>, create: Bool) throws(ExtractError) -> Int32 {
        if name.isEmpty { return root }
        if let last = lastParent, last.key.names(name) { return last.fd }
        let key = DirectoryKey(Array(name))
        if let fd = parents[key] {
            lastParent = (key, fd)
            return fd
        }
        var fd: Int32 = -1
        if hasOpenat2 {
            fd = Self.withCString(key.bytes) {
                sluice_openat2(
                    root, $0, UInt64(O_PATH | O_DIRECTORY | O_CLOEXEC), 0,
                    UInt64(SLUICE_RESOLVE_BENEATH | SLUICE_RESOLVE_NO_SYMLINKS))
            }
            if fd < 0 && errno == ENOSYS { hasOpenat2 = false }
            if fd < 0 && errno != ENOENT && errno != ENOSYS { throw blocked(key.bytes) }
        }
        if fd < 0 { fd = try walk(key.bytes.split(separator: UInt8(ascii: "/")).map(Array.init), create: create) }
        parents[key] = fd
        lastParent = (key, fd)
        return fd
    }

    /// Component by component, `O_NOFOLLOW` at each step, creating what is missing.
    private func walk(_ components: [[UInt8]], create: Bool) throws(ExtractError) -> Int32 {
        var fd = dup(root)
        guard fd >= 0 else { throw .io(path: rootPath, operation: "duplicate descriptor of", errno: errno) }
        for (depth, component) in components.enumerated() {
            if create { _ = Self.withCString(component) { mkdirat(fd, $0, 0o777) } }
            let next = Self.withCString(component) { openat(fd, $0, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            let code = errno
            close(fd)
            guard next >= 0 else {
                if code == ENOENT { throw .missing }
                throw blocked(MemberPath(components: Array(components.prefix(depth + 1))).joined, errno: code)
            }
            fd = next
        }
        return fd
    }

    /// A parent that exists but cannot be entered without following a symlink (or is a file).
    private func blocked(_ name: [UInt8], errno code: Int32 = errno) -> ExtractError {
        if code == ELOOP || code == ENOTDIR || code == EXDEV {
            // Find out which, for the message; an lstat-like probe never follows.
            return .refused(
                "would be written through \(TarName.display(name)), which is not a directory (a symlink or a file)")
        }
        return .io(
            path: rootPath + "/" + String(decoding: name, as: UTF8.self),
            operation: "open directory", errno: code)
    }

    /// Removes what is at `leaf` (never following it): a later member with the same name replaces it.
    private func remove(_ leaf: ArraySlice<UInt8>, in parent: Int32, path: MemberPath) throws(ExtractError) {
        let isDirectory = Self.fileType(leaf, in: parent) == S_IFDIR
        if Self.withCString(leaf, { unlinkat(parent, $0, isDirectory ? AT_REMOVEDIR : 0) }) == 0 {
            if isDirectory { retireCache() }  // the caller still uses `parent`
            return
        }
        if errno == ENOTEMPTY || errno == EEXIST {
            if isDirectory, mayRemoveWithContents?(path) == true {
                retireCache()  // descriptors of directories inside it are stale now
                if TreeRemover.remove(leaf, in: parent) { return }
            }
            throw .refused("would replace a directory that is not empty")
        }
        throw fail("replace", path)
    }

    private func fail(_ operation: String, _ path: MemberPath) -> ExtractError {
        let code = errno
        if code == ENAMETOOLONG { return .refused("has a name too long for this filesystem") }
        return .io(path: rootPath + "/" + String(decoding: path.joined, as: UTF8.self), operation: operation, errno: code)
    }

    // MARK: small helpers

    static func permissions(_ mode: UInt32) -> UInt32 {
        mode & 0o755  // no setuid/setgid/sticky, no group or other write
    }

    /// The `times` argument of futimens/utimensat: atime left alone, mtime set (on the stack).
    static func withTimes<R>(_ mtime: TarTime, _ body: (UnsafePointer<timespec>) -> R) -> R {
        withUnsafeTemporaryAllocation(of: timespec.self, capacity: 2) { times in
            times.initialize(repeating: timespec(tv_sec: 0, tv_nsec: SLUICE_UTIME_OMIT))
            times[1] = timespec(tv_sec: Int(mtime.seconds), tv_nsec: Int(mtime.nanoseconds))
            return body(UnsafePointer(times.baseAddress!))
        }
    }

    static func fileType(_ leaf: [UInt8], in parent: Int32) -> UInt32 { fileType(leaf[...], in: parent) }

    static func fileType(_ leaf: ArraySlice<UInt8>, in parent: Int32) -> UInt32 {
        var st = stat()
        guard withCString(leaf, { fstatat(parent, $0, &st, AT_SYMLINK_NOFOLLOW) }) == 0 else { return 0 }
        return st.st_mode & S_IFMT
    }

    static func withCString<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
        withCString(bytes[...], body)
    }

    static func withCString<R>(_ bytes: ArraySlice<UInt8>, _ body: (UnsafePointer<CChar>) -> R) -> R {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: bytes.count + 1) { buffer in
            bytes.withUnsafeBufferPointer { source in
                UnsafeMutableRawBufferPointer(buffer).copyMemory(from: UnsafeRawBufferPointer(source))
            }
            buffer[bytes.count] = 0
            return body(UnsafePointer(buffer.baseAddress!))
        }
    }

    /// The umask without changing it for other threads for long: /proc says it directly.
    static func currentUmask() -> UInt32 {
        let fd = Glibc.open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0o022 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return 0o022 }
        let text = String(decoding: buffer[..<n], as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix("Umask:") {
            if let value = UInt32(line.dropFirst(6).trimmingCharacters(in: " \t"), radix: 8) { return value & 0o777 }
        }
        return 0o022
    }
}

/// A directory's path (`a/b/c`) as a dictionary key, hashed as one run of bytes.
private struct DirectoryKey: Hashable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Whether it is `name` (compared without making a key of it).
    func names(_ name: ArraySlice<UInt8>) -> Bool {
        bytes.count == name.count && !name.isEmpty
            && bytes.withUnsafeBytes { a in name.withUnsafeBytes { b in memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 } }
    }

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}

/// What can go wrong extracting one member.
enum ExtractError: Error {
    /// The member breaks a safety rule (exit 5, the member named by the caller).
    case refused(String)
    /// Something expected to exist does not.
    case missing
    /// A filesystem call failed (exit 6).
    case io(path: String, operation: String, errno: Int32)
}

private extension Substring {
    func trimmingCharacters(in set: String) -> Substring {
        var s = self
        while let f = s.first, set.contains(f) { s = s.dropFirst() }
        while let l = s.last, set.contains(l) { s = s.dropLast() }
        return s
    }
}
