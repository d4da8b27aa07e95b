import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// A resumed run's check of what it did not write itself, before the tree becomes DIR:
/// each entry restored from the checkpoint (and not made again since) is looked up the way
/// the extractor works (beneath the root, never following a symlink, the last component's
/// own kind read), re-read and hashed as it was recorded; then the tree is listed, and a
/// name no member made is a difference too.
///
/// Why at the end and not when the run resumes: a run killed after its checkpoint went on
/// extracting, so the tree then holds members past the cut (new names, names a later
/// duplicate replaced). The resumed run makes those again from the same bytes; only at the
/// end is every name in the tree one this run made or one it must check.
struct PartialTreeCheck {
    let extractor: SafeExtractor

    /// With `listTree`, throws the first name found that no entry made (or a file linked to
    /// one outside the tree); then the first difference among the `ledger`'s entries (only
    /// those restored and not made again, with `onlyUnverified`), in extraction order. A linked file found with one name may have lost
    /// its partners to later members, but not while another linked name with its very hash
    /// is in the ledger — then its link group was split into copies.
    func verify(_ ledger: [TreeLedger.Entry], onlyUnverified: Bool, listTree: Bool) throws {
        // The listing first: it proves every name of a linked file is in the tree, so the
        // re-reading below may grant u+r to such a file without reaching one outside it.
        if listTree {
            let explicit = Set(ledger.lazy.filter { $0.kind == .directory }.map(\.name))
            try findExtra(expected: Self.expectedNames(ledger.map(\.name)), explicitDirectories: explicit)
        }
        var linkedHashes: [UInt64: Int] = [:]
        for entry in ledger where entry.kind == .linkedFile { linkedHashes[entry.hash, default: 0] += 1 }
        var reader = ContentReader()
        for entry in ledger where entry.unverified || !onlyUnverified {
            guard let path = MemberPath.restored(entry.name), !path.isEmpty else {
                throw TreeDifference(member: entry.name, reason: "is not a member name")
            }
            let found: FoundEntry
            do {
                found = try extractor.describe(path, reader: &reader, linksChecked: listTree)
            } catch {
                throw UntarSink.sluiceError(error, offset: 0, member: entry.name)
            }
            switch found {
            case .entry(.file, let hash) where entry.kind == .linkedFile && hash == entry.hash:
                guard (linkedHashes[hash] ?? 0) < 2 else {
                    throw TreeDifference(
                        member: entry.name, reason: "was extracted as a hard link to other names and is now a separate copy")
                }
            case .entry(let kind, let hash) where kind.matches(entry.kind) && hash == entry.hash:
                continue
            case .entry(.file, _)
            where extractor.isLeftoverGrant(path, expected: entry.hash, reader: &reader, linksChecked: listTree):
                continue
            case .entry(let kind, _) where kind.matches(entry.kind):
                let what = kind == .symlink ? "its target" : "its content, size, mode or mtime"
                throw TreeDifference(member: entry.name, reason: "changed since the checkpoint (\(what))")
            case .entry(let kind, _):
                throw TreeDifference(member: entry.name, reason: "was extracted as \(entry.kind.described) and is now \(kind.described)")
            case .missing:
                throw TreeDifference(member: entry.name, reason: "was extracted before the checkpoint and is now missing")
            case .other(let what):
                throw TreeDifference(member: entry.name, reason: "was extracted as \(entry.kind.described) and is now \(what)")
            }
        }
    }

    /// The names the tree may hold: the entries and every directory above them.
    static func expectedNames(_ names: [[UInt8]]) -> Set<[UInt8]> {
        var expected = Set<[UInt8]>(minimumCapacity: names.count * 2)
        for name in names {
            expected.insert(name)
            var end = name.count
            while let slash = name[..<end].lastIndex(of: UInt8(ascii: "/")) {
                // Its parents are there already when this parent is.
                guard expected.insert(Array(name[..<slash])).inserted else { break }
                end = slash
            }
        }
        return expected
    }

