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
        // background services' lifecycle (Service, PeriodicTask, ServiceGroup), Latch,
        // SocketAddress (a unix path or an IP literal, for bind and connect), DurableFile (a file
        // written whole: the spool's and the JWKS cache's) and UnsafeTransfer.
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
        // A one-line pass-through to accept4(2), which Glibc declares only under _GNU_SOURCE.
        .target(name: "CSocketShim"),
        .target(name: "SIWAFastCGI", dependencies: ["CFastCGI", "CSocketShim", "SIWASupport"]),
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

        // The server, split along the pipeline: each target names only targets above it (docs/development.md).
        // The settings' names and the Redis errors' messages naming them: for parts below the table.
        .target(name: "SIWASettingKeys", dependencies: ["SIWAFastCGI", "SIWARedis"]),
        // The event log and serve's metrics text (FastCGI refusals among them): what every part reports through.
        .target(
            name: "SIWATelemetry",
            dependencies: ["SIWAVerification", "SIWAJSON", "SIWASupport", "SIWAFastCGI", "SIWARedis"]
        ),
        // The whole Redis contract, every key, script, stream read and write; above it only wrappers and the log.
        .target(
            name: "SIWAStore",
            dependencies: [
                "SIWASettingKeys", "SIWATelemetry", "SIWAVerification", "SIWAJSON", "SIWASupport", "SIWARedis",
            ]
        ),
        // The spool, where a notification waits while Redis cannot take it, and its replayer into the store.
        .target(
            name: "SIWASpool",
            dependencies: ["SIWAStore", "SIWATelemetry", "SIWAVerification", "SIWAJSON", "SIWASupport", "SIWARedis"]
        ),
        // The JWKS cache and its refresh: fetched over HTTPS, kept through DurableFile; no Redis, no spool.
        .target(
            name: "SIWAKeys",
            dependencies: ["SIWATelemetry", "SIWAVerification", "SIWACrypto", "SIWASupport", "SIWAHTTPS"]
        ),
        // Apple's REST API (client secret, token check, revoke, user migration, pacer) and the runs of reconcile,
        // revoke, transfer and canary over it and the store (testable in process; their commands parse and print).
        .target(
            name: "SIWAAppleAPI",
            dependencies: [
                "SIWASettingKeys", "SIWAStore", "SIWATelemetry", "SIWAVerification", "SIWACrypto", "SIWAJSON",
                "SIWASupport", "SIWARedis", "SIWAHTTPS",
            ]
        ),
        // Google's RISC management API (the service account's key, the authorisation JWT, the stream's
        // calls): HTTPS and signing only, beside Apple's.
        .target(
            name: "SIWAGoogleAPI",
            dependencies: ["SIWAVerification", "SIWACrypto", "SIWAJSON", "SIWASupport", "SIWAHTTPS"]
        ),
        // The webhook deliverer: the store's streams in, signed HTTPS posts out; nothing of the responder.
        .target(
            name: "SIWAWebhooks",
            dependencies: [
                "SIWASettingKeys", "SIWAStore", "SIWATelemetry", "SIWACrypto", "SIWAJSON", "SIWASupport", "SIWARedis",
                "SIWAHTTPS",
            ]
        ),
        // Every setting: table, reading, groups, parsers, error; above the parts whose defaults its rows read.
        .target(
            name: "SIWASettings",
            dependencies: [
                "SIWASettingKeys", "SIWAStore", "SIWASpool", "SIWAKeys", "SIWAAppleAPI", "SIWAGoogleAPI",
                "SIWAWebhooks",
                "SIWAVerification", "SIWACrypto", "SIWAJSON", "SIWASupport", "SIWAFastCGI", "SIWARedis", "SIWAHTTPS",
            ]
        ),
        // The responder: store, spool, keys and FastCGI, built from the settings; readiness, the fuzz target.
        .target(
            name: "SIWAResponder",
            dependencies: [
                "SIWASettings", "SIWASettingKeys", "SIWAStore", "SIWASpool", "SIWAKeys", "SIWATelemetry",
                "SIWAVerification",
                "SIWAJSON", "SIWASupport", "SIWAFastCGI", "SIWARedis",
            ]
        ),

        .executableTarget(
            name: "siwa-endpoint",
            dependencies: [
                "SIWAVerification", "SIWATestKit", "SIWACrypto", "SIWAJSON", "SIWASupport", "SIWAFastCGI",
                "SIWAFastCGIClient", "SIWARedis", "SIWAHTTPS", "SIWATelemetry", "SIWAStore", "SIWASpool",
                "SIWAKeys", "SIWAAppleAPI", "SIWAGoogleAPI", "SIWAWebhooks", "SIWASettingKeys", "SIWASettings",
                "SIWAResponder",
            ]
        ),

        // libFuzzer entry point over the body-to-result path. Build with
        // `swift build --product siwa-fuzz --sanitize=fuzzer --sanitize=address`.
        .executableTarget(
            name: "siwa-fuzz",
            dependencies: ["SIWAVerification", "SIWATestKit", "SIWAResponder", "SIWAJSON"]
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
                "SIWATelemetry", "SIWAStore", "SIWASpool", "SIWAKeys", "SIWAAppleAPI", "SIWAGoogleAPI", "SIWAWebhooks",
                "SIWASettingKeys", "SIWASettings", "SIWAResponder", "SIWAVerification", "SIWATestKit", "SIWACrypto",
                "SIWAJSON",
                "SIWASupport", "SIWAFastCGI", "SIWAFastCGIClient", "SIWARedis", "SIWAHTTPS", "SIWATestSupport",
                "siwa-endpoint",
            ],
            // The HTTPS receivers the deliverer's tests run with python, read from their paths.
            exclude: ["Webhooks/webhook_receiver.py", "Webhooks/kept_connection_receiver.py"]
        ),
    ]
)
