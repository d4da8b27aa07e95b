import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// The outcome of a bounded sluice run.
struct SluiceOutcome {
    var status: Int32
    var signalled: Bool
    /// The child outlived its deadline and was killed.
    var timedOut: Bool
    var stdout: Data
    var lines: [String]

    /// stderr as a failure message shows it; a death by signal is named first, since its
    /// status alone reads like an exit code (SIGINT before the handlers are set is "2").
    var stderr: String { ((signalled ? ["[killed by signal \(status)]"] : []) + lines).joined(separator: "\n") }
    /// stderr lines that are not `--progress json` objects.
    var messages: [String] { lines.filter { !$0.hasPrefix("{") } }

    func events(named name: String) -> [[String: Any]] {
        lines.compactMap(sluiceEvent).filter { $0["event"] as? String == name }
    }
}

/// Decodes one `--progress json` line.
func sluiceEvent(_ line: String) -> [String: Any]? {
    guard line.hasPrefix("{") else { return nil }
    return (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
}

/// A running sluice whose stdout and stderr are drained by their own threads as they
/// arrive, so a test can act on a stderr line (an event) the moment it appears. Every
/// wait is bounded; a child that outlives its deadline is killed and reported.
final class SluiceChild: @unchecked Sendable {
    // Mutable state is guarded by `condition`.
    private let process = Process()
    private let condition = NSCondition()
    private var lines: [String] = []
    private var partialLine = Data()
    private var output = Data()
    private var openStreams = 2
    private var stderrClosed = false
    private var exited = false
    private let pipes: [Pipe]
    let started = Date()

    private static let ignoreSIGPIPE: Void = {
        signal(SIGPIPE, SIG_IGN)
        return ()
    }()

    /// - Parameter environment: added to the test's own environment (e.g. a `RaceGate`).
    init(_ arguments: [String], in directory: String, stdin: Data? = nil, environment: [String: String] = [:]) throws {
        _ = Self.ignoreSIGPIPE
        process.executableURL = URL(fileURLWithPath: SluiceBinary.path)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let out = Pipe(), err = Pipe(), input = Pipe()
        pipes = [out, err, input]
        process.standardOutput = out
        process.standardError = err
        process.standardInput = stdin == nil ? FileHandle.nullDevice : input
        process.terminationHandler = { [weak self] _ in
            guard let self else { return }
            self.condition.lock()
            self.exited = true
            self.condition.broadcast()
            self.condition.unlock()
        }
        try process.run()
        drain(out.fileHandleForReading.fileDescriptor, isStderr: false)
        drain(err.fileHandleForReading.fileDescriptor, isStderr: true)
        if let stdin {
            let writeHandle = input.fileHandleForWriting
            let fd = writeHandle.fileDescriptor
            let writer = Thread {
                stdin.withUnsafeBytes { raw in
                    var offset = 0
                    while offset < raw.count {
                        let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                        if n < 0 && errno == EINTR { continue }
                        if n <= 0 { break }
                        offset += n
                    }
                }
                try? writeHandle.close()
            }
            writer.start()
        }
    }

    private func drain(_ fd: Int32, isStderr: Bool) {
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                condition.lock()
                if isStderr {
                    partialLine.append(contentsOf: buffer[0..<n])
                    while let newline = partialLine.firstIndex(of: 0x0a) {
                        lines.append(String(decoding: partialLine[partialLine.startIndex..<newline], as: UTF8.self))
                        partialLine = Data(partialLine[partialLine.index(after: newline)...])
                    }
                } else {
                    output.append(contentsOf: buffer[0..<n])
                }
                condition.broadcast()
                condition.unlock()
            }
            condition.lock()
            if isStderr && !partialLine.isEmpty {
                lines.append(String(decoding: partialLine, as: UTF8.self))
                partialLine = Data()
            }
            openStreams -= 1
            if isStderr { stderrClosed = true }
            condition.broadcast()
            condition.unlock()
        }
        thread.start()
    }

    var stderrSoFar: String {
        condition.lock()
        defer { condition.unlock() }
        return lines.joined(separator: "\n")
    }

    /// Waits until the stderr line at index ≥ `from` satisfies `predicate`; returns its index,
    /// or nil when stderr ended or `timeout` passed first.
    func waitForLine(from: Int = 0, timeout: TimeInterval, where predicate: (String) -> Bool) -> Int? {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        var next = from
        while true {
            while next < lines.count {
                if predicate(lines[next]) { return next }
                next += 1
            }
            if stderrClosed { return nil }
            if !condition.wait(until: deadline) && next >= lines.count { return nil }
        }
    }

    /// Waits for a `--progress json` event named `name` (and matching `predicate`).
    func waitForEvent(
        _ name: String, from: Int = 0, timeout: TimeInterval,
        where predicate: ([String: Any]) -> Bool = { _ in true }
    ) -> [String: Any]? {
        waitForEventIndexed(name, from: from, timeout: timeout, where: predicate)?.event
    }

    func waitForEventIndexed(
        _ name: String, from: Int = 0, timeout: TimeInterval,
        where predicate: ([String: Any]) -> Bool = { _ in true }
    ) -> (index: Int, event: [String: Any])? {
        var found: [String: Any]?
        let index = waitForLine(from: from, timeout: timeout) { line in
            guard let event = sluiceEvent(line), event["event"] as? String == name, predicate(event) else { return false }
            found = event
            return true
        }
        guard let index, let found else { return nil }
        return (index, found)
    }

    var hasExited: Bool {
        condition.lock()
        defer { condition.unlock() }
        return exited
    }

    /// Sends `signal` unless the child has already exited.
    func send(_ signal: Int32) {
        condition.lock()
        defer { condition.unlock() }
        if !exited { kill(process.processIdentifier, signal) }
    }

    /// Waits for exit and for both streams to close; past `timeout` the child is killed.
    func waitForExit(timeout: TimeInterval) -> SluiceOutcome {
        var timedOut = false
        condition.lock()
        let deadline = Date().addingTimeInterval(timeout)
        while !(exited && openStreams == 0) {
            if !condition.wait(until: deadline) {
                timedOut = true
                break
            }
        }
        condition.unlock()
        if timedOut {
            send(SIGKILL)
            condition.lock()
            let grace = Date().addingTimeInterval(10)
            while !(exited && openStreams == 0) && condition.wait(until: grace) {}
            condition.unlock()
        }
        condition.lock()
        defer { condition.unlock() }
        let done = exited
        return SluiceOutcome(
            status: done ? process.terminationStatus : -1,
            signalled: done && process.terminationReason == .uncaughtSignal,
            timedOut: timedOut, stdout: output, lines: lines)
    }
}