    /// Lists the tree, one directory at a time (each opened from the root, never through
    /// a symlink); a name outside `expected` is a difference, and so is a regular file with
    /// more names than the tree holds (hard-linked to a file outside it). A directory no
    /// member made (a member's implied parent) gets the default mode again: nothing records
    /// it, and a `chmod` between the runs would otherwise reach DIR.
    private func findExtra(expected: Set<[UInt8]>, explicitDirectories: Set<[UInt8]>) throws {
        var pending: [[UInt8]] = [[]]
        var links = LinkCount()
        while let directory = pending.popLast() {
            let fd: Int32
            do {
                if directory.isEmpty {
                    fd = openat(extractor.root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                    guard fd >= 0 else { throw ExtractError.io(path: extractor.rootPath, operation: "list", errno: errno) }
                } else {
                    fd = try extractor.open(
                        MemberPath(components: directory.split(separator: UInt8(ascii: "/")).map(Array.init)), flags: O_RDONLY | O_DIRECTORY)
                }
            } catch let error as ExtractError {
                throw UntarSink.sluiceError(error, offset: 0, member: directory)
            }
            guard let listing = fdopendir(fd) else {
                close(fd)
                throw SluiceError.io(path: extractor.rootPath, operation: "list", errno: errno)
            }
            defer { closedir(listing) }
            while let item = readdir(listing) {
                let leaf = withUnsafeBytes(of: item.pointee.d_name) { raw in Array(raw.prefix(while: { $0 != 0 })) }
                if leaf == [UInt8(ascii: ".")] || leaf == [UInt8(ascii: "."), UInt8(ascii: ".")] { continue }
                let name = directory.isEmpty ? leaf : directory + [UInt8(ascii: "/")] + leaf
                guard expected.contains(name) else {
                    throw TreeDifference(member: name, reason: "is not something the archive made (it was added to the partial tree)")
                }
                var isDirectory = item.pointee.d_type == UInt8(DT_DIR)
                if item.pointee.d_type == UInt8(DT_UNKNOWN) {
                    isDirectory = SafeExtractor.fileType(leaf, in: dirfd(listing)) == S_IFDIR
                }
                if isDirectory {
                    if !explicitDirectories.contains(name) { try resetImpliedMode(leaf, in: dirfd(listing), name: name) }
                    pending.append(name)
                } else if item.pointee.d_type == UInt8(DT_REG) || item.pointee.d_type == UInt8(DT_UNKNOWN) {
                    try links.count(leaf, in: dirfd(listing), name: name)
                }
            }
        }
        try links.check()
    }
}

extension PartialTreeCheck {
    /// The mode the extractor gives a directory it makes for a member's path (mkdir 0777,
    /// less the umask), set on the directory `leaf` of `parent`, never through a symlink.
    fileprivate func resetImpliedMode(_ leaf: [UInt8], in parent: Int32, name: [UInt8]) throws {
        let fd = SafeExtractor.withCString(leaf) { openat(parent, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else {
            throw TreeDifference(member: name, reason: "could not be opened as a directory (\(String(cString: strerror(errno))))")
        }
        defer { close(fd) }
        guard fchmod(fd, 0o777 & ~extractor.umask) == 0 else {
            throw SluiceError.io(path: extractor.rootPath + "/" + String(decoding: name, as: UTF8.self), operation: "set the mode of", errno: errno)
        }
    }
}

/// Every regular file's names in the tree, by inode: each must have all its names there.
private struct LinkCount {
    private var names: [UInt64: (links: UInt64, seen: UInt64, name: [UInt8])] = [:]
    private var device: UInt64?

    mutating func count(_ leaf: [UInt8], in parent: Int32, name: [UInt8]) throws {
        var st = stat()
        guard SafeExtractor.withCString(leaf, { fstatat(parent, $0, &st, AT_SYMLINK_NOFOLLOW) }) == 0 else {
            throw TreeDifference(member: name, reason: "could not be inspected (\(String(cString: strerror(errno))))")
        }
        guard (st.st_mode & S_IFMT) == S_IFREG, st.st_nlink > 1 else { return }
        // A mount point inside the tree is refused elsewhere; inodes are compared on one device.
        let dev = UInt64(st.st_dev)
        if device == nil { device = dev }
        guard device == dev else {
            throw TreeDifference(member: name, reason: "is on another filesystem than the partial tree")
        }
        let known = names[UInt64(st.st_ino)]
        names[UInt64(st.st_ino)] = (UInt64(st.st_nlink), (known?.seen ?? 0) + 1, known?.name ?? name)
    }

    func check() throws {
        for (_, file) in names where file.seen != file.links {
            throw TreeDifference(
                member: file.name,
                reason: "has \(file.links) names (hard links) and only \(file.seen) of them are in the tree: it is linked to a file outside it")
        }
    }
}

/// The first thing in the partial tree that is not what the checkpoint recorded.
struct TreeDifference: Error {
    let member: [UInt8]
    let reason: String
}

/// What is at a name, in a ledger entry's terms.
enum FoundEntry: Equatable {
    case missing
    /// Something no member makes (a FIFO, a socket, a device), or a name reached only
    /// through a symlink or a file.
    case other(String)
    case entry(TreeLedger.Kind, UInt64)
}

extension TreeLedger.Kind {
    var described: String {
        switch self {
        case .file: return "a regular file"
        case .directory: return "a directory"
        case .symlink: return "a symlink"
        case .linkedFile: return "a regular file with more than one name (hard links)"
        }
    }
}

/// Reads files for their CRC-64 with one reused buffer.
struct ContentReader: ~Copyable {
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 4096)

    deinit { buffer.deallocate() }

    /// The CRC-64 of the first `size` bytes of `fd`; nil when it holds fewer.
    func checksum(_ fd: Int32, size: UInt64) -> UInt64?? {
        var sum = OutputChecksum()
        var at: UInt64 = 0
        while at < size {
            let n = pread(fd, buffer.baseAddress, Int(min(UInt64(buffer.count), size - at)), off_t(at))
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return .some(nil) }
            if n == 0 { return nil }
            sum.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            at += UInt64(n)
        }
        return sum.value
    }
}

extension SafeExtractor {
    /// What is at `path` beneath the root, hashed as the ledger records it; the last
    /// component is never followed (a symlink is described, not opened).
    ///
    /// `linksChecked`: every name of each regular file with several is known to be in the tree
    /// (the listing checked it), so one of them may be granted u+r to be read.
    func describe(_ path: MemberPath, reader: inout ContentReader, linksChecked: Bool) throws(ExtractError) -> FoundEntry {
        let handle: Int32
        do {
            handle = try open(path, flags: O_PATH)
        } catch .missing {
            return .missing
        } catch .io(_, _, let code) where code == ELOOP || code == ENOTDIR || code == EXDEV {
            return .other("reached only through a symlink or a file")
        }
        defer { close(handle) }
        var st = stat()
        guard fstat(handle, &st) == 0 else { throw .io(path: display(path), operation: "inspect", errno: errno) }
        switch st.st_mode & S_IFMT {
        case S_IFDIR:
            return .entry(.directory, TreeLedger.directoryHash)
        case S_IFLNK:
            var target = [UInt8](repeating: 0, count: MemberPath.maxLength + 1)
            let n = target.withUnsafeMutableBytes { readlinkat(handle, "", $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) }
            guard n >= 0 else { throw .io(path: display(path), operation: "read the symlink", errno: errno) }
            let mtime = TarTime(seconds: Int64(st.st_mtim.tv_sec), nanoseconds: Int32(truncatingIfNeeded: st.st_mtim.tv_nsec))
            return .entry(.symlink, TreeLedger.symlinkHash(target: Array(target[..<n]), mtime: mtime))
        case S_IFREG:
            // Opened again to read: the same file, or it changed under us (a difference).
            let fd: Int32
            do {
                fd = try open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY)
            } catch .io(let shown, let operation, let code) where code == EACCES {
                guard let granted = try openOwnUnreadable(handle, st, path, linksChecked: linksChecked) else {
                    throw .io(path: shown, operation: operation, errno: code)
                }
                fd = granted
            }
            defer { close(fd) }
            var again = stat()
            guard fstat(fd, &again) == 0, again.st_dev == st.st_dev, again.st_ino == st.st_ino, st.st_size >= 0 else {
                return .other("a file that changed while it was read")
            }
            guard let read = reader.checksum(fd, size: UInt64(st.st_size)) else { return .other("a file that shrank while it was read") }
            guard let content = read else { throw .io(path: display(path), operation: "read back", errno: errno) }
            let mtime = TarTime(seconds: Int64(st.st_mtim.tv_sec), nanoseconds: Int32(truncatingIfNeeded: st.st_mtim.tv_nsec))
            let kind: TreeLedger.Kind = st.st_nlink > 1 ? .linkedFile : .file
            return .entry(kind, TreeLedger.fileHash(size: UInt64(st.st_size), permissions: st.st_mode & 0o7777, mtime: mtime, content: content))
        default:
            return .other("a FIFO, socket or device")
        }
    }

