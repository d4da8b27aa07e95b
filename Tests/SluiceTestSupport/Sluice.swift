import Foundation
import XCTest

/// Runs the real `sluice` binary built next to the test bundle.
enum SluiceBinary {
    static var path: String {
        if let override = ProcessInfo.processInfo.environment["SLUICE_BIN"] { return override }
        // .build/<config>/SluicePackageTests.xctest → .build/<config>/sluice
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return bundle.appendingPathComponent("sluice").path
    }

    struct Result {
        var status: Int32
        var stdout: Data
        var stderr: String
        /// True when the process died of a signal (then `status` is the signal number).
        var signalled = false
    }

    /// Runs sluice with `arguments`, optional stdin data, in `directory`; waits for it.
    @discardableResult
    static func run(
        _ arguments: [String], stdin: Data? = nil, in directory: String? = nil,
        environment: [String: String]? = nil
    ) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        if let environment { process.environment = environment }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let input = Pipe()
        process.standardInput = stdin == nil ? FileHandle.nullDevice : input
        try process.run()
        // Drain both pipes concurrently so a chatty child never blocks.
        let outData = DataBox(), errData = DataBox()
        let group = DispatchGroup()
        for (handle, box) in [(out.fileHandleForReading, outData), (err.fileHandleForReading, errData)] {
            group.enter()
            DispatchQueue.global().async {
                box.set(handle.readDataToEndOfFile())
                group.leave()
            }
        }
        if let stdin {
            input.fileHandleForWriting.write(stdin)
            try? input.fileHandleForWriting.close()
        }
        process.waitUntilExit()
        group.wait()
        return Result(
            status: process.terminationStatus, stdout: outData.get(),
            stderr: String(decoding: errData.get(), as: UTF8.self),
            signalled: process.terminationReason == .uncaughtSignal)
    }
}

final class DataBox: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ d: Data) {
        lock.lock()
        data = d
        lock.unlock()
    }
    func get() -> Data {
        lock.lock()
        defer { lock.unlock() }
        return data
    }
}

/// A fresh temporary directory, removed when the test ends.
func makeTemporaryDirectory(_ test: XCTestCase) throws -> String {
    let path = NSTemporaryDirectory() + "sluice-test-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    test.addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
    return path
}

/// Runs a shell command (bash -c), returning its exit status; stdout/stderr inherited unless captured.
@discardableResult
func shell(_ command: String, capture: Bool = false) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/bash")
    process.arguments = ["-c", command]
    let out = Pipe()
    if capture { process.standardOutput = out }
    try process.run()
    let data = capture ? out.fileHandleForReading.readDataToEndOfFile() : Data()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// Deterministic test data: a mix of compressible text-like runs and pseudo-random bytes.
func makeTestData(count: Int, seed: UInt64) -> [UInt8] {
    var state = seed &+ 0x9E3779B97F4A7C15
    func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }
    let words = ["stream ", "sluice ", "gzip ", "checkpoint ", "resume ", "barrier ", "deflate\n", "0123456789 "].map { Array($0.utf8) }
    var out = [UInt8]()
    out.reserveCapacity(count)
    while out.count < count {
        let r = next()
        if r % 7 == 0 {
            for _ in 0..<Int(r % 300) { out.append(UInt8(truncatingIfNeeded: next())) }
        } else {
            for i in 0..<Int(r % 40) { out.append(contentsOf: words[Int((r >> (i % 50)) % UInt64(words.count))]) }
        }
    }
    return Array(out.prefix(count))
}

func sha256Hex(ofFile path: String) throws -> String {
    let result = try shell("sha256sum '\(path)' | cut -d' ' -f1", capture: true)
    return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// How many rounds a property or fuzz test runs: the issues' full counts (≥ 200 cuts,
/// ≥ 2,000 mutants) with `SLUICE_SLOW_TESTS=1`, as `Scripts/test` and CI run them; a fifth
/// of them otherwise, so that `swift test --filter SluiceUnitTests` takes seconds.
enum Thoroughness {
    static let full = ProcessInfo.processInfo.environment["SLUICE_SLOW_TESTS"] == "1"

    /// `n` in a full run, a fifth of it (at least 1) in a quick one.
    static func scaled(_ n: Int) -> Int { full ? n : max(1, n / 5) }
}

/// Tests that take many seconds (kill loops, gigabytes of data) run only when
/// `SLUICE_SLOW_TESTS=1`; `Scripts/test` (and so CI) always sets it.
func requireSlowTests() throws {
    guard ProcessInfo.processInfo.environment["SLUICE_SLOW_TESTS"] == "1" else {
        throw XCTSkip("slow test: set SLUICE_SLOW_TESTS=1 (Scripts/test does)")
    }
}
