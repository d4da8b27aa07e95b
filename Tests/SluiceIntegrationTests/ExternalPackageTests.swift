import Foundation
import XCTest
@testable import SluiceTestSupport

/// Sluice as another project uses it: a package outside this repository depends on it by
/// path, compiles the README's example against the public API only, and runs it.
final class ExternalPackageTests: XCTestCase {
    func testAPackageDependingOnSluiceByPathRunsTheReadmeExample() throws {
        try requireSlowTests()
        let repository = CLIFeatureTests.repository
        let identity = URL(fileURLWithPath: repository).lastPathComponent.lowercased()
        let app = try makeTemporaryDirectory(self) + "/App"
        try FileManager.default.createDirectory(atPath: app + "/Sources/App", withIntermediateDirectories: true)
        let manifest = """
            // swift-tools-version:6.0
            import PackageDescription

            let package = Package(
                name: "App",
                dependencies: [.package(path: \(String(reflecting: repository)))],
                targets: [.executableTarget(name: "App", dependencies: [.product(name: "Sluice", package: \(String(reflecting: identity)))])]
            )
            """
        try manifest.write(toFile: app + "/Package.swift", atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(
            atPath: repository + "/Examples/SluiceExample/main.swift",
            toPath: app + "/Sources/App/main.swift")

        let build = try shell("swift build --package-path '\(app)' 2>&1", capture: true)
        XCTAssertEqual(build.status, 0, build.output)
        let url = "file://\(repository)/Fixtures/sample.tar.gz"
        let run = try shell("'\(app)/.build/debug/App' '\(url)' \(CLIFeatureTests.sampleDigest) '\(app)/sample.tar'", capture: true)
        XCTAssertEqual(run.status, 0, run.output)
        XCTAssertEqual(
            try sha256Hex(ofFile: app + "/sample.tar"),
            "d67ef10ef04b74f449a9daf2f8bfd00fcfdc05ade70578390b31a004e153f2fe")
    }
}
