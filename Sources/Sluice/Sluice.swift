/// Sluice: resumable byte-stream pipelines. Start with `Pipeline`.
public enum Sluice {
    public static let version = "0.1.0"
}
