// PLACEHOLDER until the real HTTPSource lands (being written now; overwrite freely).
public struct HTTPOptions: Sendable {
    public var retries = 5
    public var stallTimeout: Double = 30
    public var headers: [String] = []
    public var caCertificate: String? = nil
    public var insecure = false
    public var backoffBase: Double = 0.5
    public var maxRetryAfter: Double = 300
    public init() {}
}
public final class HTTPSource: ByteSource {
    public init(url: String, options: HTTPOptions, resumeFrom: SourceState?, control: RunControl) throws {
        throw SluiceError.usage("fetch is not built yet")
    }
    public var warnings: [String] { [] }
    public func run(into sink: ByteSink) throws {}
    public func state(at offset: UInt64) -> SourceState { SourceState(kind: "fetch", location: "", offset: offset) }
}
