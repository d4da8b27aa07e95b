#if canImport(Glibc)
import Glibc
#endif

/// Every name a run reads or writes, checked before anything is touched: what may stand
/// at the checkpoint's names and the locks (a regular file or nothing: never a link, FIFO,
/// device or directory — the sink's `OutputTarget.preflight` judges its own names), and
/// that no two of them are the same file under different names (`--checkpoint out`,
/// `./out.sluice-part`, a hard link, a linked directory, `stdout >> checkpoint`).
/// Refusals are exit 2 and leave everything as it was.
struct RunPaths {
    /// What a name is to the run.
    enum Role: Equatable, CaseIterable {
        case output, partial, outputLock, checkpoint, checkpointTemporary, checkpointLock, input, stdout

        var title: String {
            switch self {
            case .output: return "the output"
            case .partial: return "the partial output"
            case .outputLock, .checkpointLock: return "a lock file"
            case .checkpoint: return "the checkpoint"
            case .checkpointTemporary: return "the checkpoint's temporary file"
            case .input: return "the input"
            case .stdout: return "stdout"
            }
        }

        var isLock: Bool { self == .outputLock || self == .checkpointLock }
    }

    struct Name: Equatable {
        var role: Role
        var path: String
    }

    /// How the check sees the file system; the real one by default, a table in tests.
    struct Probe: Sendable {
        /// The name itself (a link is reported as a link).
        var lstat: @Sendable (String) -> FileFacts?
        /// What the name leads to after following links.
        var stat: @Sendable (String) -> FileFacts?
        /// The name with its directory resolved (links, `.`, `..`), for comparing names of
        /// files that do not exist yet.
        var canonical: @Sendable (String) -> String
        /// Whether a regular file at the checkpoint's temporary name is one a save of ours
        /// left behind (so it may be replaced).
        var isLeftoverTemporary: @Sendable (String) -> Bool = { _ in true }
        /// Which process holds the lock file at a name (nil: none, or no such file).
        var lockHolder: @Sendable (String) -> LockHolder? = { _ in nil }

        /// The file system as it is, with checkpoints sealed by the key in `CheckpointKey.directory()`.
        static var live: Probe { live(keyDirectory: CheckpointKey.directory()) }

        static func live(keyDirectory: String) -> Probe {
            Probe(
                lstat: { POSIX.lstatFacts($0) }, stat: { POSIX.statFacts($0) },
                canonical: { RunPaths.canonicalName($0) },
                isLeftoverTemporary: { CheckpointStore.isLeftoverTemporary($0, keyDirectory: keyDirectory) },
                lockHolder: { LockHolder.of($0) })
        }
    }

    let names: [Name]
    /// stdout, when the sink is `stdout` and it is a regular file.
    let stdout: FileFacts?

    init(output: OutputTarget?, checkpoint: String?, input: String?, stdout: FileFacts?) {
        var names: [Name] = []
        if let output {
            names.append(Name(role: .output, path: output.path))
            names.append(Name(role: .partial, path: output.partialPath))
            names.append(Name(role: .outputLock, path: output.lockPath))
        }
        if let checkpoint {
            names.append(Name(role: .checkpoint, path: checkpoint))
            names.append(Name(role: .checkpointTemporary, path: CheckpointStore.temporaryPath(for: checkpoint)))
            names.append(Name(role: .checkpointLock, path: checkpoint + ".lock"))
        }
        if let input { names.append(Name(role: .input, path: input)) }
        self.names = names
        self.stdout = stdout
    }