    /// A file of ours whose mode denies its owner reading (an archive's 000 or 200, which
    /// binds every user but root): opened with u+r for a moment, its mode put back at once
    /// (the descriptor keeps reading). nil when it is not ours or the mode cannot be changed.
    /// Never for a file that may have a name outside the tree (a hard link planted between
    /// the runs: its ctime would change, and chmod by a user outside its group drops a
    /// setgid bit for good), nor for a mode the extractor never gives (beyond 0755): such a
    /// file is a difference whatever its content.
    private func openOwnUnreadable(_ handle: Int32, _ st: stat, _ path: MemberPath, linksChecked: Bool) throws(ExtractError) -> Int32? {
        guard st.st_uid == geteuid(), st.st_mode & S_IRUSR == 0, st.st_mode & 0o7777 & ~0o755 == 0,
            st.st_nlink == 1 || linksChecked
        else { return nil }
        let itself = "/proc/self/fd/\(handle)"
        guard chmod(itself, (st.st_mode & 0o7777) | S_IRUSR) == 0 else { return nil }
        defer { _ = chmod(itself, st.st_mode & 0o7777) }
        return try open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY)
    }

    /// A run killed between granting u+r (above) and taking it back left the file with it:
    /// the file as recorded but for that bit is ours, and gets its mode back (the same
    /// conditions as the grant). Else every rerun would blame the tree for its own step.
    func isLeftoverGrant(_ path: MemberPath, expected: UInt64, reader: inout ContentReader, linksChecked: Bool) -> Bool {
        guard let handle = try? open(path, flags: O_PATH) else { return false }
        defer { close(handle) }
        var st = stat()
        guard fstat(handle, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == geteuid(), st.st_mode & S_IRUSR != 0,
            st.st_mode & 0o7777 & ~0o755 == 0, st.st_nlink == 1 || linksChecked, st.st_size >= 0,
            let fd = try? open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY)
        else { return false }
        defer { close(fd) }
        var again = stat()
        guard fstat(fd, &again) == 0, again.st_ino == st.st_ino, again.st_dev == st.st_dev,
            case .some(.some(let content)) = reader.checksum(fd, size: UInt64(st.st_size))
        else { return false }
        let mode = st.st_mode & 0o7777 & ~S_IRUSR
        let mtime = TarTime(seconds: Int64(st.st_mtim.tv_sec), nanoseconds: Int32(truncatingIfNeeded: st.st_mtim.tv_nsec))
        guard TreeLedger.fileHash(size: UInt64(st.st_size), permissions: mode, mtime: mtime, content: content) == expected else {
            return false
        }
        return chmod("/proc/self/fd/\(handle)", mode) == 0
    }

    private func display(_ path: MemberPath) -> String {
        rootPath + "/" + String(decoding: path.joined, as: UTF8.self)
    }
}
