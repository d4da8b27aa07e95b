import Foundation
import XCTest

/// Compresses with the `zstd` command (the reference the decoder is checked against).
/// `arguments` are zstd's own, e.g. "-19" or "--ultra -22"; `streamed` pipes the input
/// through stdin, so the frame has no content size unless asked for.
func zstdCompress(_ plain: [UInt8], _ arguments: String, streamed: Bool = false, in dir: String) throws -> [UInt8] {
    let input = dir + "/zstd-in", output = dir + "/zstd-out.zst"
    try Data(plain).write(to: URL(fileURLWithPath: input))
    let command =
        streamed
        ? "zstd -q -c \(arguments) < '\(input)' > '\(output)'"
        : "zstd -q -f \(arguments) '\(input)' -o '\(output)'"
    let status = try shell(command).status
    XCTAssertEqual(status, 0, command)
    return try [UInt8](Data(contentsOf: URL(fileURLWithPath: output)))
}

/// A skippable frame (magic 0x184D2A5n) holding `content`.
func zstdSkippableFrame(_ content: [UInt8], nibble: UInt8 = 0) -> [UInt8] {
    let size = UInt32(content.count)
    return [0x50 | (nibble & 15), 0x2A, 0x4D, 0x18] + (0..<4).map { UInt8(truncatingIfNeeded: size >> (8 * $0)) } + content
}
