#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A stored checkpoint's appendix (its stages' blobs): all of it, and the part that waited
/// in the cut's spill file (decoders' windows) rather than in memory.
public struct CheckpointAppendixSize: Sendable, Equatable {
    public var bytes: UInt64
    public var spilledBytes: UInt64

    public static let none = CheckpointAppendixSize(bytes: 0, spilledBytes: 0)

    public init(bytes: UInt64, spilledBytes: UInt64) {
        self.bytes = bytes
        self.spilledBytes = min(spilledBytes, bytes)
    }
}

/// What is stored at a checkpoint path.
enum StoredCheckpoint: Equatable {
    case none
    case valid(Checkpoint)
    /// A sluice checkpoint that cannot be trusted (damaged, another version): `--restart` may remove it.
    case damaged(SluiceError)
    /// A sluice checkpoint that cannot be authenticated (wrong MAC, no key here): nothing
    /// in it may be acted on, but a file sink may start over.
    case untrusted(CheckpointDistrust)
    /// A regular file that is not a sluice checkpoint at all: never used, never removed.
    case foreign(path: String)
}

/// Where a run's checkpoint lives: loads it, and replaces it atomically and durably
/// (a new temporary file, fsync, rename, directory fsync; mode 0600).
///
/// Nothing here follows a symbolic link or blocks on a FIFO: the checkpoint is opened
/// with O_NOFOLLOW|O_NONBLOCK and must be a regular file; the temporary file is written
/// without a name (O_TMPFILE) and linked to `C.tmp` only once complete and fsync'd, so
/// whatever is planted at that name is never written through, and only a whole checkpoint
/// sealed with this user's key there is taken for ours and removed; anything else is left
/// alone. Where the filesystem has no O_TMPFILE, `C.tmp` is created with O_EXCL|O_NOFOLLOW.
public final class CheckpointStore: @unchecked Sendable {
    public let path: String
    public var temporaryPath: String { Self.temporaryPath(for: path) }

    public static func temporaryPath(for path: String) -> String { path + ".tmp" }

    /// Where the `CheckpointKey` that seals and checks this checkpoint lives.
    public let keyDirectory: String
    private let keyLock = ThreadCondition()
    private var sealingKey: CheckpointKey?
    /// The file this store read as a sluice checkpoint, until its first save (under
    /// `keyLock`): `--restart` removes it even when a hand edit changed how it begins.
    private var known: FileIdentity?

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

    public var exists: Bool { POSIX.lstatFacts(path) != nil }

    /// The stored checkpoint, nil when there is none; refuses one it cannot trust, and
    /// anything that is not a checkpoint; throws `CheckpointDistrust` for one it cannot
    /// authenticate.
    public func load() throws -> Checkpoint? {
        switch try read() {
        case .none: return nil
        case .valid(let checkpoint): return checkpoint
        case .damaged(let error): throw error
        case .untrusted(let distrust): throw distrust
        case .foreign(let path): throw Self.notACheckpoint(path)
        }
    }

    /// What the checkpoint path holds. Throws only when it cannot be read, or holds a
    /// link, a FIFO, a device or a directory.
    func read() throws -> StoredCheckpoint {
        guard let fd = try POSIX.openRegular(path, access: O_RDONLY, operation: "open checkpoint") else { return .none }
        defer { close(fd) }
        // Checkpoints are a few hundred KiB of JSON plus, in the appendix, a decoder's window:
        // up to 256 MiB for unxz's default memlimit, 128 MiB for unzstd's window limit.
        // Anything far larger is not one.
        var data = Data()
        var st = stat()
        if fstat(fd, &st) == 0, st.st_size > 0, st.st_size <= Self.sizeLimit { data.reserveCapacity(Int(st.st_size)) }
        // A file already too large is judged by its JSON line alone, not read (and parsed) whole.
        let tooLarge = st.st_size > Self.sizeLimit
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { chunk.deallocate() }
        while true {
            let n = try POSIX.read(fd, into: chunk, path: path)
            if n == 0 { break }
            data.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
            let lineRead = tooLarge && (data.count >= Self.jsonLimit || UnsafeRawBufferPointer(rebasing: chunk[0..<n]).contains(0x0A))
            if data.count > Self.sizeLimit || lineRead {
                guard Self.isSluiceCheckpoint(data) else { return .foreign(path: path) }
                return .damaged(
                    .checkpointRefused(
                        path: path, reason: "it is larger than \(Self.sizeLimit >> 20) MiB, more than sluice reads (a window over 500 MiB)"))
            }
        }
        guard Self.isSluiceCheckpoint(data) else {
            // A checkpoint cut short (a copy interrupted, a damaged disk) still begins as one:
            // damaged, so `--restart` may remove it; anything else is someone's file.
            guard Self.openings.contains(where: { data.starts(with: $0) }) else { return .foreign(path: path) }
            remember(POSIX.fstatFacts(fd)?.identity)
            return .damaged(.checkpointRefused(path: path, reason: "it is damaged (its JSON is cut short or does not parse)"))
        }
        remember(POSIX.fstatFacts(fd)?.identity)
        do {
            return .valid(try Checkpoint.decode(data, path: path, key: try CheckpointKey.existing(in: keyDirectory)))
        } catch let error as SluiceError {
            return .damaged(error)
        } catch let distrust as CheckpointDistrust {
            return .untrusted(distrust)
        }
    }

