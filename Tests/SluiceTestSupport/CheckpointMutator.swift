import Foundation
import Sluice

/// Damages a checkpoint's gzip or untar state the way a careless edit or a bad disk might:
/// one field set to an extreme or random value, or bytes of the inflate state changed.
/// Used by the in-process and the command-line checkpoint fuzz tests. Edits go through
/// `Checkpoint` values, so a save re-seals them, appendix included; `StoredCheckpointFile`
/// edits the stored bytes themselves (no re-sealing).
enum CheckpointMutator {
    static let extremes: [UInt64] = [0, 1, 7, 8, 255, 0xffff, 1 << 31, 1 << 32, 1 << 63, UInt64.max, UInt64(Int64.max)]

    /// Mutates the first gzip state in `checkpoint`; returns what it did, for messages.
    /// The state's fields are the decoder's own, so the edit goes through its JSON, as a
    /// hand edit of the checkpoint file would.
    @discardableResult
    static func mutate(_ checkpoint: inout Checkpoint, rng: inout SeededRandom) -> String {
        guard let index = checkpoint.stages.firstIndex(where: { $0.as(GzipState.self) != nil }),
            let state = checkpoint.stages[index].as(GzipState.self),
            let encoded = try? JSONEncoder().encode(state),
            var fields = (try? JSONSerialization.jsonObject(with: encoded)) as? [String: Any]
        else { return "no gzip state" }
        let what = mutate(&fields, rng: &rng)
        guard let data = try? JSONSerialization.data(withJSONObject: fields),
            let mutated = try? JSONDecoder().decode(GzipState.self, from: data)
        else { return "\(what) (not a gzip state any more: left as it was)" }
        checkpoint.stages[index] = StageState(mutated)
        return what
    }

    /// Edits the untar stage's position fields: where the file being written stands
    /// (`written`, the member's `size`) and where the reader stands in the member
    /// (`remaining`, `padding`). nil when the checkpoint has no untar file in progress.
    static func mutateUntarPosition(_ checkpoint: inout Checkpoint, rng: inout SeededRandom) -> String? {
        editUntar(&checkpoint) { state in
            guard var file = state.current else { return nil }
            func near(_ value: UInt64) -> UInt64 {
                [0, 1, value &- 1, value &+ 1, value / 2, value &+ 512, UInt64.max, rng.next() >> 20].randomElement(using: &rng)!
            }
            let what: String
            switch Int.random(in: 0..<4, using: &rng) {
            case 0:
                file.written = near(file.written)
                what = "untar written"
            case 1:
                file.size = near(file.size)
                what = "untar size"
            case 2:
                state.reader.remaining = near(state.reader.remaining)
                what = "untar remaining"
            default:
                state.reader.padding = UInt32(truncatingIfNeeded: near(UInt64(state.reader.padding)))
                what = "untar padding"
            }
            state.current = file
            return what
        }
    }

    /// Sets the untar stage's current file's `written` (e.g. 0: the forged short file).
    /// nil when the checkpoint has no untar file in progress.
    static func setUntarWritten(_ checkpoint: inout Checkpoint, to value: UInt64) -> String? {
        editUntar(&checkpoint) { state in
            guard state.current != nil else { return nil }
            state.current?.written = value
            return "untar written = \(value)"
        }
    }

    private static func editUntar(_ checkpoint: inout Checkpoint, _ edit: (inout UntarState) -> String?) -> String? {
        guard let index = checkpoint.stages.firstIndex(where: { $0.as(UntarState.self) != nil }),
            var state = checkpoint.stages[index].as(UntarState.self), let what = edit(&state)
        else { return nil }
        checkpoint.stages[index] = StageState(state)
        return what
    }

