#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Sluice

/// Every command-line option, once: how it is written, what it means, and what it does to
/// the parsed arguments. `--help`, the man page and the shell completions are printed from
/// this table, so they cannot drift from what the parser accepts.
struct CommandOption: Sendable {
    /// `-f`, `--spec-file`: short name first when there is one.
    let names: [String]
    /// The value's placeholder (`FILE`, `SIZE`), or nil for a flag.
    let value: String?
    /// What it means, in one or two sentences (the man page prints it whole, `--help` too).
    let help: String
    let apply: @Sendable (inout Arguments, String) throws(SluiceError) -> Void

    init(
        _ names: [String], _ value: String? = nil, _ help: String,
        apply: @escaping @Sendable (inout Arguments, String) throws(SluiceError) -> Void
    ) {
        self.names = names
        self.value = value
        self.help = help
        self.apply = apply
    }

    /// `-f, --spec-file FILE`
    var synopsis: String {
        names.joined(separator: ", ") + (value.map { " " + $0 } ?? "")
    }
}

extension CommandOption {
    static let all: [CommandOption] = [
        CommandOption(["-f", "--spec-file"], "FILE", "read the spec from FILE ('#' comments, newlines allowed; /dev/stdin reads standard input)") { args, v in
            args.specFile = v
        },
        CommandOption(
            ["--checkpoint"], "PATH", "where the checkpoint lives (default PATH.sluice beside a file sink's PATH; required to make a stdout sink resumable)"
        ) { args, v in
            args.options.checkpointPath = v
        },
        CommandOption(
            ["--checkpoint-interval"], "SIZE",
            "source bytes between checkpoints, e.g. 8MiB (the default), 512KiB, 1G; 0 writes none. After a checkpoint holding a large unxz/unzstd window the gap may be longer, so storing windows stays ~3% of the work"
        ) {
            args, v throws(SluiceError) in
            args.options.checkpointInterval = try Arguments.parseSize(v, option: "--checkpoint-interval")
        },
        CommandOption(["--restart"], nil, "discard an existing checkpoint and the partial output, and start from zero") { args, _ in
            args.options.restart = true
        },
        CommandOption(["--retries"], "N", "transient transfer failures retried in a row (default 5); an attempt that moved data resets the count") {
            args, v throws(SluiceError) in
            guard v.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int(v) else {
                throw .usage("--retries takes a whole number ≥ 0, not '\(v)'")
            }
            args.options.http.retries = n
        },
        CommandOption(["--stall-timeout"], "SECONDS", "an attempt that receives nothing for this long is aborted and retried (default 30)") {
            args, v throws(SluiceError) in
            args.options.http.stallTimeout = try Arguments.seconds(v, option: "--stall-timeout")
        },
        CommandOption(
            ["--speed-limit"], "BYTES/S",
            "an attempt averaging less than this over --speed-time is aborted and retried, e.g. 10KiB; slow attempts count against --retries (default 0: off)"
        ) { args, v throws(SluiceError) in
            args.options.http.speedLimit = try Arguments.parseSize(v, option: "--speed-limit")
        },
        CommandOption(["--speed-time"], "SECONDS", "the window --speed-limit is measured over (default 30)") { args, v throws(SluiceError) in
            args.options.http.speedTime = try Arguments.seconds(v, option: "--speed-time")
        },
        CommandOption(
            ["--max-time"], "SECONDS", "the whole fetch, retries included, may take this long; then exit 3 with the checkpoint kept (default: no limit)"
        ) { args, v throws(SluiceError) in
            args.options.http.maxTime = try Arguments.seconds(v, option: "--max-time")
        },
        CommandOption(
            ["--connections"], "N",
            "ranged connections for each fetch, 1-32 (default: 1, and 4 once the network proves slower than the pipeline, if the server answers ranges and 64 MiB remain); a fetch's connections=N wins"
        ) { args, v throws(SluiceError) in
            guard v.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int(v), (1...32).contains(n) else {
                throw .usage("--connections takes a whole number from 1 to 32, not '\(v)'")
            }
            args.options.http.connections = n
        },
        CommandOption(["-H", "--header"], "'NAME: VALUE'", "an extra request header (repeatable); never written to a checkpoint or printed") {
            args, v throws(SluiceError) in
            guard let colon = v.firstIndex(of: ":"), colon != v.startIndex,
                !v[..<colon].contains(where: { $0 == " " || $0 == "\t" }),
                !v.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F })
            else {
                throw .usage("-H takes 'Name: value' on one line; the value given is not of that form (not shown: it may be a secret)")
            }
            args.options.http.headers.append(v)
        },
        CommandOption(["--proxy"], "URL", "send every request through this proxy (default: the http_proxy, https_proxy and all_proxy environment variables)") {
            args, v in
            args.options.http.proxy = v
        },
        CommandOption(["--noproxy"], "HOSTS", "comma-separated hosts reached without the proxy, * for all (default: no_proxy)") { args, v in
            args.options.http.noProxy = v
        },
        CommandOption(["--netrc"], nil, "credentials for the host from ~/.netrc (never printed or checkpointed)") { args, _ in
            args.options.http.netrc = true
        },
        CommandOption(["--netrc-file"], "FILE", "credentials for the host from FILE instead of ~/.netrc") { args, v throws(SluiceError) in
            guard FileManager.default.isReadableFile(atPath: v) else { throw .usage("--netrc-file: cannot read '\(v)'") }
            args.options.http.netrcFile = v
        },
        CommandOption(
            ["--cacert"], "FILE",
            "trust the CA certificates in FILE (PEM; default: CURL_CA_BUNDLE, else SSL_CERT_FILE, plus the directory SSL_CERT_DIR, else the system store)"
        ) { args, v throws(SluiceError) in
            guard FileManager.default.isReadableFile(atPath: v) else { throw .usage("--cacert: cannot read '\(v)'") }
            args.options.http.caCertificate = v
        },
        CommandOption(["-k", "--insecure"], nil, "do not verify TLS certificates (prints a warning)") { args, _ in
            args.options.http.insecure = true
        },
        CommandOption(["--engine"], "zlib|isal", "the inflate engine for gunzip (default isal, about twice as fast)") { args, v throws(SluiceError) in
            guard let engine = InflateEngineKind(rawValue: v) else { throw .usage("--engine takes zlib or isal, not '\(v)'") }
            args.options.engine = engine
        },
        CommandOption(["--progress"], "auto|bar|json|none", "progress on stderr (default auto: a bar when stderr is a terminal)") {
            args, v throws(SluiceError) in
            guard let mode = ProgressStyle(rawValue: v) else { throw .usage("--progress takes auto, bar, json or none, not '\(v)'") }
            args.progress = mode
        },
        CommandOption(["-q", "--quiet"], nil, "nothing on stderr but errors") { args, _ in
            args.quiet = true
        },
        CommandOption(["--json"], nil, "with inspect: print the checkpoint as JSON") { args, _ in
            args.json = true
        },
        CommandOption(["-h", "--help"], nil, "print this help") { args, _ in
            args.requested = .help
        },
        CommandOption(["-V", "--version"], nil, "print the version, the checkpoint format and the C libraries' versions") { args, _ in
            args.requested = .version
        },
        CommandOption(["--manpage"], nil, "print this manual as a man page (troff)") { args, _ in
            args.requested = .manpage
        },
        CommandOption(["--completions"], "bash|zsh", "print a completion script for the shell") { args, v throws(SluiceError) in
            guard Completions.script(for: v) != nil else { throw .usage("--completions takes bash or zsh, not '\(v)'") }
            args.requested = .completions(shell: v)
        },
    ]

    static func named(_ name: String) -> CommandOption? {
        all.first { $0.names.contains(name) }
    }
}
