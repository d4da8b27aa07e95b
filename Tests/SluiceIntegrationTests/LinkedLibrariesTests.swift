import Foundation
import XCTest

@testable import SluiceTestSupport

/// What every run loads before its stages is kept small (docs/ARCHITECTURE.md, "What a run
/// costs before its stages"): the binary links FoundationEssentials, not the full Foundation
/// with ICU (6.5 MiB of RSS), and opens libcurl only when a stage fetches (5.5 MiB). One
/// `import Foundation` in Sources/ brings the former back; this test names it.
final class LinkedLibrariesTests: XCTestCase {
    func testNeitherFullFoundationNorLibcurlIsLinked() throws {
        let ldd = Process()
        ldd.executableURL = URL(fileURLWithPath: "/usr/bin/ldd")
        ldd.arguments = [SluiceBinary.path]
        let output = Pipe()
        ldd.standardOutput = output
        try ldd.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        ldd.waitUntilExit()
        XCTAssertEqual(ldd.terminationStatus, 0, text)
        XCTAssertTrue(text.contains("libFoundationEssentials.so"), "ldd output not as expected:\n\(text)")
        for library in ["libFoundation.so", "libFoundationInternationalization.so", "lib_FoundationICU.so", "libcurl"] {
            XCTAssertFalse(text.contains(library), "\(library) is linked again:\n\(text)")
        }
    }

    /// libcurl is opened on first use, so a machine without a loadable libcurl.so.4 (absent,
    /// or a different build lacking a function) runs every other stage; a fetch is refused
    /// naming libcurl, not the URL, and leaves nothing behind; --version says why it is missing.
    func testFetchWithoutLoadableLibcurlNamesLibcurl() throws {
        let dir = try makeTemporaryDirectory(self)
        let libs = dir + "/lib"
        try FileManager.default.createDirectory(atPath: libs, withIntermediateDirectories: true)
        try Data("not a shared object\n".utf8).write(to: URL(fileURLWithPath: libs + "/libcurl.so.4"))
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: dir + "/in"))
        var environment = ProcessInfo.processInfo.environment
        environment["LD_LIBRARY_PATH"] = libs
        environment["SLUICE_STATE_DIR"] = dir + "/state"
        for url in ["file://\(dir)/in", "http://127.0.0.1:9/in"] {
            let fetch = try SluiceBinary.run(["fetch \(url) | file out"], in: dir, environment: environment)
            XCTAssertEqual(fetch.status, 2, fetch.stderr)
            XCTAssertFalse(fetch.signalled, fetch.stderr)
            XCTAssertTrue(fetch.stderr.contains("libcurl.so.4"), "libcurl not named:\n\(fetch.stderr)")
            XCTAssertFalse(fetch.stderr.contains("not a URL"), "the URL is blamed:\n\(fetch.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.sluice-part"))
        }
        let version = try SluiceBinary.run(["--version"], in: dir, environment: environment)
        XCTAssertEqual(version.status, 0, version.stderr)
        let versionText = String(decoding: version.stdout, as: UTF8.self)
        XCTAssertTrue(versionText.contains("libcurl not available: "), versionText)
        XCTAssertTrue(versionText.contains("libcurl.so.4"), versionText)
        let read = try SluiceBinary.run(["read in | file copy"], in: dir, environment: environment)
        XCTAssertEqual(read.status, 0, read.stderr)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dir + "/copy")), Data("hello\n".utf8))
    }
}
