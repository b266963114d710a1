/// The release of this build: `roost --version` prints `roost <current>`, and
/// every backup records it (docs/operations.md). One constant, raised once per
/// release; `/healthz` never shows it (spec §1 fixes that body).
public enum RoostVersion {
    /// Semantic version of this release.
    public static let current = "0.9.0"
}
