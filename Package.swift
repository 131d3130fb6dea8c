// swift-tools-version:6.0
import PackageDescription

// C libraries come from Debian's -dev packages through system-library targets;
// no Swift package is fetched from outside.
let package = Package(
    name: "siwa-endpoint",
    products: [
        .executable(name: "siwa-endpoint", targets: ["siwa-endpoint"]),
        .executable(name: "siwa-fuzz", targets: ["siwa-fuzz"]),
        .library(name: "SIWAVerification", targets: ["SIWAVerification"]),
    ],
    targets: [
        // The C boundary: one system-library target per C library.
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL"),
        .systemLibrary(name: "CFastCGI", path: "Sources/CFastCGI"),
        .systemLibrary(name: "CHiredis", path: "Sources/CHiredis"),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl"),

        // The one Swift wrapper over OpenSSL: every OpenSSL pointer lives here.
        .target(name: "SIWACrypto", dependencies: ["COpenSSL"]),

        // Pure Swift: bytes + keys + clock in, a verified notification out.
        .target(name: "SIWAVerification", dependencies: ["SIWACrypto"]),

        // The test kit Apple does not provide: keys, JWKS and signed notifications.
        .target(name: "SIWATestKit", dependencies: ["SIWACrypto", "SIWAVerification"]),

        // The responder: FastCGI, Redis, the JWKS fetcher, the spool.
        .target(
            name: "SIWAServer",
            dependencies: ["SIWAVerification", "CFastCGI", "CHiredis", "CCurl"]
        ),

        .executableTarget(
            name: "siwa-endpoint",
            dependencies: ["SIWAVerification", "SIWATestKit", "SIWAServer", "SIWACrypto"]
        ),

        // libFuzzer entry point over the body-to-result path. Build with
        // `swift build --product siwa-fuzz --sanitize=fuzzer --sanitize=address`.
        .executableTarget(
            name: "siwa-fuzz",
            dependencies: ["SIWAVerification", "SIWATestKit", "SIWAServer"]
        ),

        .testTarget(
            name: "SIWAVerificationTests",
            dependencies: ["SIWAVerification", "SIWATestKit", "SIWACrypto"]
        ),
        // Runs the real siwa-endpoint binary: keygen, sign, verify, exit statuses.
        .testTarget(
            name: "SIWAEndpointCLITests",
            dependencies: ["siwa-endpoint", "SIWAVerification"]
        ),
        .testTarget(
            name: "SIWAServerTests",
            dependencies: ["SIWAServer", "SIWAVerification", "SIWATestKit", "SIWACrypto", "siwa-endpoint"]
        ),
    ]
)
