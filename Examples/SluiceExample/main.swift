import Foundation
import Sluice

// Fetch a gzip file, verify it, decompress it — resumably, with progress — from Swift.
// Usage: SluiceExample URL SHA256 OUTPUT
let arguments = CommandLine.arguments
guard arguments.count == 4 else {
    print("usage: SluiceExample URL SHA256 OUTPUT")
    exit(2)
}

var options = PipelineOptions()
options.checkpointInterval = 64 << 10  // a checkpoint every 64 KiB of source
options.progress = { event in  // called from the pipeline's threads
    switch event {
    case .resume(let offset): print("resuming at source byte \(offset)")
    case .checkpoint(let offset, _): print("checkpoint at source byte \(offset)")
    case .done(_, let output, _): print("done: \(output) bytes written")
    default: break
    }
}

// Stages are values; a spec string works too: try Pipeline("fetch URL | … | file OUT").
let spec = try PipelineSpec(stages: [
    .fetch(url: arguments[1]),
    .verify(sha256: arguments[2]),
    .gunzip,
    .file(path: arguments[3]),
])
let pipeline = Pipeline(spec: spec, options: options)

do {
    let report = try pipeline.run()  // pipeline.cancel() from another thread stops it at a checkpoint
    print(report.resumedAt == nil ? "ran from the start" : "resumed from a checkpoint")
} catch {  // run() throws only SluiceError: causes to switch on
    switch error {
    case .checksumMismatch(let expected, let actual):
        print("corrupt download: expected \(expected), got \(actual); nothing was written")
    case .transfer(_, .http(status: 404, _, _), _):
        print("not on the server")
    default:
        print("failed: \(error) (exit status \(error.exitCode))")
    }
    exit(error.exitCode)
}
