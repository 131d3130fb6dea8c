/// The release's version: the one place it is written. `siwa-endpoint --version` prints
/// it, and `scripts/package` names the Debian package after what the built binary prints.
enum EndpointVersion {
    static let current = "1.0.0"
}
