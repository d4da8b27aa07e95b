import Foundation
import XCTest

/// The xz command line as a reference: compresses test data made at test time.
enum XzTool {
    /// `xz -c OPTIONS` of `plain`, through files in `dir`.
    static func compress(_ plain: [UInt8], options: String, dir: String) throws -> [UInt8] {
        let input = dir + "/xz-plain", output = dir + "/xz-out.xz"
        try Data(plain).write(to: URL(fileURLWithPath: input))
        let status = try shell("xz -c -T1 \(options) '\(input)' > '\(output)'").status
        guard status == 0 else { throw XzToolError(command: "xz \(options)", status: status) }
        return try [UInt8](Data(contentsOf: URL(fileURLWithPath: output)))
    }

    /// `xz -dc` of `compressed`: the reference output, or nil when xz refuses the data.
    static func decompress(_ compressed: [UInt8], dir: String) throws -> [UInt8]? {
        let input = dir + "/xz-in.xz", output = dir + "/xz-ref"
        try Data(compressed).write(to: URL(fileURLWithPath: input))
        guard try shell("xz -dc '\(input)' > '\(output)' 2>/dev/null").status == 0 else { return nil }
        return try [UInt8](Data(contentsOf: URL(fileURLWithPath: output)))
    }
}

struct XzToolError: Error {
    let command: String
    let status: Int32
}
