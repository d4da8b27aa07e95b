#if canImport(Glibc)
import Glibc
#endif

/// Removes a directory tree that untar made, relative to directory descriptors only:
/// a symlink inside is removed, never followed, and the walk holds one descriptor per
/// level (climbing back with `..`, which from a real directory is its real parent),
/// so depth does not run out of descriptors. A symlink or file at the top is unlinked.
/// Names stay raw bytes (NUL-terminated): an archive's names need not be UTF-8, and a
/// name repaired into a String would name nothing there. It never crosses into another
/// filesystem: a mount point inside is left, with what is mounted there, untouched.
enum TreeRemover {
    private typealias Name = [CChar]

    static func remove(_ path: String) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        guard (st.st_mode & S_IFMT) == S_IFDIR else {
            unlink(path)
            return
        }
        let top = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard top >= 0 else { return }
        empty(top, device: st.st_dev)
        rmdir(path)
    }

    /// Removes the directory `leaf` of `parent` with everything in it, as `remove` does.
    /// Whether it is gone.
    static func remove(_ leaf: ArraySlice<UInt8>, in parent: Int32) -> Bool {
        SafeExtractor.withCString(leaf) { name in
            let top = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            var st = stat()
            guard top >= 0, fstat(top, &st) == 0 else {
                if top >= 0 { close(top) }
                return false
            }
            empty(top, device: st.st_dev)
            return unlinkat(parent, name, AT_REMOVEDIR) == 0
        }
    }

    /// Empties the directory open at `top` (and closes it), staying on `device`.
    private static func empty(_ top: Int32, device: dev_t) {
        // Per level: the descriptor and the subdirectories still to visit.
        var fd = top
        var pending: [[Name]] = []
        var names: [Name] = []  // the path from top to fd
        var subdirectories = clearFiles(fd, device: device)
        while true {
            if let next = subdirectories.popLast() {
                let child = openat(fd, next, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if child < 0 {
                    // Replaced since we listed it (or not a directory after all): unlink what is there.
                    unlinkat(fd, next, 0)
                    continue
                }
                pending.append(subdirectories)
                names.append(next)
                close(fd)
                fd = child
                subdirectories = clearFiles(fd, device: device)
                continue
            }
            guard let name = names.popLast(), let rest = pending.popLast() else { break }
            let parent = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            close(fd)
            guard parent >= 0 else { return }
            unlinkat(parent, name, AT_REMOVEDIR)
            fd = parent
            subdirectories = rest
        }
        close(fd)
    }

    /// Unlinks every non-directory in `fd`; returns the names of its subdirectories on `device`.
    private static func clearFiles(_ fd: Int32, device: dev_t) -> [Name] {
        // A directory we made read-only at the end must be writable again to be emptied.
        fchmod(fd, 0o700)
        let listing = dup(fd)
        guard listing >= 0, let dir = fdopendir(listing) else { return [] }
        defer { closedir(dir) }
        var subdirectories: [Name] = []
        while let entry = readdir(dir) {
            let name: Name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                let bytes = raw.bindMemory(to: CChar.self)
                let end = bytes.firstIndex(of: 0) ?? bytes.count
                return Array(bytes[..<end]) + [0]
            }
            if name == [46, 0] || name == [46, 46, 0] { continue }  // . and ..
            var st = stat()
            guard fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0, st.st_dev == device else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR {
                subdirectories.append(name)
            } else {
                unlinkat(fd, name, 0)
            }
        }
        return subdirectories
    }
}
