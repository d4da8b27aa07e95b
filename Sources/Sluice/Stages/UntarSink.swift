import CLinux
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `untar DIR [strip=N]`: unpacks a tar stream into `DIR.sluice-part/`, and renames it
/// to DIR only when the stream ended, every stage before it agreed and every directory
/// got its metadata — all or nothing. Every member goes through `MemberPath` (names) and
/// `SafeExtractor` (the kernel keeps it beneath the directory). Resumable inside a
/// member: the checkpoint holds the reader's state, the file being written (which a resume
/// checks by its CRC-64, cuts back and continues) and the ledger of everything extracted
/// before it (which a resumed run re-reads before the tree becomes DIR: `PartialTreeCheck`).
public final class UntarSink: TerminalSink, TarEventHandler {
    public let directory: String
    public let partialPath: String
    public let strip: Int
    private var reader: TarReader
    private let extractor: SafeExtractor
    private let root: Int32
    private let notify: (String) -> Void
    private var noticesGiven = 0

    /// The regular file being written, if the current member is one.
    private var current: OpenFile?
    /// Directory metadata, applied when the archive ends (children first).
    private var directories: DirectoryList
    /// What the archive says about DIR itself (a `./` member).
    private var rootMetadata: DirectoryMetadata?
    /// Every name made so far and what it holds (the file being written excepted).
    private var ledger: TreeLedger
    /// Restored from a checkpoint: the tree is checked before it becomes DIR.
    private var resumed = false
    public private(set) var notices: [String] = []

    /// Bounds what a checkpoint must carry for directories still waiting for their metadata:
    /// packed, their records stay well under what a checkpoint may weigh (64 MiB, base64 4/3).
    /// GNU types that describe no file to extract: volume label, multi-volume continuation,
    /// old long-name record, dump-directory listing.
    static let typesWithoutAFile: Set<UInt8> = [UInt8(ascii: "V"), UInt8(ascii: "M"), UInt8(ascii: "N"), UInt8(ascii: "D")]
    static let maxDirectories = 1_000_000
    static let maxDirectoryBytes = 32 << 20
    public static let maxStrip = 64

    private struct OpenFile {
        var fd: Int32
        var path: MemberPath
        /// `path.joined`, made once.
        var name: [UInt8]
        var mode: UInt32
        var mtime: TarTime
        var needsChmod: Bool
        var written: UInt64
        /// The member's data size: a file is complete when `written` reaches it.
        var size: UInt64
        /// CRC-64 of the `written` bytes, as they are written (the ledger's, and a resume's check).
        var content: OutputChecksum
        /// Where the member's header is, for messages (0 after a resume).
        var headerOffset: UInt64 = 0
    }

    public static func partialPath(for directory: String) -> String { directory + ".sluice-part" }

    /// Extraction goes at an uneven pace — a run of small files is a run of file creations,
    /// a large file a run of plain writes — so the queue in front of it is deeper than the
    /// default 2 MiB, which the inflater behind it filled and then waited on: 6 MiB measured
    /// 1.92× the igzip pipeline against 1.84× in one A/B, for 4 MiB of RSS.
    public var queueBuffers: Int { 24 }

