#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Sluice

// The executable is thin: parse arguments, wire signals and progress, map errors to
// exit codes. Everything else is the Sluice library.

signal(SIGPIPE, SIG_IGN)

/// Standard descriptors the caller closed (`<&-`, `>&-`, `2>&-`). Each is given /dev/null, so
/// no file opened later takes its number: the lock file was read as `stdin` (exit 0 with an
/// empty output), and messages for stderr would land in whatever file got descriptor 2.
/// A pipeline that reads or writes a closed one is refused below.
let closedStandardDescriptors: Set<Int32> = {
    var closed: Set<Int32> = []
    for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
        let placeholder = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY)
        if placeholder >= 0 && placeholder != fd {
            dup2(placeholder, fd)
            close(placeholder)
        }
        closed.insert(fd)
    }
    return closed
}()

func fail(_ error: SluiceError) -> Never {
    // Nothing has run yet: no checkpoint, no output to speak of.
    let line = Advice(writesCheckpoints: false, checkpointLeft: false, toStdout: false, input: "").line(for: error)
    StandardError.write("sluice: \(DisplayText.escaped(line))\n")
    exit(error.exitCode)
}

// CommandLine.arguments repairs bytes that are not UTF-8 with U+FFFD: `file caf\xE9` wrote
// `caf\u{FFFD}` and `read caf\xE9` read it, names the user never gave. Refused instead.
for index in 1..<Int(CommandLine.argc) {
    guard let raw = CommandLine.unsafeArgv[index], String(validatingCString: raw) == nil else { continue }
    fail(
        .usage(
            "argument \(index) is not UTF-8 text, so a name in it cannot be used as given (sluice reads specs and paths as UTF-8); rename the file or reach it through a symlink with a UTF-8 name"
        ))
}

let arguments: Arguments
do {
    arguments = try Arguments.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    fail(error)
}

switch arguments.command {
case .help:
    print(HelpText.usage)
case .manpage:
    print(HelpText.manPage, terminator: "")
case .completions(let shell):
    print(Completions.script(for: shell) ?? "", terminator: "")
case .version:
    print("sluice \(Sluice.version) (checkpoint format \(Checkpoint.currentVersion))")
    for library in Sluice.libraries { print("  \(library.name) \(library.version)") }
case .inspect(let path, let json):
    do {
        print(try CheckpointInspector(path: path).render(json: json))
    } catch SluiceError.checkpointRefused(let path, let reason) {
        // Nothing is being run, so no advice about --restart.
        StandardError.write("sluice: \(DisplayText.escaped(path)) cannot be read as a checkpoint: \(reason)\n")
        exit(2)
    } catch SluiceError.notACheckpoint(let path) {
        // Nothing is being run: no advice about --checkpoint, an option of runs.
        StandardError.write("sluice: cannot inspect \(DisplayText.escaped(path)): it is not a sluice checkpoint\n")
        exit(2)
    } catch let error as SluiceError {
        fail(error)
    }
case .run(let text, let specFile):
    let spec: PipelineSpec
    do {
        spec = try PipelineSpec(parsing: text)
    } catch {
        let location = specFile.map { "\($0): " } ?? ""
        fail(.usage("\(location)\(error)"))
    }
    if closedStandardDescriptors.contains(0), spec.stages.first?.name == "stdin" {
        fail(.usage("standard input is closed, and the pipeline reads it with 'stdin'"))
    }
    if let specFile, spec.stages.first?.name == "stdin", Arguments.isStandardInput(specFile) {
        // Reading the spec consumed standard input: the stage would get nothing, a silent empty stream.
        fail(
            .usage(
                "the spec was read from standard input (-f \(DisplayText.escaped(specFile))), so 'stdin' would read nothing; give the spec as an argument or in a file"
            ))
    }
    if closedStandardDescriptors.contains(1), spec.stages.last?.name == "stdout" {
        fail(.usage("standard output is closed, and the pipeline writes it with 'stdout'"))
    }
    exit(Runner(spec: spec, arguments: arguments).run())
}
