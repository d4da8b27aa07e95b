// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Sluice",
    products: [
        .library(name: "Sluice", targets: ["Sluice"]),
        .executable(name: "sluice", targets: ["sluice"]),
    ],
    targets: [
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        // libcurl's headers (libcurl4-openssl-dev); the library itself is opened when a stage
        // first fetches (Sources/CCurl/loader.c), not linked.
        .target(name: "CCurl"),
        .systemLibrary(name: "CIsal", pkgConfig: "libisal", providers: [.apt(["libisal-dev"])]),
        // Our own decoders' hot loops, in C from the format specifications (their state is
        // saved by the Swift stages): LZMA2, branch filters and CRC-64 for .xz; zstd blocks.
        .target(name: "CXz"),
        .target(name: "CZstdDecoder"),
        // openat2 and syncfs for the untar sink (Linux-only system calls; no library).
        .systemLibrary(name: "CLinux"),
        .target(name: "Sluice", dependencies: ["CZlib", "CCrypto", "CCurl", "CIsal", "CXz", "CZstdDecoder", "CLinux"]),
        .executableTarget(name: "sluice", dependencies: ["Sluice"]),
        // The README's library example, compiled and run by the test suite.
        .executableTarget(name: "SluiceExample", dependencies: ["Sluice"], path: "Examples/SluiceExample"),
        // Shared by both test targets: child-process runners, the fault server, nginx, generators.
        .target(name: "SluiceTestSupport", dependencies: ["Sluice", "CZlib"], path: "Tests/SluiceTestSupport"),
        // Fast, in-process: `swift test --filter SluiceUnitTests` runs in seconds.
        .testTarget(name: "SluiceUnitTests", dependencies: ["Sluice", "SluiceTestSupport", "CZlib", "CCrypto", "CIsal"]),
        // The real binary, nginx, kill loops; slow ones run only with SLUICE_SLOW_TESTS=1 (Scripts/test sets it).
        .testTarget(name: "SluiceIntegrationTests", dependencies: ["Sluice", "SluiceTestSupport", "CZlib", "CCrypto"]),
    ],
    swiftLanguageModes: [.v6]
)