    /// The largest file read as a checkpoint: a 256 MiB window with room to spare.
    static let sizeLimit = 512 << 20
    /// How much of a file over `sizeLimit` is read to tell whether it is a checkpoint: its
    /// JSON line is a few hundred KiB.
    static let jsonLimit = 16 << 20

    /// Whether `data` says it is a sluice checkpoint (of any version, damaged or not): its
    /// JSON part (all of it, before version 3) names the format. Only such a file may be
    /// replaced or removed by `--restart`.
    static func isSluiceCheckpoint(_ data: Data) -> Bool {
        struct Header: Decodable { var format: String }
        let json = CheckpointFile.split(data).json
        return (try? JSONDecoder().decode(Header.self, from: json))?.format == Checkpoint.formatName
    }

    static func notACheckpoint(_ path: String) -> SluiceError {
        .notACheckpoint(path: path)
    }

    /// Stores `checkpoint`; returns the size of its appendix (the states' blobs).
    @discardableResult
    public func save(_ checkpoint: Checkpoint) throws -> CheckpointAppendixSize {
        let file = try checkpoint.sealed(key: try keyForSaving())
        let temporaryPath = self.temporaryPath
        // A temporary file left by a crash (we hold the lock, so it is not another run's);
        // anything else at the name is someone's file, and linking or creating ours below fails on it.
        if holdsLeftoverTemporary() { unlink(temporaryPath) }
        let (fd, named) = try createTemporary()
        do {
            defer { close(fd) }
            // Spilled blobs are copied from their spill file by the kernel.
            for part in [.memory(file.json), .memory(CheckpointFile.separator)] + file.blobs {
                try part.write(to: fd, path: temporaryPath)
            }
            try POSIX.fsync(fd, path: temporaryPath)
            if !named && linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, temporaryPath, AT_SYMLINK_FOLLOW) != 0 {
                throw errno == EEXIST ? Self.foreignTemporary(temporaryPath) : SluiceError.io(path: temporaryPath, operation: "create", errno: errno)
            }
        } catch {
            if named { unlink(temporaryPath) }
            throw error
        }
        // rename replaces whatever name is at `path` (a link included) without following it;
        // a file put there during the run that is not a checkpoint is someone's, not ours.
        guard ownsWhateverIsAtPath() else {
            unlink(temporaryPath)
            throw SluiceError.obstructed(
                path: path,
                reason:
                    "it was replaced during the run by a file that is not a sluice checkpoint; sluice leaves that file as it is,"
                    + " and without its checkpoint a rerun starts over")
        }
        guard rename(temporaryPath, path) == 0 else {
            let code = errno
            unlink(temporaryPath)
            throw SluiceError.io(path: path, operation: "rename checkpoint to", errno: code)
        }
        // From now on only the content says whether it is ours: `cp notes C` keeps the inode.
        remember(nil)
        try POSIX.fsyncDirectory(of: path)
        return file.appendixSize
    }

    /// The file a save writes: nameless (O_TMPFILE in the checkpoint's directory; `named`
    /// false) so that `C.tmp` only ever holds a whole checkpoint, or, where the filesystem
    /// cannot make one, `C.tmp` itself.
    private func createTemporary() throws -> (fd: Int32, named: Bool) {
        // glibc's O_TMPFILE (__O_TMPFILE | O_DIRECTORY), a macro Swift does not import.
        let nameless: Int32 = 0o2000_0000 | O_DIRECTORY
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let fd = open(directory.isEmpty ? "/" : directory, nameless | O_WRONLY | O_CLOEXEC, 0o600)
        if fd >= 0 { return (fd, false) }
        // Filesystems without O_TMPFILE (and kernels before 3.11) say so with these.
        guard [EOPNOTSUPP, EISDIR, EINVAL].contains(errno) else {
            throw SluiceError.io(path: temporaryPath, operation: "create", errno: errno)
        }
        do {
            return (try POSIX.createNew(temporaryPath, mode: 0o600), true)
        } catch SluiceError.io(_, _, EEXIST) {
            throw Self.foreignTemporary(temporaryPath)
        }
    }

    /// Something sluice did not make stands at the temporary name, put there during the run
    /// (one there before it is refused by `RunPaths`, exit 2): a local fault like a failed
    /// write (exit 6), which leaves the partial output and the last checkpoint for a resume.
    private static func foreignTemporary(_ path: String) -> SluiceError {
        let kind = POSIX.lstatFacts(path)?.kind ?? .other
        let what = kind == .regular ? "a file that is not a checkpoint sluice left" : kind.named
        return .obstructed(
            path: path,
            reason: "sluice writes each checkpoint there before renaming it into place, and \(what) was put there during the run;"
                + " sluice leaves it as it is and keeps the last checkpoint, so a rerun resumes from it")
    }

    /// Removes the checkpoint and its temporary file: only a regular file that starts as a
    /// checkpoint does, so a link, a FIFO or a file someone put there is left alone.
    public func remove() {
        if POSIX.lstatFacts(path) != nil, ownsWhateverIsAtPath() { unlink(path) }
        if holdsLeftoverTemporary() { unlink(temporaryPath) }
    }

    /// Every checkpoint file starts like this (format 3: the MAC first; before it, sorted
    /// keys put the format first).
    private static let openings = [Data("{\"mac\":\"hmac-sha256:".utf8), Data("{\"format\":\"sluice-checkpoint\"".utf8)]

    private func remember(_ identity: FileIdentity?) {
        keyLock.lock()
        known = identity
        keyLock.unlock()
    }

    /// Whether the checkpoint path holds nothing, a file that begins as a checkpoint, or the
    /// checkpoint this store just read: never a file someone put there during the run.
    private func ownsWhateverIsAtPath() -> Bool {
        if Self.holdsNothingOrACheckpoint(path) { return true }
        keyLock.lock()
        let known = self.known
        keyLock.unlock()
        guard let known, let facts = POSIX.lstatFacts(path) else { return false }
        return facts.kind == .regular && facts.identity == known
    }

    /// Whether `path` holds nothing, or a regular file that begins as every checkpoint does
    /// (saves are atomic, so ours is never cut short): what a save may replace and the end of
    /// a run may remove.
    static func holdsNothingOrACheckpoint(_ path: String) -> Bool {
        guard POSIX.lstatFacts(path) != nil else { return true }
        guard let start = openingBytes(of: path) else { return false }
        return openings.contains { start.starts(with: $0) }
    }

    /// Whether the temporary name holds what a save interrupted before its rename leaves.
    private func holdsLeftoverTemporary() -> Bool {
        Self.isLeftoverTemporary(temporaryPath, keyDirectory: keyDirectory)
    }

    /// Whether the regular file at `path` is provably what a save interrupted before its
    /// rename leaves: a save links its file to the temporary name only once it is complete,
    /// so that is a whole checkpoint, sealed with this user's key (in `keyDirectory`).
    /// Anything else there — an empty file, a checkpoint cut short, someone's `notes.tmp`
    /// beside `--checkpoint notes` that begins like one, a checkpoint another key sealed — is
    /// not provably sluice's and is never removed. (Where the filesystem has no O_TMPFILE a
    /// crash can leave a partial `C.tmp` of ours: it cannot be told from someone's, so it is
    /// refused all the same.)
    static func isLeftoverTemporary(_ path: String, keyDirectory: String) -> Bool {
        // A save links its file to this one name only: a second name shows someone made it.
        guard let facts = POSIX.lstatFacts(path), facts.kind == .regular, facts.links == 1,
            case .valid? = try? CheckpointStore(path: path, keyDirectory: keyDirectory).read()
        else { return false }
        return true
    }

    /// The first bytes of the regular file at `path`, as many as the longest opening; nil
    /// when it is not a regular file or cannot be read.
    private static func openingBytes(of path: String) -> Data? {
        guard POSIX.lstatFacts(path)?.kind == .regular,
            let fd = try? POSIX.openRegular(path, access: O_RDONLY, operation: "open checkpoint")
        else { return nil }
        defer { close(fd) }
        var head = [UInt8](repeating: 0, count: openings.map(\.count).max() ?? 0)
        guard let n = try? head.withUnsafeMutableBytes({ try POSIX.read(fd, into: $0, path: path) }) else { return nil }
        return Data(head.prefix(n))
    }
}