    /// A fresh extraction (any stale partial tree is removed first), or one restored from
    /// a checkpoint: the partial tree must still be what the checkpoint describes.
    public init(
        directory: String, strip: Int = 0, restoring state: UntarState? = nil,
        notify: @escaping (String) -> Void = { _ in }
    ) throws {
        guard (0...Self.maxStrip).contains(strip) else { throw SluiceError.usage("untar strip=\(strip): expected 0 to \(Self.maxStrip)") }
        self.directory = directory
        self.partialPath = Self.partialPath(for: directory)
        self.strip = strip
        self.notify = notify
        if let state {
            guard state.version == UntarState.currentVersion else {
                throw StateRejected("it has untar state version \(state.version), this build reads version \(UntarState.currentVersion)")
            }
            try Self.validate(state, directory: directory, strip: strip)
            do {
                reader = try TarReader(restoring: state.reader)
            } catch {
                throw StateRejected("its tar reader state is not one untar writes")
            }
            directories = state.packedDirectories
            rootMetadata = state.root
            guard let restored = TreeLedger(restoring: [UInt8](state.tree)) else {
                throw StateRejected("its list of extracted members is not one untar writes")
            }
            ledger = restored
            root = Self.openGrowing(partialPath)
            guard root >= 0 else {
                throw PartialOutputChanged(path: partialPath, reason: "it is missing or not a directory")
            }
        } else {
            reader = TarReader()
            directories = DirectoryList()
            ledger = TreeLedger()
            Self.discard(directory: directory)
            guard mkdir(partialPath, 0o700) == 0 else {
                if errno == EEXIST {
                    throw SluiceError.usage(
                        "\(partialPath) is left from an earlier run and could not be removed (is a filesystem mounted inside it?); remove it yourself"
                    )
                }
                throw SluiceError.io(path: partialPath, operation: "create directory", errno: errno)
            }
            root = open(partialPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard root >= 0 else { throw SluiceError.io(path: partialPath, operation: "open", errno: errno) }
        }
        extractor = SafeExtractor(root: root, rootPath: partialPath)
        if let state {
            restoreGrowingModes(current: state.current?.path.bytes)
            extractor.mayRemoveWithContents = { [unowned self] in self.holdsOnlyMembersPastTheCut($0) }
        }
        if state?.treeUnchecked == true {
            throw PartialOutputChanged(
                path: partialPath,
                reason: "it holds more members than a checkpoint lists (over \(TreeLedger.maxBytes >> 20) MiB of names), so a resume cannot check it")
        }
        resumed = state != nil
        if let saved = state?.current {
            // Every property is set: if this throws, deinit closes the root.
            current = try reopen(saved)
            notices.append("untar continues \(TarName.display(saved.path.bytes)) at byte \(saved.written)")
        }
    }

    /// The partial tree's root for a resumed run. A run killed in `finish` after it gave the
    /// directories their archive modes (0555, or 0 for `./`) and before its rename left them so,
    /// with a checkpoint from before: the tree gets back the mode it grows with (0700, as
    /// `mkdir` made it; `finish` applies the archive's again), here and for each directory the
    /// checkpoint lists. -1 when it is missing or not a directory.
    private static func openGrowing(_ path: String) -> Int32 {
        let handle = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard handle >= 0 else { return -1 }
        defer { close(handle) }
        SafeExtractor.restoreGrowingMode(handle)
        return openat(handle, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    }

    /// Every directory the checkpoint's tree holds, given the mode it grows with before the
    /// resumed run writes into it again: 0700 for those members made (`finish` applies the
    /// archive's), the default mode for a member's implied parents (the end check sets it
    /// again too). A run killed in `finish` left the first at their archive modes, a `chmod`
    /// between the runs may have reached either: a directory its owner cannot write failed
    /// every rerun with exit 6.
    private func restoreGrowingModes(current: [UInt8]?) {
        let entries = ledger.live
        var modes: [[UInt8]: UInt32] = [:]
        for name in entries.map(\.name) + (current.map { [$0] } ?? []) {
            for (at, byte) in name.enumerated() where byte == UInt8(ascii: "/") {
                let parent = Array(name[..<at])
                if modes[parent] == nil { modes[parent] = 0o777 & ~extractor.umask }
            }
        }
        for entry in entries where entry.kind == .directory { modes[entry.name] = 0o700 }
        for dir in directories.list { modes[dir.path.bytes] = 0o700 }
        // Parents before children, so each is reachable when its turn comes.
        for (name, mode) in modes.sorted(by: { $0.key.count < $1.key.count }) {
            guard let path = MemberPath.restored(name) else { continue }
            extractor.restoreGrowingMode(path, mode: mode)
        }
    }

    /// A resumed run replacing a directory that is not empty (`d`, then a file `d`, then
    /// `d/` and `d/f` again: the killed run went on past the cut and made `d/f`). When
    /// nothing in it is in the ledger — nothing extracted before the cut, nothing this run
    /// made — it holds only what the killed run made past the cut (or something planted):
    /// removing it is what the archive does. Otherwise the member is refused, as in a fresh run.
    private func holdsOnlyMembersPastTheCut(_ directory: MemberPath) -> Bool {
        let prefix = directory.joined + [UInt8(ascii: "/")]
        return !ledger.overflowed && !ledger.live.contains { $0.name.starts(with: prefix) }
    }

    deinit {
        if let current { close(current.fd) }
        close(root)
    }

    // MARK: ByteSink

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        do {
            try reader.consume(bytes, into: self)
        } catch let error as TarError {
            throw Self.sluiceError(error)
        }
    }

    public func finish() throws {
        do {
            try reader.finish()
        } catch {
            throw Self.sluiceError(error)
        }
        if resumed { try checkTree() }
        // Children before parents, and a later entry for the same directory after an earlier one.
        let ordered = directories.list.enumerated().sorted {
            ($0.element.depth, $1.offset) > ($1.element.depth, $0.offset)
        }
        do {
            for (_, dir) in ordered {
                try extractor.completeDirectory(dir.memberPath, mode: dir.mode, mtime: dir.mtime)
            }
            try extractor.completeDirectory(
                MemberPath(components: []), mode: rootMetadata?.mode ?? 0o755,
                mtime: rootMetadata?.mtime ?? Self.now())
        } catch {
            throw Self.sluiceError(error, offset: reader.state.offset)
        }
        if sluice_syncfs(root) != 0 { throw SluiceError.io(path: partialPath, operation: "sync", errno: errno) }
        // The rename goes by name: a directory put at the partial name during the run is not
        // the tree this run extracted and verified, so it must not become DIR.
        guard let found = POSIX.lstatFacts(partialPath), found.kind == .directory,
            found.identity == POSIX.fstatFacts(root)?.identity
        else {
            throw SluiceError.obstructed(
                path: partialPath,
                reason:
                    "it is no longer the directory this run extracted into (it was replaced or removed during the run), so it is not renamed to \(directory);"
                    + " sluice leaves what is there as it is")
        }
        // rename(2) replaces an empty DIR atomically and refuses one that is not empty.
        guard rename(partialPath, directory) == 0 else {
            throw SluiceError.io(path: directory, operation: "rename \(partialPath) to", errno: errno)
        }
        try POSIX.fsyncDirectory(of: directory)
    }

    // MARK: cuts

    public func snapshot() -> UntarState {
        var saved: UntarState.CurrentFile?
        if let file = current {
            // The ledger lists the file when it is complete; whatever had its name is gone.
            ledger.forget(file.name)
            saved = UntarState.CurrentFile(
                path: ByteString(file.name), written: file.written, size: file.size, crc64: file.content.value,
                mode: file.mode, mtime: file.mtime, needsChmod: file.needsChmod)
        }
        var state = UntarState(
            directory: directory, strip: strip, reader: reader.state, current: saved,
            packedDirectories: directories, root: rootMetadata)
        state.tree = Data(ledger.snapshot())
        state.treeUnchecked = ledger.overflowed
        return state
    }

    /// syncfs on the destination: one call makes every file and directory entry since the
    /// last cut durable (measured against fsync per file: see the benchmark notes).
    public func durability() throws -> (@Sendable () throws -> Void)? {
        let handle = try SyncHandle(duplicating: root, path: partialPath, wholeFilesystem: true)
        return { try handle.sync() }
    }

    /// Replaces the name with a fresh file of ours holding the first `length` bytes of
    /// `shared` (closed); the caller's CRC check then reads the copy. It is created
    /// with the member's mode, as the first one was: a kill before the next cut leaves a
    /// file that the checkpoint's `needsChmod` describes truly.
    private func privateCopy(of shared: Int32, path: MemberPath, mode: UInt32, length: UInt64, shown: String) throws -> Int32 {
        defer { close(shared) }
        let fresh: Int32
        do {
            fresh = try extractor.createFile(path, mode: mode).fd
        } catch {
            throw Self.sluiceError(error, offset: 0, member: path.joined)
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var at: UInt64 = 0
        while at < length {
            let want = Int(min(UInt64(buffer.count), length - at))
            let n = buffer.withUnsafeMutableBytes { pread(shared, $0.baseAddress, want, off_t(at)) }
            let copied = n > 0 ? buffer.withUnsafeBytes { pwrite(fresh, $0.baseAddress, n, off_t(at)) } : -1
            guard n > 0, copied == n else {
                let code = n == 0 ? EIO : errno
                close(fresh)
                throw SluiceError.io(path: shown, operation: "copy", errno: code)
            }
            at += UInt64(n)
        }
        return fresh
    }

    private func reopen(_ saved: UntarState.CurrentFile) throws -> OpenFile {
        guard let path = MemberPath.restored(saved.path.bytes), !path.isEmpty else {
            throw StateRejected("its current file name is not a normalised member name")
        }
        let shown = partialPath + "/" + String(decoding: saved.path.bytes, as: UTF8.self)
        var fd: Int32
        do {
            fd = try extractor.open(path, flags: O_RDWR)
        } catch {
            throw PartialOutputChanged(path: shown, reason: "the file being written at the checkpoint is missing")
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG,
            st.st_size >= 0, UInt64(st.st_size) >= saved.written
        else {
            close(fd)
            throw PartialOutputChanged(path: shown, reason: "the file being written at the checkpoint is shorter than recorded or not a plain file")
        }
        let copied = st.st_nlink > 1
        if copied {
            // A second name: a later member linked it before the kill, or someone linked it
            // to a file outside DIR. Never cut or write a shared inode: continue in a copy.
            fd = try privateCopy(of: fd, path: path, mode: saved.mode, length: saved.written, shown: shown)
        }
        let content: OutputChecksum?
        do {
            content = try OutputChecksum.of(fd, from: 0, count: saved.written, path: shown)
        } catch {
            close(fd)
            throw error
        }
        guard let content, content.value == saved.crc64 else {
            close(fd)
            throw PartialOutputChanged(path: shown, reason: "the file being written at the checkpoint changed since")
        }
        // needsChmod: the content is checked, the mode is not — a chmod between the runs would
        // otherwise reach DIR. One fchmod per resume sets the member's mode whatever it is now.
        let file = OpenFile(
            fd: fd, path: path, name: saved.path.bytes, mode: saved.mode, mtime: saved.mtime, needsChmod: true,
            written: saved.written, size: saved.size, content: content)
        guard ftruncate(fd, off_t(saved.written)) == 0, lseek(fd, off_t(saved.written), SEEK_SET) >= 0 else {
            let code = errno
            close(fd)
            throw SluiceError.io(path: shown, operation: "truncate", errno: code)
        }
        return file
    }

    // MARK: members

    func tarEntry(_ entry: TarEntry) throws {
        extractor.trimCache()
        do {
            try extract(entry)
        } catch let refusal as PathRefusal {
            try blameTheTreeIfChanged()
            throw SluiceError.corruptData(
                format: "tar", offset: entry.offset,
                reason: "member \(TarName.display(entry.path)) \(refusal.reason); refused")
        } catch let error as ExtractError {
            if case .refused = error { try blameTheTreeIfChanged() }
            throw Self.sluiceError(error, offset: entry.offset, member: entry.path)
        }
    }

    /// A resumed run that must refuse a member: if the partial tree is not what the ledger
    /// says (something planted where a later member goes), the tree is at fault, not the
    /// archive — exit 2 keeping both, instead of exit 5 that discards a good download.
    private func blameTheTreeIfChanged() throws {
        if resumed { try checkTree() }
    }

    private func extract(_ entry: TarEntry) throws {
        guard let path = try MemberPath.member(entry.path, strip: strip) else { return }
        var kind = entry.kind
        // POSIX: an unrecognised type flag is read as a regular file (GNU tar does the same),
        // so its data is not silently dropped. GNU's volume labels, multi-volume pieces, old
        // long names and dump-directory listings carry no file of their own and stay skipped.
        if case .skipped(let type) = kind, !Self.typesWithoutAFile.contains(type) {
            tell("untar: \(TarName.display(entry.path)) has an unknown member type (\(TarName.display([type]))); extracted as a regular file")
            kind = .regular
        }
        switch kind {
        case .regular:
            let (fd, needsChmod) = try extractor.createFile(path, mode: entry.mode)
            current = OpenFile(
                fd: fd, path: path, name: path.joined, mode: entry.mode, mtime: entry.mtime, needsChmod: needsChmod,
                written: 0, size: entry.size, content: OutputChecksum(), headerOffset: entry.offset)
        case .directory:
            let metadata = DirectoryMetadata(path: ByteString(path.joined), mode: entry.mode, mtime: entry.mtime)
            if path.isEmpty {
                rootMetadata = metadata
                return
            }
            try extractor.makeDirectory(path)
            ledger.record(metadata.path.bytes, kind: .directory, hash: TreeLedger.directoryHash)
            let bytes = 18 + metadata.path.bytes.count
            guard directories.count < Self.maxDirectories, directories.weight + bytes <= Self.maxDirectoryBytes else {
                throw PathRefusal(
                    "is one directory more than untar keeps metadata for (\(Counted.text(directories.count, "directory", plural: "directories")), \(Counted.bytes(directories.weight)) of names)"
                )
            }
            directories.append(metadata)
        case .symlink:
            guard !path.isEmpty else { throw PathRefusal("would replace the destination directory itself") }
            try MemberPath.checkSymlinkTarget(entry.linkTarget, linkDirectoryDepth: path.depth - 1)
            try extractor.makeSymlink(path, target: entry.linkTarget, mtime: entry.mtime)
            ledger.record(path.joined, kind: .symlink, hash: TreeLedger.symlinkHash(target: entry.linkTarget, mtime: entry.mtime))
        case .hardLink:
            guard let target = try MemberPath.member(entry.linkTarget, strip: strip) else {
                throw PathRefusal("is a hard link to \(TarName.display(entry.linkTarget)), which strip=\(strip) removes")
            }
            try checkRestoredLinkTarget(target, link: path)
            try extractor.makeHardLink(path, to: target)
            if path != target { try recordHardLink(path, to: target) }
        case .fifo, .characterDevice, .blockDevice:
            tell("untar: skipped \(TarName.display(entry.path)): untar never creates FIFOs or device files")
        case .skipped(let type):
            tell("untar: skipped \(TarName.display(entry.path)): member type \(TarName.display([type])) holds no file")
        }
    }

    /// On a resumed run, a hard link to a name extracted before the checkpoint needs that
    /// name as recorded. A run killed after its checkpoint went on extracting and may have
    /// replaced it with a later member of the same name: linking to that would give the link
    /// the new content, refused only at the end as if someone had changed the tree. The old
    /// content is gone, so the resume cannot be exact: refused here, saying why.
    private func checkRestoredLinkTarget(_ target: MemberPath, link: MemberPath) throws {
        guard let linked = ledger.entry(target.joined), linked.unverified else { return }
        var reader = ContentReader()
        // A file's link count is not compared: links the killed run made past the cut count too.
        let files: Set<TreeLedger.Kind> = [.file, .linkedFile]
        // One that cannot be read now (an unreadable mode, links past the cut) is left to the check at the end.
        guard let found = try? extractor.describe(target, reader: &reader, linksChecked: false) else { return }
        if case .entry(let kind, let hash) = found, kind == linked.kind || (files.contains(kind) && files.contains(linked.kind)), hash == linked.hash {
            return
        }
        throw SluiceError.unsafePath(
            path: partialPath,
            reason: "\(TarName.display(target.joined)), which the hard link \(TarName.display(link.joined)) names, is not what the "
                + "checkpoint recorded (the interrupted run went on past its checkpoint and replaced it, or it was changed since), "
                + "so this resume cannot be exact; rerun with --restart to discard it and extract again")
    }

    /// A hard link is the file (or symlink) it names: the same ledger entry under a second
    /// name, which keeps it when the first name is later replaced.
    private func recordHardLink(_ path: MemberPath, to target: MemberPath) throws {
        if let linked = ledger.entry(target.joined) {
            // Both names are now one file of several names (a symlink stays a symlink).
            let kind: TreeLedger.Kind = linked.kind == .file ? .linkedFile : linked.kind
            if kind != linked.kind { ledger.record(target.joined, kind: kind, hash: linked.hash, unverified: linked.unverified) }
            ledger.record(path.joined, kind: kind, hash: linked.hash, unverified: linked.unverified)
            return
        }
        // Past the ledger's limit nothing is recorded, so nothing needs reading.
        guard !ledger.overflowed else { return }
        var reader = ContentReader()
        guard case .entry(let kind, let hash) = try extractor.describe(path, reader: &reader, linksChecked: false) else {
            throw ExtractError.refused("is a hard link to \(TarName.display(target.joined)), which is not a file")
        }
        ledger.record(path.joined, kind: kind, hash: hash)
    }

    func tarData(_ bytes: UnsafeRawBufferPointer) throws {
        guard let fd = current?.fd else { return }  // a member whose data is not extracted
        try POSIX.writeAll(fd, bytes, path: partialPath)
        current?.written &+= UInt64(bytes.count)
        current?.content.update(bytes)
    }

    func tarEntryEnd() throws {
        guard let file = current else { return }
        current = nil
        guard file.written == file.size else {
            close(file.fd)
            throw SluiceError.corruptData(
                format: "tar", offset: reader.state.offset,
                reason: "member \(TarName.display(file.path.joined)) ended with \(file.written) of its \(Counted.bytes(file.size)) written")
        }
        do {
            try extractor.completeFile(file.fd, mode: file.mode, needsChmod: file.needsChmod, mtime: file.mtime, path: file.path)
        } catch {
            throw Self.sluiceError(error, offset: file.headerOffset, member: file.path.joined)
        }
        let hash = TreeLedger.fileHash(
            size: file.written, permissions: SafeExtractor.permissions(file.mode) & ~extractor.umask, mtime: file.mtime,
            content: file.content.value)
        ledger.record(file.name, kind: .file, hash: hash)
    }

    /// A resumed run, at the end: what an earlier run extracted and this one did not make
    /// again must be as recorded, and nothing else may be in the tree. Else the run is
    /// refused (exit 2), keeping the tree and the checkpoint: the threads of this run have
    /// stopped, so it cannot start over itself, and a rerun would meet the same tree.
    private func checkTree() throws {
        let advice = "so it will not become \(directory); rerun with --restart to discard it and extract again"
        guard !ledger.overflowed else {
            throw SluiceError.unsafePath(
                path: partialPath,
                reason: "it holds more members than a checkpoint lists (over \(TreeLedger.maxBytes >> 20) MiB of names), "
                    + "so what an earlier run extracted cannot be checked, \(advice)")
        }
        do {
            try PartialTreeCheck(extractor: extractor).verify(ledger.live, onlyUnverified: true, listTree: true)
        } catch let difference as TreeDifference {
            throw SluiceError.unsafePath(
                path: partialPath,
                reason: "\(TarName.display(difference.member)) \(difference.reason): it is not the tree the checkpoint recorded, \(advice)")
        }
    }

    private func tell(_ message: String) {
        noticesGiven += 1
        if noticesGiven <= 20 { notify(message) }
        if noticesGiven == 20 { notify("untar: further skipped members are not listed") }
    }

    // MARK: errors and state checks

    static func sluiceError(_ error: TarError) -> SluiceError {
        switch error {
        case .corrupt(let offset, let reason): return .corruptData(format: "tar", offset: offset, reason: reason)
        }
    }

    static func sluiceError(_ error: ExtractError, offset: UInt64, member: [UInt8]? = nil) -> SluiceError {
        switch error {
        case .refused(let reason):
            let who = member.map { "member \(TarName.display($0)) " } ?? ""
            return .corruptData(format: "tar", offset: offset, reason: "\(who)\(reason); refused")
        case .missing:
            return .io(path: member.map { String(decoding: $0, as: UTF8.self) } ?? "", operation: "find", errno: ENOENT)
        case .io(let path, let operation, let code):
            return .io(path: path, operation: operation, errno: code)
        }
    }

    private static func validate(_ state: UntarState, directory: String, strip: Int) throws {
        func refuse(_ why: String) -> StateRejected { StateRejected(why) }
        guard state.directory == directory, state.strip == strip else { throw refuse("it was written for another untar stage") }
        guard state.packedDirectories.count <= maxDirectories, state.packedDirectories.weight <= maxDirectoryBytes else {
            throw refuse("it lists too many directories")
        }
        let directories = state.directories
        for dir in directories where MemberPath.restored(dir.path.bytes)?.isEmpty != false {
            throw refuse("it lists a directory whose name is not a normalised member name")
        }
        if let root = state.root, !root.path.bytes.isEmpty { throw refuse("its root metadata names a path") }
        if let current = state.current {
            guard state.reader.phase == .member else { throw refuse("it has a file open outside a member's data") }
            // The reader stands `written` bytes into the member's data, which started on a
            // block boundary after its header, with `remaining` bytes of `size` to come.
            let (total, overflow) = current.written.addingReportingOverflow(state.reader.remaining)
            guard !overflow, total == current.size else {
                throw refuse(
                    "its current file's bytes written (\(current.written)) and still to come (\(state.reader.remaining)) do not make the member's size (\(current.size))"
                )
            }
            guard current.written <= state.reader.offset, (state.reader.offset - current.written) % 512 == 0,
                state.reader.offset - current.written >= 512
            else {
                throw refuse("its current file's bytes written (\(current.written)) do not end where the reader stands (byte \(state.reader.offset))")
            }
            guard current.mode <= 0o7777, current.mtime.nanoseconds >= 0, current.mtime.nanoseconds < 1_000_000_000 else {
                throw refuse("its current file has a bad mode or mtime")
            }
        }
        for dir in directories + [state.root].compactMap({ $0 }) {
            guard dir.mode <= 0o7777, dir.mtime.nanoseconds >= 0, dir.mtime.nanoseconds < 1_000_000_000 else {
                throw refuse("a directory has a bad mode or mtime")
            }
        }
    }

    private static func now() -> TarTime {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return TarTime(seconds: Int64(ts.tv_sec), nanoseconds: Int32(ts.tv_nsec))
    }
}

/// A directory whose mode and mtime wait for the end of the archive.
public struct DirectoryMetadata: Codable, Sendable, Equatable {
    public var path: ByteString
    public var mode: UInt32
    var mtime: TarTime

    var depth: Int { path.bytes.reduce(1) { $1 == UInt8(ascii: "/") ? $0 + 1 : $0 } }

    var memberPath: MemberPath { MemberPath.restored(path.bytes) ?? MemberPath(components: []) }
}

/// The untar stage at a cut.
public struct UntarState: StageStateValue {
    public static let stage = "untar"
    /// Bumped when the meaning of a field changes; other versions are refused. Version 1:
    /// a symlink's ledger hash covers its mtime (before it, its target only).
    public static let currentVersion = 1
    public var version = UntarState.currentVersion
    public var directory: String
    public var strip: Int
    public var reader: TarReaderState
    public var current: CurrentFile?
    /// Directories waiting for their metadata, packed as the sink keeps them.
    var packedDirectories: DirectoryList
    public var directories: [DirectoryMetadata] {
        get { packedDirectories.list }
        set { packedDirectories = DirectoryList(newValue) }
    }
    public var root: DirectoryMetadata?
    /// The members extracted before the cut (`TreeLedger`'s packed entries; raw in the
    /// checkpoint's appendix).
    public var tree = Data()
    /// The ledger outgrew what a checkpoint carries: the tree cannot be checked on resume.
    public var treeUnchecked = false

    /// The regular file being written at the cut.
    public struct CurrentFile: Codable, Sendable, Equatable {
        public var path: ByteString
        public var written: UInt64
        /// The member's data size (its header's): `written` plus the reader's `remaining`.
        public var size: UInt64
        /// CRC-64 (`OutputChecksum`) of the `written` bytes.
        public var crc64: UInt64
        public var mode: UInt32
        var mtime: TarTime
        var needsChmod: Bool
    }

    public var position: StagePosition { StagePosition(input: reader.offset, output: reader.offset) }

    private enum CodingKeys: String, CodingKey { case version, directory, strip, reader, current, directories, root, tree, treeUnchecked }

    // Directories are stored as one packed base64 string (`DirectoryList`): thousands of
    // small JSON objects made every checkpoint of a source tree cost milliseconds of encoding.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        // States before version 1 had no field: version 0.
        version = try c.decodeIfPresent(Int.self, forKey: .version) ?? 0
        directory = try c.decode(String.self, forKey: .directory)
        strip = try c.decode(Int.self, forKey: .strip)
        reader = try c.decode(TarReaderState.self, forKey: .reader)
        current = try c.decodeIfPresent(CurrentFile.self, forKey: .current)
        root = try c.decodeIfPresent(DirectoryMetadata.self, forKey: .root)
        guard let list = DirectoryList(packed: try c.decode(ByteString.self, forKey: .directories).bytes) else {
            throw DecodingError.dataCorruptedError(forKey: .directories, in: c, debugDescription: "not a packed directory list")
        }
        packedDirectories = list
        tree = try c.decode(CheckpointBlob.self, forKey: .tree).wrappedValue
        treeUnchecked = try c.decode(Bool.self, forKey: .treeUnchecked)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(version, forKey: .version)
        try c.encode(directory, forKey: .directory)
        try c.encode(strip, forKey: .strip)
        try c.encode(reader, forKey: .reader)
        try c.encodeIfPresent(current, forKey: .current)
        try c.encodeIfPresent(root, forKey: .root)
        try c.encode(ByteString(packedDirectories.bytes), forKey: .directories)
        try c.encode(CheckpointBlob(wrappedValue: tree), forKey: .tree)
        try c.encode(treeUnchecked, forKey: .treeUnchecked)
    }

    init(
        directory: String, strip: Int, reader: TarReaderState, current: CurrentFile?,
        directories: [DirectoryMetadata], root: DirectoryMetadata?
    ) {
        self.init(
            directory: directory, strip: strip, reader: reader, current: current,
            packedDirectories: DirectoryList(directories), root: root)
    }

    init(
        directory: String, strip: Int, reader: TarReaderState, current: CurrentFile?,
        packedDirectories: DirectoryList, root: DirectoryMetadata?
    ) {
        self.directory = directory
        self.strip = strip
        self.reader = reader
        self.current = current
        self.packedDirectories = packedDirectories
        self.root = root
    }

    public func resumeProblem() -> String? {
        var st = stat()
        let partial = UntarSink.partialPath(for: directory)
        guard lstat(partial, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            return "\(partial) is missing or not a directory"
        }
        return nil
    }
}

/// The partial tree is not what the checkpoint describes: the run starts over from zero.
struct PartialOutputChanged: Error {
    let path: String
    let reason: String
}

extension UntarSink {
    /// DIR, its partial tree, and the refusals before anything is touched: DIR may be
    /// missing or an empty directory, nothing else (not a file, not a symlink).
    static func output(directory: String) -> OutputTarget {
        OutputTarget(
            path: directory, partialPath: partialPath(for: directory),
            preflight: { try preflight(directory: directory, checkpoint: $0) },
            discardPartial: { discard(directory: directory) })
    }

    /// `checkpoint`: the run's (nil: `DIR.sluice`), for explaining a refusal.
    static func preflight(directory: String, checkpoint: String? = nil) throws {
        // The partial tree is a directory of ours or nothing: a link, file or FIFO there is
        // not removed (it may not be ours), the run is refused.
        let partial = partialPath(for: directory)
        if let here = POSIX.lstatFacts(partial), here.kind != .directory {
            throw SluiceError.unsafePath(path: partial, reason: here.kind == .regular ? "it is a file, not untar's partial directory" : here.kind.refusal)
        }
        var st = stat()
        guard lstat(directory, &st) == 0 else {
            if errno == ENOENT { return }
            throw SluiceError.io(path: directory, operation: "inspect", errno: errno)
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else {
            throw SluiceError.usage("the untar destination \(directory) exists and is not a directory; name a new or empty directory")
        }
        guard let dir = opendir(directory) else { throw SluiceError.io(path: directory, operation: "open", errno: errno) }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in String(cString: raw.bindMemory(to: CChar.self).baseAddress!) }
            if name != "." && name != ".." {
                throw SluiceError.usage(
                    "the untar destination \(directory) exists and is not empty; "
                        + (leftoverCheckpoint(directory: directory, checkpoint: checkpoint ?? directory + ".sluice")
                            ?? "name a new or empty directory"))
            }
        }
    }

    /// DIR is not empty and its partial tree is gone, but the checkpoint is one of an
    /// untar into DIR: a run that renamed `DIR.sluice-part` to DIR was stopped before it
    /// removed the checkpoint — or DIR is something else. What the checkpoint lists (the
    /// members before its cut) is checked in DIR to tell which; what came after the cut
    /// cannot be, so the run says what it found and what to do rather than finish itself.
    static func leftoverCheckpoint(directory: String, checkpoint checkpointPath: String) -> String? {
        guard POSIX.lstatFacts(partialPath(for: directory)) == nil,
            case .valid(let checkpoint)? = try? CheckpointStore(path: checkpointPath).read(),
            let state = checkpoint.stages.lazy.compactMap({ $0.as(UntarState.self) }).first,
            state.directory == directory, !state.treeUnchecked,
            let entries = TreeLedger.decode([UInt8](state.tree))
        else { return nil }
        let root = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else { return nil }
        defer { close(root) }
        let extractor = SafeExtractor(root: root, rootPath: directory)
        let remedy = "remove \(checkpointPath) and \(directory), then rerun to extract again"
        do {
            try PartialTreeCheck(extractor: extractor).verify(entries, onlyUnverified: false, listTree: false)
            if let current = state.current {
                try checkBeginning(of: current, in: extractor)
            }
        } catch let difference as TreeDifference {
            return "\(checkpointPath) is a checkpoint of an untar into it, but \(directory) does not hold what it lists "
                + "(\(TarName.display(difference.member)) \(difference.reason)), so \(directory) is not that run's output: "
                + "name a new or empty directory, or \(remedy)"
        } catch {
            return nil
        }
        return "\(checkpointPath) is left from a run that completed it: the run renamed \(partialPath(for: directory)) to "
            + "\(directory) and was stopped before removing its checkpoint (the \(entries.count) members extracted before "
            + "that checkpoint were checked in \(directory) and match; those after it were not). If \(directory) is that "
            + "run's output, remove \(checkpointPath) — nothing needs to run again; otherwise \(remedy)"
    }

    /// The file being written at the cut, now complete in DIR: its first bytes must be those the cut counted.
    private static func checkBeginning(of current: UntarState.CurrentFile, in extractor: SafeExtractor) throws {
        let difference = TreeDifference(member: current.path.bytes, reason: "changed since the checkpoint")
        guard let path = MemberPath.restored(current.path.bytes), !path.isEmpty else { throw difference }
        let fd: Int32
        do {
            fd = try extractor.open(path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY)
        } catch {
            throw difference
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_size >= 0, UInt64(st.st_size) == current.size,
            try OutputChecksum.of(fd, from: 0, count: current.written, path: extractor.rootPath)?.value == current.crc64
        else { throw difference }
    }

    /// Removes DIR.sluice-part without ever following a symlink out of it.
    public static func discard(directory: String) {
        TreeRemover.remove(partialPath(for: directory))
    }
}

extension StageKind {
    static let untar = StageKind.sink(
        "untar", arguments: [.destinationDirectory],
        options: [.integer("strip", "leading path components to drop from every name", in: 0...UntarSink.maxStrip)],
        summary: "sink: unpacks a tar stream into DIR (via DIR.sluice-part, renamed only on success); path-safe",
        nsPerByte: 0.6, state: UntarState.self,
        output: { spec in UntarSink.output(directory: spec.arguments[0]) }
    ) { spec, context, saved in
        let progress = context.control.progress
        return try UntarSink(
            directory: spec.arguments[0], strip: spec.option("strip").flatMap { Int($0) } ?? 0,
            restoring: saved,
            notify: { progress.emit(.notice($0)) })
    }
}

extension StageArgument {
    /// untar's DIR: a path whose last component names the directory to create, written
    /// without trailing slashes (so `DIR.sluice-part` lands beside it, not inside it).
    static let destinationDirectory = StageArgument("DIR", "a directory path") { text throws(StageWordError) in
        let path = try StageArgument.path.check(text)
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        let last = trimmed.split(separator: "/").last ?? ""
        guard !last.isEmpty, last != ".", last != ".." else {
            throw StageWordError("untar needs a directory to create, not '\(text)'; name a new or empty directory, e.g. out/tree")
        }
        return String(trimmed)
    }
}
