#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Synchronization

/// How progress appears on stderr.
public enum ProgressStyle: String, Sendable, CaseIterable {
    /// A bar when stderr is a terminal, nothing otherwise.
    case auto
    /// A one-line bar, redrawn at most 10 times a second, cleared at the end.
    case bar
    /// One JSON object per line (see README: "Progress as JSON lines").
    case json
    case none
}

/// Renders progress events to stderr as a bar or as JSON lines, and prints the
/// notices a user must see (resume, restart, retries) as `sluice:` lines.
public final class ProgressRenderer: Sendable {
    private enum Mode { case bar, json, quietBar }
    private let mode: Mode
    private let quiet: Bool
    private let exitStatus: @Sendable (SluiceError) -> Int32
    private let state = Mutex(State())
    private let started = Date()

    private struct State {
        var lastDraw = Date.distantPast
        var drawn = false
        var resumed = false
        var lastOffset: UInt64 = 0
        var total: UInt64?
        var attemptStart = Date()
        var attemptOffset: UInt64 = 0
        /// The fetch's connection count, once it has reported one.
        var connections: Int?
        /// `start` events so far: a restart from zero begins attempt 2.
        var attempts = 0
    }

    /// `quiet`: only errors (printed by the caller) reach stderr. `exitStatus`: the status the
    /// process ends with after a failure, for the JSON `error` event — `exitCode` unless the
    /// caller ends otherwise (the CLI dies of SIGPIPE when stdout's reader has gone).
    public static func make(
        style: ProgressStyle, quiet: Bool, stderrIsTerminal: Bool = isatty(STDERR_FILENO) == 1,
        exitStatus: @escaping @Sendable (SluiceError) -> Int32 = { $0.exitCode }
    ) -> ProgressRenderer {
        let mode: Mode
        switch style {
        case .json: mode = .json
        case .bar: mode = quiet ? .quietBar : .bar
        case .auto: mode = stderrIsTerminal && !quiet ? .bar : .quietBar
        case .none: mode = .quietBar
        }
        return ProgressRenderer(mode: mode, quiet: quiet, exitStatus: exitStatus)
    }

    private init(mode: Mode, quiet: Bool, exitStatus: @escaping @Sendable (SluiceError) -> Int32) {
        self.mode = mode
        self.quiet = quiet
        self.exitStatus = exitStatus
    }

    public func handle(_ event: ProgressEvent) {
        switch mode {
        case .json: emitJSON(event)
        case .bar: drawBar(event)
        case .quietBar: noticeOnly(event)
        }
    }

    /// Clears the bar, if one is drawn.
    public func finish() {
        state.withLock { s in
            if s.drawn { write("\r\u{1b}[2K") }
            s.drawn = false
        }
    }

    // MARK: notices

    private func notice(for event: ProgressEvent) -> String? {
        switch event {
        case .resume(let offset): return "resuming from a checkpoint at source byte \(offset)"
        case .notice(let text): return text
        case .restart(let reason): return reason
        case .retry(let attempt, let delay, let reason):
            return "\(reason); retry \(attempt) in \(cFormat("%.1f", delay)) s"
        default: return nil
        }
    }

    private func noticeOnly(_ event: ProgressEvent) {
        guard !quiet, let text = notice(for: event) else { return }
        write("sluice: \(DisplayText.escaped(text))\n")
    }

    // MARK: bar

    private func drawBar(_ event: ProgressEvent) {
        state.withLock { s in
            if let text = notice(for: event) {
                if s.drawn { write("\r\u{1b}[2K") }
                s.drawn = false
                write("sluice: \(DisplayText.escaped(text))\n")
            }
            switch event {
            case .start(_, let total, let resumedAt):
                s.total = total ?? s.total
                s.resumed = s.resumed || resumedAt != nil
                s.attemptStart = Date()
                s.attemptOffset = resumedAt ?? 0
                s.lastOffset = resumedAt ?? 0
            case .connections(let count):
                s.connections = count
            case .progress(let offset, let total, _):
                s.lastOffset = offset
                s.total = total ?? s.total
                let now = Date()
                guard now.timeIntervalSince(s.lastDraw) >= 0.1 else { return }
                s.lastDraw = now
                let line = Self.barLine(
                    offset: offset, total: s.total, resumed: s.resumed,
                    rate: Double(offset - min(offset, s.attemptOffset)) / max(now.timeIntervalSince(s.attemptStart), 0.001),
                    columns: Self.terminalColumns(),
                    connections: s.connections)
                write("\r\u{1b}[2K" + line)
                s.drawn = true
            case .done, .error:
                if s.drawn { write("\r\u{1b}[2K") }
                s.drawn = false
            default:
                break
            }
        }
    }

