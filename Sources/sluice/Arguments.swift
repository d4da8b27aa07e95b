import Foundation
import Sluice

/// The command line, parsed. Only the CLI's own concerns live here; everything a
/// library user needs is in `Sluice`.
struct Arguments {
    enum Command {
        case run(specText: String, specFile: String?)
        case inspect(path: String, json: Bool)
        case help
        case version
    }

    var command: Command = .help
    var options = PipelineOptions()
    var progress: ProgressStyle = .auto
    var quiet = false

    static func parse(_ argv: [String]) throws(SluiceError) -> Arguments {
        var args = Arguments()
        var rest = argv[...]
        var positional: [String] = []
        var specFile: String?
        var json = false

        func value(for option: String) throws(SluiceError) -> String {
            guard let v = rest.popFirst() else { throw .usage("option \(option) needs a value") }
            return v
        }
        while let arg = rest.popFirst() {
            // --name=value is accepted as well as --name value.
            var name = arg
            if arg.hasPrefix("--"), let eq = arg.firstIndex(of: "=") {
                name = String(arg[..<eq])
                rest.insert(String(arg[arg.index(after: eq)...]), at: rest.startIndex)
            }
            switch name {
            case "-h", "--help": return Arguments(command: .help)
            case "-V", "--version": return Arguments(command: .version)
            case "-f", "--spec-file": specFile = try value(for: name)
            case "--checkpoint": args.options.checkpointPath = try value(for: name)
            case "--checkpoint-interval": args.options.checkpointInterval = try parseSize(try value(for: name), option: name)
            case "--restart": args.options.restart = true
            case "--retries":
                let v = try value(for: name)
                guard let n = Int(v), n >= 0 else { throw .usage("--retries takes a whole number ≥ 0, not '\(v)'") }
                args.options.http.retries = n
            case "--stall-timeout":
                let v = try value(for: name)
                guard let s = Double(v), s > 0, s.isFinite else { throw .usage("--stall-timeout takes a number of seconds > 0, not '\(v)'") }
                args.options.http.stallTimeout = s
            case "-H", "--header":
                let v = try value(for: name)
                guard let colon = v.firstIndex(of: ":"), colon != v.startIndex,
                      !v[..<colon].contains(where: { $0 == " " || $0 == "\t" }) else {
                    throw .usage("-H takes 'Name: value', not '\(v)'")
                }
                args.options.http.headers.append(v)
            case "--cacert":
                let v = try value(for: name)
                guard FileManager.default.isReadableFile(atPath: v) else { throw .usage("--cacert: cannot read '\(v)'") }
                args.options.http.caCertificate = v
            case "--insecure", "-k": args.options.http.insecure = true
            case "--engine":
                let v = try value(for: name)
                guard let engine = InflateEngineKind(rawValue: v) else { throw .usage("--engine takes zlib or isal, not '\(v)'") }
                args.options.engine = engine
            case "--progress":
                let v = try value(for: name)
                guard let mode = ProgressStyle(rawValue: v) else { throw .usage("--progress takes auto, bar, json or none, not '\(v)'") }
                args.progress = mode
            case "-q", "--quiet": args.quiet = true
            case "--json": json = true
            case "--":
                positional.append(contentsOf: rest)
                rest = []
            default:
                if arg.hasPrefix("-") && arg.count > 1 { throw .usage("unknown option '\(arg)'") }
                positional.append(arg)
            }
        }

        if positional.first == "inspect" {
            guard positional.count == 2 else { throw .usage("inspect takes one checkpoint path: sluice inspect CHECKPOINT [--json]") }
            args.command = .inspect(path: positional[1], json: json)
            return args
        }
        if json { throw .usage("--json belongs to 'sluice inspect'") }
        if let specFile {
            guard positional.isEmpty else { throw .usage("give the spec either with -f or as an argument, not both") }
            // FileHandle rather than FileManager: -f /dev/stdin and other pipes work too.
            guard let handle = FileHandle(forReadingAtPath: specFile),
                  let text = String(data: handle.readDataToEndOfFile(), encoding: .utf8) else {
                throw .usage("cannot read spec file '\(specFile)'")
            }
            args.command = .run(specText: text, specFile: specFile)
        } else {
            guard positional.count == 1 else {
                if positional.isEmpty { throw .usage("no pipeline given; e.g. sluice 'read in.gz | gunzip | file out'") }
                throw .usage("give the pipeline as one quoted argument: sluice '\(positional.joined(separator: " "))'")
            }
            args.command = .run(specText: positional[0], specFile: nil)
        }
        return args
    }

    /// `8MiB`, `512k`, `1G`, `4096`, `0` (see `ByteSize`).
    static func parseSize(_ text: String, option: String) throws(SluiceError) -> UInt64 {
        if let size = ByteSize.parse(text) { return size }
        throw .usage("\(option) takes a size such as 8MiB, 512KiB or 0, not '\(text)'")
    }
}
