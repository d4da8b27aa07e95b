import Foundation
import XCTest

@testable import Sluice
@testable import SluiceTestSupport

/// A checkpoint written before untar states had a version (every one before version 1) has
/// no `version` field at all: it is version 0, refused for what it is, not "damaged".
final class UntarStateVersionTests: XCTestCase {
    func testAStateWithoutAVersionIsVersionZeroAndRefusedAsOlder() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        XCTAssertEqual(mkdir(dir + "/out.sluice-part", 0o700), 0)
        let state = UntarState(directory: dir + "/out", strip: 0, reader: TarReaderState(), current: nil, directories: [], root: nil)
        var object = try XCTUnwrap(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(state)) as? [String: Any])
        XCTAssertNotNil(object.removeValue(forKey: "version"))
        let older = try JSONDecoder().decode(UntarState.self, from: try JSONSerialization.data(withJSONObject: object))
        XCTAssertEqual(older.version, 0)
        XCTAssertThrowsError(try UntarSink(directory: dir + "/out", restoring: older)) { error in
            XCTAssertTrue((error as? StateRejected)?.reason.contains("version 0") == true, "\(error)")
        }
    }
}