    /// The bar line, at most `columns - 1` wide (a line as wide as the terminal wraps on
    /// some terminals, and every redraw would leave a stale line behind). Parts go in order
    /// of least use when space is short: the bar shrinks, then ETA, rate, "(resumed)" and
    /// the bar itself go; the byte counts stay (cut as a last resort).
    static func barLine(
        offset: UInt64, total: UInt64?, resumed: Bool, rate: Double, columns: Int = 80,
        connections: Int? = nil
    ) -> String {
        let room = max(1, columns - 1)
        var fraction: Double?
        var counts = formatBytes(offset)
        if let total, total > 0 {
            fraction = min(1, Double(offset) / Double(total))
            counts = cFormat("%5.1f%% ", fraction! * 100) + "\(formatBytes(offset))/\(formatBytes(total))"
        }
        let hasRate = rate > 0 && rate.isFinite
        let speed = hasRate ? "\(formatRate(rate))/s" : nil
        let eta = hasRate ? total.map { "ETA \(formatDuration(Double($0 - min($0, offset)) / rate))" } : nil
        let mark = resumed ? "(resumed)" : nil
        let conns = connections.map { "×\($0) conn" }
        // From the fullest line to the barest; the first that fits is drawn.
        let variants: [(bar: Int, parts: [String?])] = [
            (24, [counts, speed, eta, conns, mark]), (10, [counts, speed, eta, conns, mark]),
            (10, [counts, speed, conns, mark]), (0, [counts, speed, conns, mark]), (0, [counts, mark]), (0, [counts]),
        ]
        for variant in variants {
            var parts = variant.parts.compactMap { $0 }
            if let fraction, variant.bar > 0 {
                let filled = Int(fraction * Double(variant.bar))
                parts.insert("[" + String(repeating: "#", count: filled) + String(repeating: "-", count: variant.bar - filled) + "]", at: 0)
            }
            let line = parts.joined(separator: " ")
            if line.count <= room { return line }
        }
        return String(counts.prefix(room))
    }

    /// stderr's width now. Read at every redraw (at most ten a second, one ioctl) rather
    /// than on SIGWINCH: a resized terminal is honoured without a signal handler.
    static func terminalColumns() -> Int {
        var size = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }

    // MARK: JSON lines

    private func emitJSON(_ event: ProgressEvent) {
        // Under the lock: lines come from several threads, and offsets must read in order.
        state.withLock { s in
            var object: [String: JSONValue] = ["time": .double(Date().timeIntervalSince(started))]
            switch event {
            case .start(let spec, let total, let resumedAt):
                s.attempts += 1
                object["event"] = .string("start")
                object["attempt"] = .integer(s.attempts)
                object["spec"] = .string(spec)
                if let total { object["total"] = .integer(total) }
                if let resumedAt { object["resumed_at"] = .integer(resumedAt) }
                s.lastOffset = resumedAt ?? 0
            case .progress(let offset, let total, let output):
                let now = Date()
                guard now.timeIntervalSince(s.lastDraw) >= 0.1 else { return }
                s.lastDraw = now
                s.lastOffset = max(s.lastOffset, offset)
                object["event"] = .string("progress")
                object["source_offset"] = .integer(s.lastOffset)
                object["output_bytes"] = .integer(output)
                if let total { object["total"] = .integer(total) }
                if let connections = s.connections { object["connections"] = .integer(connections) }
            case .retry(let attempt, let delay, let reason):
                object["event"] = .string("retry")
                object["attempt"] = .integer(attempt)
                object["delay"] = .double(delay)
                object["reason"] = .string(DisplayText.escaped(reason))
            case .checkpoint(let offset, let stages):
                // A checkpoint becomes durable a little after the stream passed its cut.
                object["event"] = .string("checkpoint")
                object["checkpoint_offset"] = .integer(offset)
                s.lastOffset = max(s.lastOffset, offset)
                object["source_offset"] = .integer(s.lastOffset)
                object["stages"] = .array(stages.map { .object(["stage": .string($0.stage), "input": .integer($0.input), "output": .integer($0.output)]) })
            case .resume(let offset):
                object["event"] = .string("resume")
                object["source_offset"] = .integer(offset)
                s.lastOffset = offset
            case .restart(let reason):
                object["event"] = .string("restart")
                object["reason"] = .string(DisplayText.escaped(reason))
                s.lastOffset = 0
            case .done(let sourceBytes, let outputBytes, let seconds):
                object["event"] = .string("done")
                object["source_offset"] = .integer(sourceBytes)
                object["output_bytes"] = .integer(outputBytes)
                object["seconds"] = .double(seconds)
                if let connections = s.connections { object["connections"] = .integer(connections) }
            case .error(let error):
                object["event"] = .string("error")
                object["exit_code"] = .integer(Int(exitStatus(error)))
                object["message"] = .string(DisplayText.escaped(error.description))
            case .connections(let count):
                s.connections = count
                return  // shown in the progress and done lines
            case .notice:
                return  // the JSON lines keep their documented set of events
            }
            guard let line = JSONValue.object(object).serialized() else { return }
            write(line + "\n")
        }
    }

    private func write(_ text: String) {
        StandardError.write(text)
    }
}

func formatBytes(_ n: UInt64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    var value = Double(n)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    return unit == 0 ? "\(n) B" : cFormat("%.1f ", value) + units[unit]
}

/// A rate in bytes per second, whatever a clock or a server made of it.
func formatRate(_ bytesPerSecond: Double) -> String {
    guard bytesPerSecond.isFinite, bytesPerSecond > 0 else { return formatBytes(0) }
    // UInt64(x) traps at 2^64 and above: clamp first.
    return formatBytes(bytesPerSecond >= 1.8e19 ? UInt64.max : UInt64(bytesPerSecond))
}

/// `m:ss` or `h:mm:ss`; beyond 100 days (a trickle of a huge declared length) a day count,
/// and past any sensible horizon `>99999d`. Never converts an out-of-range Double to Int.
func formatDuration(_ seconds: Double) -> String {
    guard seconds.isFinite else { return "--:--" }
    let clamped = max(0, seconds)
    let days = clamped / 86_400
    if days >= 100_000 { return ">99999d" }
    if days >= 100 { return "\(Int(days))d" }
    let s = Int(clamped.rounded())
    return s >= 3600 ? cFormat("%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60) : cFormat("%ld:%02ld", s / 60, s % 60)
}