    /// One edit of a gzip state's JSON fields (GzipState's own coding keys).
    private static func mutate(_ state: inout [String: Any], rng: inout SeededRandom) -> String {
        func number() -> UInt64 {
            Bool.random(using: &rng) ? extremes.randomElement(using: &rng)! : rng.next() >> UInt64.random(in: 0...63, using: &rng)
        }
        switch Int.random(in: 0..<12, using: &rng) {
        case 0:
            state["membersDone"] = [Int.max, Int.min, -1, 0, 1, Int(truncatingIfNeeded: number())].randomElement(using: &rng)!
            return "membersDone"
        case 1:
            state["compressedOffset"] = number()
            return "compressedOffset"
        case 2:
            state["outputOffset"] = number()
            return "outputOffset"
        case 3:
            state["memberLength"] = number()
            return "memberLength"
        case 4:
            state["memberCrc"] = UInt32(truncatingIfNeeded: number())
            return "memberCrc"
        case 5:
            state["phase"] = ["between", "header", "deflate", "trailer", "padding"].randomElement(using: &rng)!
            return "phase"
        case 6:
            state["trailer"] = (0..<Int.random(in: 0...12, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            return "trailer"
        case 7:
            state["header"] = nil
            state["phase"] = "header"
            return "header state missing"
        default:
            return mutateDeflate(&state, rng: &rng)
        }
    }

    private static func mutateDeflate(_ state: inout [String: Any], rng: inout SeededRandom) -> String {
        guard var deflate = state["deflate"] as? [String: Any] else {
            state["phase"] = "deflate"
            return "phase deflate without a state"
        }
        func flipped(_ key: String) -> String {
            let bytes = (deflate[key] as? String).flatMap { Data(base64Encoded: $0) } ?? Data()
            return Data(flip(Array(bytes), rng: &rng)).base64EncodedString()
        }
        let what: String
        switch deflate["engine"] as? String {
        case "zlib":
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: deflate["bits"] = [Int.min, -1, 8, 9, Int.max, Int.random(in: 0...7, using: &rng)].randomElement(using: &rng)!
            case 1: deflate["bitValue"] = UInt8.random(in: 0...255, using: &rng)
            case 2: deflate["replayOutput"] = rng.next() >> UInt64.random(in: 0...63, using: &rng)
            case 3: deflate["window"] = flipped("window")
            default: deflate["replay"] = flipped("replay")
            }
            what = "zlib state"
        default:
            deflate["blob"] = flipped("blob")
            what = "isal state"
        }
        state["deflate"] = deflate
        return what
    }

    /// Overwrites one to four spots: a byte, or a 32-bit word with an extreme value.
    /// Most land in the scalar fields and tables at the front of ISA-L's state.
    private static func flip(_ bytes: [UInt8], rng: inout SeededRandom) -> [UInt8] {
        guard !bytes.isEmpty else { return [UInt8.random(in: 0...255, using: &rng)] }
        var out = bytes
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            let front = min(out.count, 30_000)
            let at = Bool.random(using: &rng) ? Int.random(in: 0..<front, using: &rng) : Int.random(in: 0..<out.count, using: &rng)
            if Bool.random(using: &rng) || at + 4 > out.count {
                out[at] = UInt8.random(in: 0...255, using: &rng)
            } else {
                let value = UInt32(truncatingIfNeeded: extremes.randomElement(using: &rng)! &+ UInt64.random(in: 0...2, using: &rng))
                for k in 0..<4 { out[at + k] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(k))) }
            }
        }
        return out
    }
}

/// A stored checkpoint's two parts — the JSON line and the binary appendix of blobs after
/// its newline — for tests that edit a file as someone without the key would.
struct StoredCheckpointFile {
    var json: String
    var appendix: Data

    init(_ data: Data) {
        let newline = data.firstIndex(of: 0x0A) ?? data.endIndex
        json = String(decoding: data[data.startIndex..<newline], as: UTF8.self)
        appendix = newline < data.endIndex ? Data(data[(newline + 1)...]) : Data()
    }

    var data: Data {
        var data = Data(json.utf8)
        data.append(0x0A)
        data.append(appendix)
        return data
    }

    /// The `{"length":L,"offset":O}` references to blobs in the JSON, in order.
    var blobReferences: [String] {
        let pattern = #/\{"length":[0-9]+,"offset":[0-9]+\}/#
        return json.matches(of: pattern).map { String(json[$0.range]) }
    }
}
