import Foundation
import XCTest
@testable import SluiceTestSupport

/// `Scripts/install PREFIX` gives a binary that runs without the Swift toolchain, a man
/// page that renders, and completion scripts that load.
final class InstallTests: XCTestCase {
    func testInstalledBinaryRunsWithACleanEnvironment() throws {
        try requireSlowTests()
        let repository = CLIFeatureTests.repository
        let prefix = try makeTemporaryDirectory(self) + "/prefix"
        let install = try shell("'\(repository)/Scripts/install' '\(prefix)' 2>&1", capture: true)
        XCTAssertEqual(install.status, 0, install.output)

        // No toolchain on the PATH, no library path: only what Debian installs.
        let clean = "env -i PATH=/usr/bin:/bin HOME=\(prefix)"
        let version = try shell("\(clean) '\(prefix)/bin/sluice' --version", capture: true)
        XCTAssertEqual(version.status, 0, version.output)
        XCTAssertTrue(version.output.hasPrefix("sluice "), version.output)
        let out = prefix + "/sample.tar"
        let run = try shell(
            "\(clean) '\(prefix)/bin/sluice' 'read \(repository)/Fixtures/sample.tar.gz | verify sha256:\(CLIFeatureTests.sampleDigest) | gunzip | file \(out)'",
            capture: true)
        XCTAssertEqual(run.status, 0, run.output)
        XCTAssertEqual(try sha256Hex(ofFile: out), "d67ef10ef04b74f449a9daf2f8bfd00fcfdc05ade70578390b31a004e153f2fe")

        let man = try shell("MANWIDTH=80 man -l '\(prefix)/share/man/man1/sluice.1' 2>&1 | col -b", capture: true)
        XCTAssertEqual(man.status, 0, man.output)
        for heading in ["NAME", "USAGE", "STAGES", "OPTIONS", "ENVIRONMENT", "FILES", "EXIT STATUS"] {
            XCTAssertTrue(man.output.contains("\n" + heading + "\n"), "the man page has no \(heading) section:\n\(man.output)")
        }
        XCTAssertTrue(man.output.contains("--checkpoint-interval"), man.output)

        let bash = try shell("bash -c 'source \(prefix)/share/bash-completion/completions/sluice && complete -p sluice'", capture: true)
        XCTAssertEqual(bash.status, 0, bash.output)
        XCTAssertTrue(bash.output.contains("_sluice"), bash.output)
        let zsh = try String(contentsOfFile: prefix + "/share/zsh/site-functions/_sluice", encoding: .utf8)
        XCTAssertTrue(zsh.hasPrefix("#compdef sluice"), zsh)
        XCTAssertTrue(zsh.contains("'--engine[") && zsh.contains("(zlib isal)"), zsh)
    }
}
