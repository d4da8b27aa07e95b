import Foundation
@testable import SluiceTestSupport

/// Runs sluice with `arguments` as a user whom permissions bind: as nobody when the tests run
/// as root (root ignores modes), with `SLUICE_STATE_DIR` set to `stateDirectory`. The files
/// the run needs must be nobody's first.
func runSluiceUnprivileged(_ arguments: [String], stateDirectory: String) throws -> (status: Int32, stderr: String) {
    var command = [SluiceBinary.path] + arguments
    if getuid() == 0 {
        command =
            ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/env", "SLUICE_STATE_DIR=\(stateDirectory)"]
            + command
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: command[0])
    process.arguments = Array(command.dropFirst())
    let errors = Pipe()
    process.standardError = errors
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, message)
}