/// Runs sluice to its end, bounded: a run that hangs is killed and fails the test.
func runSluiceBounded(
    _ arguments: [String], in directory: String, stdin: Data? = nil, timeout: TimeInterval = 10,
    file: StaticString = #filePath, line: UInt = #line
) throws -> SluiceOutcome {
    let child = try SluiceChild(arguments, in: directory, stdin: stdin)
    let outcome = child.waitForExit(timeout: timeout)
    if outcome.timedOut {
        XCTFail(
            "sluice \(arguments) did not exit within \(Int(timeout)) s (hung; killed). stderr:\n\(outcome.stderr)",
            file: file, line: line)
    }
    return outcome
}

/// What a stored checkpoint says, read as plain JSON (independent of the library's types).
struct CheckpointFacts {
    var json: [String: Any]
    var mode: mode_t

    /// nil when the file is missing or does not parse as a JSON object.
    init?(path: String) {
        guard let data = FileManager.default.contents(atPath: path),
            let object = (try? JSONSerialization.jsonObject(with: Data(StoredCheckpointFile(data).json.utf8))) as? [String: Any]
        else { return nil }
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        json = object
        mode = st.st_mode
    }

    var sourceOffset: UInt64? {
        ((json["source"] as? [String: Any])?["offset"] as? NSNumber)?.uint64Value
    }

    /// The file sink's recorded durable length.
    var fileBytes: UInt64? {
        let stages = json["stages"] as? [[String: Any]] ?? []
        guard let file = stages.last(where: { $0["stage"] as? String == "file" }),
            let state = file["state"] as? [String: Any]
        else { return nil }
        return (state["bytes_written"] as? NSNumber)?.uint64Value
    }
}

/// The environment that holds a debug build at its SOURCE_END gate (a FIFO nobody opens)
/// once its source is read: a run that a test will kill can then never finish first,
/// however fast or busy the machine.
func holdAtSourceEnd(_ test: XCTestCase) throws -> [String: String] {
    let gateDir = try makeTemporaryDirectory(test)
    XCTAssertEqual(mkfifo(gateDir + "/source-end", 0o600), 0)
    return ["SLUICE_TEST_GATE_SOURCE_END": gateDir + "/source-end"]
}