    /// The first reason to refuse the run, or nil.
    func problem(probe: Probe = .live) -> SluiceError? {
        for name in names {
            let ownName = name.role == .output ? Self.ownNameProblem(name, probe: probe) : nil
            if let refusal = Self.directoryNameProblem(name) ?? ownName ?? Self.partialTreeProblem(name, probe: probe)
                ?? Self.lengthProblem(name)
                ?? Self.kindProblem(name, probe: probe)
            {
                return refusal
            }
        }
        // Two roles, one file: compare resolved names (for files still to be created) and
        // device+inode (for files that exist, whatever they are called).
        var seen: [(name: Name, canonical: String, identity: FileIdentity?)] = []
        for name in names {
            let canonical = probe.canonical(name.path)
            let identity = probe.stat(name.path)?.identity
            for earlier in seen where Self.mayNotShare(earlier.name.role, name.role) {
                if earlier.canonical == canonical || (identity != nil && earlier.identity == identity) {
                    return Self.aliasRefusal(name, isAlso: earlier.name)
                }
            }
            seen.append((name, canonical, identity))
        }
        // After the aliases: a checkpoint named as this run's own partial output is that.
        for name in names where name.role == .checkpoint {
            if let refusal = Self.ownNameProblem(name, probe: probe) { return refusal }
        }
        if let stdout, stdout.kind == .regular {
            for entry in seen where entry.name.role != .output && entry.identity == stdout.identity {
                return .unsafePath(path: "stdout", reason: "it is \(entry.name.role.title) (\(entry.name.path)) too")
            }
        }
        return nil
    }

    /// `file out/` or `--checkpoint c/` names a directory: sluice would make `out/.sluice.lock`
    /// inside it (exit 6, "cannot create lock file", when it does not exist). Say what is wrong.
    static func directoryNameProblem(_ name: Name) -> SluiceError? {
        guard name.role == .output || name.role == .checkpoint, name.path.hasSuffix("/") else { return nil }
        return .usage("\(name.role.title) '\(name.path)' ends in '/', so it names a directory; name a file")
    }

    /// The names sluice gives the files of a job writing `X`, by the suffix added to X.
    static let ownSuffixes: [(suffix: String, what: String)] = [
        (".sluice-part", "the partial output"), (".sluice.lock", "the lock file"),
        (".sluice.tmp", "the checkpoint's temporary file"), (".sluice", "the checkpoint"),
    ]

    /// An output named like another job's own files (`file o.sluice-part`) would replace that
    /// job's partial output, checkpoint or lock at its final rename, whether the job is running
    /// or waits to be resumed (and a kill leaves no lock to show which). So such a name is
    /// refused always; a running job's lock, when held, is named in the message. A checkpoint
    /// named so (`--checkpoint o.sluice.tmp`) would be taken for that job's leftover and
    /// removed; only `o.sluice`, the checkpoint a job writing `o` uses anyway, is let through.
    static func ownNameProblem(_ name: Name, probe: Probe) -> SluiceError? {
        guard name.role == .output || name.role == .checkpoint,
            let own = ownSuffixes.first(where: { name.path.hasSuffix($0.suffix) && name.path.count > $0.suffix.count }),
            name.role == .output || own.suffix != ".sluice"
        else { return nil }
        let owner = String(name.path.dropLast(own.suffix.count))
        guard !owner.hasSuffix("/") else { return nil }
        let running = runningJob(writing: owner, probe: probe)
        return .unsafePath(
            path: name.path,
            reason:
                "the name ends in '\(own.suffix)', so it is \(own.what) of a sluice job writing '\(owner)'\(running);"
                + " sluice never writes \(name.role == .output ? "an output" : "a checkpoint") over its own files: choose another name")
    }

    /// An output or checkpoint inside another job's partial tree (`file d.sluice-part/x`,
    /// `--checkpoint d.sluice-part/c`) is that untar's: its final rename would take the file
    /// into `d`, its resume refuses the tree for a name no member made, and a start from
    /// zero removes the tree with it. Refused always, as a name ending in `.sluice-part` is.
    static func partialTreeProblem(_ name: Name, probe: Probe) -> SluiceError? {
        guard name.role == .output || name.role == .checkpoint else { return nil }
        let suffix = ".sluice-part"
        // Resolved, so `link/x` with `link` leading into such a tree is seen too.
        let parts = probe.canonical(name.path).split(separator: "/", omittingEmptySubsequences: false)
        guard let end = parts.indices.dropLast().first(where: { parts[$0].hasSuffix(suffix) && parts[$0].count > suffix.count })
        else { return nil }
        let tree = parts[...end].joined(separator: "/")
        let owner = String(tree.dropLast(suffix.count))
        return .unsafePath(
            path: name.path,
            reason:
                "it is inside \(tree), the partial tree of a sluice job writing '\(owner)'\(runningJob(writing: owner, probe: probe));"
                + " that job would take it into '\(owner)' or remove it with its tree: choose another place")
    }

