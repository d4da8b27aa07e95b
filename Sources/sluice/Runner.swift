import Foundation
import Sluice

/// Runs one pipeline for the CLI: signals, progress rendering, messages, exit status.
struct Runner {
    let spec: PipelineSpec
    let arguments: Arguments

    func run() -> Int32 {
        // Block the signals before any thread exists, so only the watcher receives them.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)

        let renderer = ProgressRenderer.make(style: arguments.progress, quiet: arguments.quiet)
        var options = arguments.options
        options.progress = { event in renderer.handle(event) }
        let pipeline = Pipeline(spec: spec, options: options)
        let resumable = pipeline.writesCheckpoints
        SignalWatcher.start(signals: signals) {
            pipeline.cancel()
            // Nothing to save without a checkpoint, and a read from stdin may block for
            // good: give the run a moment to stop cleanly, then leave.
            guard !resumable else { return }
            usleep(500_000)
            let kept = pipeline.checkpointPath.map { FileManager.default.fileExists(atPath: $0) } ?? false
            if !kept { pipeline.output?.discardPartial() }
            StandardError.write("sluice: interrupted\n")
            _exit(130)
        }

        do {
            try pipeline.run()
            renderer.finish()
            return 0
        } catch let error as SluiceError {
            renderer.finish()
            if error == .cancelled && !pipeline.writesCheckpoints {
                say("interrupted; this pipeline writes no checkpoint (stdin source, stdout without --checkpoint, or --checkpoint-interval 0), so a rerun starts from zero")
            } else if error.discardsPartialOutput {
                // Name the input that was bad; stdout cannot take back what it already got.
                var message = "\(error)"
                if pipeline.output == nil {
                    message = message.replacingOccurrences(of: "nothing was written", with: "the bytes already written to stdout are not valid")
                }
                say((spec.stages.first?.argument.map { "\(DisplayText.redactedURL($0)): " } ?? "stdin: ") + message)
            } else if !pipeline.writesCheckpoints {
                // Nothing was saved: a rerun starts over rather than resuming.
                say("\(error)".replacingOccurrences(of: "rerun the same command to resume", with: "rerun the same command to start over"))
            } else if error != .cancelled, !(pipeline.checkpointPath.map(FileManager.default.fileExists(atPath:)) ?? false) {
                // The run left nothing behind (it failed before its first byte): there is
                // nothing to resume, only the cause to fix.
                say("\(error)".replacingOccurrences(of: "; [^;]*rerun the same command to resume$", with: "; nothing was left on disk: fix that and run the command again",
                                                    options: .regularExpression))
            } else {
                say("\(error)")
            }
            return error.exitCode
        } catch {
            renderer.finish()
            say("\(error)")
            return 1
        }
    }

    private func say(_ line: String) {
        StandardError.write("sluice: \(DisplayText.escaped(line))\n")
    }
}

/// Waits for SIGINT/SIGTERM on its own thread: the first asks the run to stop at a
/// checkpoint, a second one ends the process at once.
enum SignalWatcher {
    static func start(signals: sigset_t, onFirst: @escaping @Sendable () -> Void) {
        let thread = Thread {
            var set = signals
            var received: Int32 = 0
            var count = 0
            while sigwait(&set, &received) == 0 {
                count += 1
                if count == 1 { onFirst() } else { _exit(130) }
            }
        }
        thread.name = "sluice.signals"
        thread.start()
    }
}
