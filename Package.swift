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
        // c-ares: Redis host names resolved within the connect timeout.
        .systemLibrary(name: "CCAres", path: "Sources/CCAres"),

        // What every wrapper shares: errors with a stable code, the injected clock, the
        // background services' lifecycle (Service, PeriodicTask, ServiceGroup), Latch, and
        // SocketAddress (a unix path or an IP literal, for bind and connect).
        .target(name: "SIWASupport"),

        // JSON reading (strict: no duplicate members, bounded depth) and writing, byte by byte.
        .target(name: "SIWAJSON"),

        // One thin Swift wrapper per C library; none knows anything of notifications.
        // Every OpenSSL pointer lives in SIWACrypto (signatures) or SIWATLS (TLS client
        // connections), every libfcgi pointer in SIWAFastCGI,
        // every hiredis and c-ares pointer in SIWARedis, every libcurl pointer in SIWAHTTPS.
        // One-line C pass-throughs for the OpenSSL macros Swift cannot call (a .c file and a
        // header of declarations); every other OpenSSL call is made from Swift.
        .target(name: "COpenSSLShim", dependencies: ["COpenSSL"]),
        .target(name: "SIWACrypto", dependencies: ["COpenSSL", "COpenSSLShim"]),
        .target(name: "SIWATLS", dependencies: ["COpenSSL", "COpenSSLShim", "SIWASupport"]),
        .target(name: "SIWAFastCGI", dependencies: ["CFastCGI", "SIWASupport"]),
        // nginx's side of FastCGI, no libfcgi: for `status`, `load`, the benchmarks and the tests,
        // never linked into the responder's own module.
        .target(name: "SIWAFastCGIClient", dependencies: ["SIWASupport"]),
        // hiredis only as a codec (commands formatted, replies parsed); the socket, and TLS
        // over it through SIWATLS, belong to the connection.
        .target(name: "SIWARedis", dependencies: ["CHiredis", "CCAres", "SIWASupport", "SIWATLS"]),
        .target(name: "SIWAHTTPS", dependencies: ["CCurl", "SIWASupport"]),

        // Pure Swift: bytes + keys + clock in, a verified notification out.
        .target(name: "SIWAVerification", dependencies: ["SIWACrypto", "SIWAJSON"]),

        // The test kit Apple does not provide: keys, JWKS and signed notifications.
        .target(name: "SIWATestKit", dependencies: ["SIWACrypto", "SIWAVerification", "SIWAJSON"]),

        // The responder's policy: the JWKS cache, the notification store, the spool, the
        // responder and its settings, over the wrappers above.
        .target(
            name: "SIWAServer",
            dependencies: [
                "SIWAVerification", "SIWAJSON", "SIWASupport", "SIWAFastCGI", "SIWARedis", "SIWAHTTPS",
            ]
        ),

        .executableTarget(
            name: "siwa-endpoint",
            dependencies: [
                "SIWAVerification", "SIWATestKit", "SIWAServer", "SIWACrypto", "SIWAJSON", "SIWASupport",
                "SIWAFastCGI", "SIWAFastCGIClient", "SIWARedis", "SIWAHTTPS",
            ]
        ),

        // libFuzzer entry point over the body-to-result path. Build with
        // `swift build --product siwa-fuzz --sanitize=fuzzer --sanitize=address`.
        .executableTarget(
            name: "siwa-fuzz",
            dependencies: ["SIWAVerification", "SIWATestKit", "SIWAServer", "SIWAJSON"]
        ),

        // What the test suites share: one process runner (files and a watchdog), one free
        // loopback port finder, one waitUntil.
        .target(name: "SIWATestSupport", path: "Tests/SIWATestSupport"),

        .testTarget(
            name: "SIWAVerificationTests",
            dependencies: ["SIWAVerification", "SIWATestKit", "SIWACrypto", "SIWAJSON"]
        ),
        // Runs the real siwa-endpoint binary: keygen, sign, verify, exit statuses.
        .testTarget(
            name: "SIWAEndpointCLITests",
            dependencies: ["siwa-endpoint", "SIWAVerification", "SIWAJSON", "SIWATestSupport"]
        ),
        .testTarget(
            name: "SIWAServerTests",
            dependencies: [
                "SIWAServer", "SIWAVerification", "SIWATestKit", "SIWACrypto", "SIWAJSON", "SIWASupport",
                "SIWAFastCGI", "SIWAFastCGIClient", "SIWARedis", "SIWAHTTPS", "SIWATestSupport",
                "siwa-endpoint",
            ],
            // The HTTPS receivers the deliverer's tests run with python, read from their paths.
            exclude: ["Webhooks/webhook_receiver.py", "Webhooks/kept_connection_receiver.py"]
        ),
    ]
)
