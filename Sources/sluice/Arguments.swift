#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Sluice

/// The command line, parsed. Only the CLI's own concerns live here; everything a
/// library user needs is in `Sluice`.
struct Arguments {
    enum Command {
        case run(specText: String, specFile: String?)
        case inspect(path: String, json: Bool)
        case help
        case version
        case manpage
        case completions(shell: String)
    }

    var command: Command = .help
    /// `--help` or `--version`: answered at once, whatever else the line says.
    var requested: Command?
    var options = PipelineOptions()
    var progress: ProgressStyle = .auto
    var quiet = false
    var specFile: String?
    var json = false

    /// `environment`: where `CURL_CA_BUNDLE`, `SSL_CERT_FILE` and `SSL_CERT_DIR` are read.
    static func parse(
        _ argv: [String],
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(SluiceError) -> Arguments {
        var args = Arguments()
        var rest = argv[...]
        var positional: [String] = []

        while let arg = rest.popFirst() {
            // Short flags combine (-qk); one that takes a value may come last (-qf FILE).
            if let letters = Self.shortCluster(arg) {
                rest.insert(contentsOf: letters, at: rest.startIndex)
                continue
            }
            if arg == "--" {
                positional.append(contentsOf: rest)
                break
            }
            // --name=value is accepted as well as --name value.
            var name = arg
            var attached: String?
            if arg.hasPrefix("--"), let eq = arg.firstIndex(of: "=") {
                name = String(arg[..<eq])
                attached = String(arg[arg.index(after: eq)...])
            }
            guard let option = CommandOption.named(name) else {
                if arg.hasPrefix("-") && arg.count > 1 {
                    let guess = TypoSuggestion.closest(to: name, among: CommandOption.all.flatMap(\.names).filter { $0.hasPrefix("--") })
                    throw .usage("unknown option '\(name)'" + (guess.map { "; did you mean \($0)?" } ?? ""))
                }
                positional.append(arg)
                continue
            }
            var value = ""
            if option.value != nil {
                guard let v = attached ?? rest.popFirst() else { throw .usage("option \(name) needs a value") }
                value = v
            } else if attached != nil {
                throw .usage("option \(name) takes no value")
            }
            try option.apply(&args, value)
            if let requested = args.requested { return Arguments(command: requested) }
        }

        // As the curl tool does: a CA bundle or directory from the environment unless --cacert names one.
        if args.options.http.caCertificate == nil {
            args.options.http.caCertificate = [environment["CURL_CA_BUNDLE"], environment["SSL_CERT_FILE"]]
                .compactMap { $0 }.first { !$0.isEmpty }
        }
        if let directory = environment["SSL_CERT_DIR"], !directory.isEmpty { args.options.http.caDirectory = directory }

        if positional.first == "inspect" {
            guard positional.count == 2 else { throw .usage("inspect takes one checkpoint path: sluice inspect CHECKPOINT [--json]") }
            args.command = .inspect(path: positional[1], json: args.json)
            return args
        }
        if args.json { throw .usage("--json belongs to 'sluice inspect'") }
        if let specFile = args.specFile {
            guard positional.isEmpty else { throw .usage("give the spec either with -f or as an argument, not both") }
            args.command = .run(specText: try readSpecFile(specFile), specFile: specFile)
        } else {
            guard positional.count == 1 else {
                if positional.isEmpty { throw .usage("no pipeline given; e.g. sluice 'read in.gz | gunzip | file out'") }
                throw .usage("give the pipeline as one quoted argument: sluice '\(positional.joined(separator: " "))'")
            }
            args.command = .run(specText: positional[0], specFile: nil)
        }
        return args
    }

    /// A spec is a few lines; anything far larger (`-f /dev/zero`) is not one.
    static let maximumSpecFileBytes = 1 << 20

    /// The text of `-f FILE`: a regular file, or a pipe (`-f /dev/stdin`, `-f <(…)`), read
    /// up to `maximumSpecFileBytes`; a directory, an unreadable file or one that is not
    /// UTF-8 is a usage error, never a trap.
    static func readSpecFile(_ path: String) throws(SluiceError) -> String {
        let shown = DisplayText.escaped(path)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .usage("cannot read spec file '\(shown)': \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) != S_IFDIR else {
            throw .usage("cannot read spec file '\(shown)': it is a directory")
        }
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw .usage("cannot read spec file '\(shown)': \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            data.append(contentsOf: chunk[0..<n])
            guard data.count <= maximumSpecFileBytes else {
                throw .usage("spec file '\(shown)' is larger than \(maximumSpecFileBytes >> 20) MiB; a spec is a few lines")
            }
        }
        guard let text = String(validating: data, as: UTF8.self) else {
            throw .usage("spec file '\(shown)' is not UTF-8 text")
        }
        // Editors that save "UTF-8 with BOM" start the file with U+FEFF: not part of the spec.
        if text.unicodeScalars.first == "\u{FEFF}" { return String(text.unicodeScalars.dropFirst()) }
        return text
    }

    /// Whether reading PATH (`/dev/stdin`, `/proc/self/fd/0`, a FIFO's name) consumed standard
    /// input: the same pipe, FIFO, socket or terminal, by device and inode. A regular file opened
    /// by name has an offset of its own, so standard input still reads it whole.
    static func isStandardInput(_ path: String) -> Bool {
        var named = stat()
        var input = stat()
        guard stat(path, &named) == 0, fstat(0, &input) == 0, (input.st_mode & S_IFMT) != S_IFREG else { return false }
        return named.st_dev == input.st_dev && named.st_ino == input.st_ino
    }

    /// The one-letter options, split by whether they take a value.
    private static let shortFlags = Set(CommandOption.all.filter { $0.value == nil }.flatMap(\.names).compactMap(letter))
    private static let shortWithValue = Set(CommandOption.all.filter { $0.value != nil }.flatMap(\.names).compactMap(letter))

    private static func letter(_ name: String) -> Character? {
        name.count == 2 && name.hasPrefix("-") ? name.last : nil
    }

    /// `-qk` → `-q -k`; nil for anything that is not a cluster of known short options.
    static func shortCluster(_ arg: String) -> [String]? {
        guard arg.count > 2, arg.hasPrefix("-"), !arg.hasPrefix("--") else { return nil }
        let letters = Array(arg.dropFirst())
        guard letters.dropLast().allSatisfy(shortFlags.contains),
            let last = letters.last, shortFlags.contains(last) || shortWithValue.contains(last)
        else { return nil }
        return letters.map { "-\($0)" }
    }

    /// A number of seconds > 0 (fractions allowed), for the time limits.
    static func seconds(_ text: String, option: String) throws(SluiceError) -> Double {
        guard let value = Double(text), value > 0, value.isFinite, value <= 1e9 else {
            throw .usage("\(option) takes a number of seconds > 0, not '\(text)'")
        }
        return value
    }

    /// `8MiB`, `512k`, `1G`, `4096`, `0` (see `ByteSize`).
    static func parseSize(_ text: String, option: String) throws(SluiceError) -> UInt64 {
        if let size = ByteSize.parse(text) { return size }
        throw .usage("\(option) takes a size such as 8MiB, 512KiB or 0, not '\(text)'")
    }
}
