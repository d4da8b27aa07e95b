import Foundation
import Sluice

// The executable is thin: parse arguments, wire signals and progress, map errors to
// exit codes. Everything else is the Sluice library.

signal(SIGPIPE, SIG_IGN)

func fail(_ error: SluiceError) -> Never {
    // Nothing has run yet: no checkpoint, no output to speak of.
    let line = Advice(writesCheckpoints: false, checkpointLeft: false, toStdout: false, input: "").line(for: error)
    StandardError.write("sluice: \(DisplayText.escaped(line))\n")
    exit(error.exitCode)
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
    exit(Runner(spec: spec, arguments: arguments).run())
}