    /// ": a running sluice job (pid N) holds X.sluice.lock now" when one writing `owner` runs.
    private static func runningJob(writing owner: String, probe: Probe) -> String {
        let lock = owner + ".sluice.lock"
        return probe.lockHolder(lock).map { holder in
            ": a running sluice job\(holder.pid.map { " (pid \($0))" } ?? "") holds \(lock) now"
        } ?? ""
    }

    /// A name sluice makes by adding a suffix can be too long for the file system even when
    /// the user's own name is not: say so before anything is touched, not as an I/O error later.
    static func lengthProblem(_ name: Name) -> SluiceError? {
        guard name.role != .input, name.role != .stdout else { return nil }
        let leaf = name.path.split(separator: "/").last.map(String.init) ?? name.path
        let limit = Int(NAME_MAX)
        guard leaf.utf8.count > limit else { return nil }
        let advice: String
        switch name.role {
        case .output: advice = "choose a shorter name"
        case .partial, .outputLock: advice = "sluice adds a suffix to the output's name for it; choose a shorter output name"
        default: advice = "sluice adds a suffix to the checkpoint's name for it; choose a shorter --checkpoint"
        }
        return .usage(
            "the name of \(name.role.title) would be \(Counted.bytes(leaf.utf8.count)), over the \(Counted.bytes(limit)) a file name may have (\(name.path)): \(advice)"
        )
    }

    /// What may stand at one name before the run.
    static func kindProblem(_ name: Name, probe: Probe) -> SluiceError? {
        switch name.role {
        case .input, .stdout, .output, .partial:
            return nil  // the source and the sink judge their own names
        case .outputLock, .checkpoint, .checkpointLock:
            return writtenFileProblem(name.path, probe: probe)
        case .checkpointTemporary:
            if let problem = writtenFileProblem(name.path, probe: probe) { return problem }
            guard probe.lstat(name.path) != nil, !probe.isLeftoverTemporary(name.path) else { return nil }
            return .unsafePath(
                path: name.path,
                reason:
                    "sluice writes its checkpoint there first, and the file there is not one it can show it left (sluice links"
                    + " a checkpoint there only whole, sealed with this user's key and under no other name, and this file is not one);"
                    + " sluice leaves it:"
                    + " move it away or name another --checkpoint"
            )
        }
    }

    /// A name sluice creates or replaces: a regular file or nothing may stand there.
    static func writtenFileProblem(_ path: String, probe: Probe = .live) -> SluiceError? {
        guard let here = probe.lstat(path), here.kind != .regular else { return nil }
        return .unsafePath(path: path, reason: here.kind.refusal)
    }

    /// A file output: a link there is replaced, not followed, by the final rename — unless
    /// it leads to something that is not a file, which is refused like the thing itself.
    static func fileOutputProblem(_ path: String, probe: Probe = .live) -> SluiceError? {
        guard let here = probe.lstat(path) else { return nil }
        let target = here.kind == .symlink ? probe.stat(path) : here
        guard let target, target.kind != .regular else { return nil }
        return .unsafePath(path: path, reason: target.kind.refusal)
    }

    /// Every pair of roles must be different files, except the output lock and the
    /// checkpoint's lock (the default checkpoint shares it) and reading the file the
    /// output replaces (it is read before the final rename).
    static func mayNotShare(_ a: Role, _ b: Role) -> Bool {
        if a == b { return false }
        if a.isLock && b.isLock { return false }
        if Set([a, b]) == [.input, .output] { return false }
        return true
    }

    private static func aliasRefusal(_ name: Name, isAlso other: Name) -> SluiceError {
        let same = name.path == other.path ? "" : " (\(other.path))"
        return .unsafePath(path: name.path, reason: "as \(name.role.title) it would be the same file as \(other.role.title)\(same)")
    }

    /// `path` with its directory resolved, so `./x`, `a/../x` and `linkdir/x` compare
    /// equal to `x`; names whose directory does not resolve are compared as written.
    static func canonicalName(_ path: String) -> String {
        let last = path.lastIndex(of: "/").map { path[path.index(after: $0)...] } ?? path[...]
        if last.isEmpty || last == "." || last == ".." { return resolved(path) ?? path }
        guard let base = resolved(POSIX.parentDirectory(of: path)) else { return path }
        return (base == "/" ? "" : base) + "/" + last
    }

    private static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }
}
