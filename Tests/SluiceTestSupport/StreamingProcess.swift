import Foundation

/// A child process whose stderr is read line by line as it arrives, so a test can act
/// on an event (send a signal after the first checkpoint) instead of sleeping.
final class StreamingProcess: @unchecked Sendable {
    private let process = Process()
    private let condition = NSCondition()
    private var lines: [String] = []
    private var partial = Data()
    private var closed = false

    /// `environment`: variables added to the test's own (e.g. a debug build's gates).
    init(
        _ executable: String, _ arguments: [String], stdin: FileHandle? = nil, stdout: FileHandle? = nil,
        environment: [String: String] = [:]
    ) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.standardInput = stdin ?? FileHandle.nullDevice
        process.standardOutput = stdout ?? FileHandle.nullDevice
        let pipe = Pipe()
        process.standardError = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            self?.append(data)
        }
        try process.run()
    }

    private func append(_ data: Data) {
        condition.lock()
        if data.isEmpty {
            closed = true
        } else {
            partial.append(data)
            while let newline = partial.firstIndex(of: 0x0a) {
                lines.append(String(decoding: partial[partial.startIndex..<newline], as: UTF8.self))
                partial = Data(partial[partial.index(after: newline)...])
            }
        }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits (bounded) until some stderr line satisfies `predicate`; true if one did.
    func waitForLine(timeout: TimeInterval = 60, where predicate: (String) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !lines.contains(where: predicate) {
            if closed || !condition.wait(until: deadline) { return lines.contains(where: predicate) }
        }
        return true
    }

    /// Only while the child runs: once it is reaped its PID may be another process's (pid_max
    /// is 32768 here, and kill loops go through PIDs fast).
    func signal(_ number: Int32) { if process.isRunning { kill(process.processIdentifier, number) } }

    /// Waits for exit and for stderr to be drained; returns the exit status and all lines.
    func wait() -> (status: Int32, lines: [String]) {
        process.waitUntilExit()
        condition.lock()
        let deadline = Date().addingTimeInterval(10)
        while !closed && condition.wait(until: deadline) {}
        let all = lines + (partial.isEmpty ? [] : [String(decoding: partial, as: UTF8.self)])
        condition.unlock()
        return (process.terminationStatus, all)
    }
}

/// Decodes `--progress json` lines (ignoring any that are not JSON objects).
func progressEvents(_ lines: [String]) -> [[String: Any]] {
    lines.compactMap { line in
        guard line.hasPrefix("{") else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }
}

/// A `--progress json` checkpoint line past the run's starting checkpoint.
func isLaterCheckpoint(_ line: String) -> Bool {
    guard let event = progressEvents([line]).first, event["event"] as? String == "checkpoint" else { return false }
    return (event["checkpoint_offset"] as? Int ?? 0) > 0
}
