#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Sluice
import Synchronization

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

        let renderer = ProgressRenderer.make(style: arguments.progress, quiet: arguments.quiet) {
            Self.readerGone($0) ? 128 + SIGPIPE : $0.exitCode
        }
        var options = arguments.options
        options.progress = { event in renderer.handle(event) }
        let pipeline = Pipeline(spec: spec, options: options)
        let watcher = SignalWatcher(signals: signals, resumable: pipeline.writesCheckpoints)
        do {
            try watcher.start { pipeline.cancel() }
        } catch {
            // Without the watcher SIGINT and SIGTERM would stay blocked: nothing could stop
            // the run, so it does not begin.
            var reason = "\(error)"
            if case .io(_, _, let code) = error { reason = String(cString: strerror(code)) }
            say("cannot start thread sluice.signals: \(reason) (too many processes or threads for this user? see ulimit -u); nothing was started")
            return error.exitCode
        }
        let ending = outcome(of: pipeline, renderer: renderer)
        watcher.exitGate()
        switch ending {
        case .status(let status, let message):
            if let message { say(message) }
            return status
        case .readerGone:
            // The reader stopped reading (`| head`): end as tools do on SIGPIPE. The
            // checkpoint already saved stays; there is nothing to say.
            SignalWatcher.dieOfSIGPIPE()
        }
    }

    private enum Ending {
        case status(Int32, message: String?)
        /// stdout is a pipe whose reader has gone.
        case readerGone
    }

    /// Runs the pipeline; how the process should end, and what to tell the user.
    private func outcome(of pipeline: Pipeline, renderer: ProgressRenderer) -> Ending {
        do {
            try pipeline.run()
            renderer.finish()
            return .status(0, message: nil)
        } catch {
            renderer.finish()
            if Self.readerGone(error) { return .readerGone }
            let advice = Advice(
                writesCheckpoints: pipeline.writesCheckpoints,
                checkpointLeft: pipeline.checkpointPath.map(FileManager.default.fileExists(atPath:)) ?? false,
                // "Already written" only when stdout got some bytes (this run or one it resumed).
                toStdout: pipeline.output == nil && pipeline.control.outputBytes > 0,
                input: spec.stages.first?.argument.map(DisplayText.redactedURL) ?? "stdin")
            let message = advice.line(for: error)
            return .status(error.exitCode, message: message)
        }
    }

    /// stdout is a pipe whose reader has gone: the run ends by SIGPIPE (141), not with exit 6.
    private static func readerGone(_ error: SluiceError) -> Bool {
        if case .io("stdout", _, EPIPE) = error { return true }
        return false
    }

    private func say(_ line: String) {
        StandardError.write("sluice: \(DisplayText.escaped(line))\n")
    }
}

/// Waits for SIGINT/SIGTERM on its own thread: the first asks the run to stop where it
/// stands (it saves a checkpoint, then exits 130 with its message); a second one ends the
/// process at once, with one line. Locks are `flock`s, so they go with the process.
final class SignalWatcher: Sendable {
    private let signals: sigset_t
    private let resumable: Bool
    /// Signals taken by the watcher so far.
    private let received = Atomic<Int>(0)
    /// Taken by whoever ends the process first: the run's own exit, or a second signal.
    private let exiting = Atomic<Bool>(false)

    init(signals: sigset_t, resumable: Bool) {
        self.signals = signals
        self.resumable = resumable
    }

    func start(onFirst: @escaping @Sendable () -> Void) throws(SluiceError) {
        try EngineThread.start("sluice.signals") { [self] in
            var set = signals
            var number: Int32 = 0
            while sigwait(&set, &number) == 0 {
                if received.add(1, ordering: .sequentiallyConsistent).newValue == 1 {
                    onFirst()
                } else if claimExit() {
                    exitAtOnce()
                }
            }
        }
    }

    /// Called by the run's thread before it says how the run ended. A second signal that is
    /// still pending (the watcher has not taken it yet) wins: the user asked twice.
    func exitGate() {
        guard claimExit() else {
            // The watcher is ending the process right now.
            while true { pause() }
        }
        var pending = sigset_t()
        sigpending(&pending)
        let waiting = (sigismember(&pending, SIGINT) == 1 ? 1 : 0) + (sigismember(&pending, SIGTERM) == 1 ? 1 : 0)
        let seen = received.load(ordering: .sequentiallyConsistent)
        if seen >= 2 || (seen >= 1 && waiting >= 1) || waiting >= 2 { exitAtOnce() }
    }

    private func claimExit() -> Bool {
        exiting.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged
    }

    private func exitAtOnce() -> Never {
        let line =
            resumable
            ? "sluice: interrupted again: stopped at once; rerun the same command to resume from the last checkpoint saved\n"
            : "sluice: interrupted again: stopped at once\n"
        line.utf8CString.withUnsafeBytes { bytes in
            _ = write(STDERR_FILENO, bytes.baseAddress, bytes.count - 1)
        }
        _exit(130)
    }

    /// Ends the process the way `cat` ends when its reader goes away: killed by SIGPIPE
    /// (a shell reports 128 + 13 = 141, and says nothing about it).
    static func dieOfSIGPIPE() -> Never {
        signal(SIGPIPE, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        raise(SIGPIPE)
        _exit(128 + SIGPIPE)
    }
}
