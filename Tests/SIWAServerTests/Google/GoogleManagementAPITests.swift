import Foundation
import SIWACrypto
import SIWAGoogleAPI
import SIWAJSON
import SIWASettings
import SIWAStore
import Testing

/// The RISC management API client `siwa-endpoint google` uses, in process, against the
/// stand-in for Google's API over HTTPS under a test CA: the authorisation JWT Google
/// receives, each endpoint's body, and each answer Google can give.
@Suite("Google's RISC management API: the JWT, the bodies, the errors", .serialized)
struct GoogleManagementAPITests {
    static let allEvents = GoogleManagementEvents.all.map(\.uri)

    @Test(
        "register: the JWT is RS256 with the key's kid, iss = sub = the service account, Google's aud, exp = iat + 3600, and verifies with the public key; the body is exactly push to the URL with every event type"
    )
    func registerSendsTheJWTAndBodyGoogleDescribes() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start()
        let before = Int64(Date().timeIntervalSince1970)
        try stack.client().updateStream(receiverURL: GoogleManagementStack.receiverURL, eventTypes: Self.allEvents)
        let after = Int64(Date().timeIntervalSince1970)
        let request = try #require(try stack.requests().first)
        #expect(request.endpoint == "stream:update" && request.status == 200 && request.problem == nil)
        #expect(
            request.header == [
                "alg": .string("RS256"), "typ": .string("JWT"), "kid": .string(GoogleManagementStack.keyID),
            ])
        #expect(request.claims["iss"] == .string(GoogleManagementStack.clientEmail))
        #expect(request.claims["sub"] == .string(GoogleManagementStack.clientEmail))
        #expect(
            request.claims["aud"]
                == .string("https://risc.googleapis.com/google.identity.risc.v1beta.RiscManagementService"))
        guard case .integer(let iat)? = request.claims["iat"], case .integer(let exp)? = request.claims["exp"] else {
            Issue.record("iat and exp are integers: \(request.claims)")
            return
        }
        #expect(iat >= before && iat <= after && exp == iat + 3600)
        #expect(Set(request.claims.keys) == ["iss", "sub", "aud", "iat", "exp"])
        #expect(
            request.body
                == .object([
                    "delivery": .object([
                        "delivery_method": .string("https://schemas.openid.net/secevent/risc/delivery-method/push"),
                        "url": .string(GoogleManagementStack.receiverURL),
                    ]),
                    "events_requested": .array(
                        [
                            "https://schemas.openid.net/secevent/risc/event-type/sessions-revoked",
                            "https://schemas.openid.net/secevent/oauth/event-type/tokens-revoked",
                            "https://schemas.openid.net/secevent/oauth/event-type/token-revoked",
                            "https://schemas.openid.net/secevent/risc/event-type/account-disabled",
                            "https://schemas.openid.net/secevent/risc/event-type/account-enabled",
                            "https://schemas.openid.net/secevent/risc/event-type/account-credential-change-required",
                            "https://schemas.openid.net/secevent/risc/event-type/verification",
                        ].map { .string($0) }),
                ]))

        // What Google holds now is what `google status` shows.
        let stream = try stack.client().stream()
        guard case .object(let delivery)? = stream["delivery"] else {
            Issue.record("no delivery in \(stream)")
            return
        }
        #expect(delivery["url"] == .string(GoogleManagementStack.receiverURL))
        #expect(stream["events_requested"] == .array(Self.allEvents.map { .string($0) }))
    }

    @Test("a key Google does not hold (the same kid and email, another RSA key): 401, google_unauthorized, not retried")
    func anotherKeyIsRefused() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start()
        let stranger = GoogleServiceAccountKey(
            clientEmail: GoogleManagementStack.clientEmail, privateKeyID: GoogleManagementStack.keyID,
            privateKey: try RSAPrivateKey.generate())
        let error = try #require(throws: GoogleManagementError.self) {
            try stack.client(key: stranger).updateStream(
                receiverURL: GoogleManagementStack.receiverURL, eventTypes: Self.allEvents)
        }
        #expect(error.code == .unauthorized && error.httpStatus == 401)
        #expect(try stack.requests().map { "\($0.status) \($0.problem ?? "")" } == ["401 signature"])
    }

    @Test(
        "before any register: status and enable answer 404 google_not_configured; after it, enable, disable and verify send exactly their bodies"
    )
    func statusBodiesAndNoConfiguration() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start()
        let client = try stack.client()
        #expect(try #require(throws: GoogleManagementError.self) { _ = try client.stream() }.code == .notConfigured)
        #expect(
            try #require(throws: GoogleManagementError.self) { try client.updateStatus(enabled: true) }.code
                == .notConfigured)
        try client.updateStream(receiverURL: GoogleManagementStack.receiverURL, eventTypes: Self.allEvents)
        try client.updateStatus(enabled: false)
        try client.updateStatus(enabled: true)
        try client.verify(state: "0123abcd")
        let requests = try stack.requests()
        #expect(
            requests.map { "\($0.endpoint) \($0.status)" } == [
                "stream 404", "status:update 404", "stream:update 200", "status:update 200", "status:update 200",
                "stream:verify 200",
            ])
        #expect(requests[3].body == .object(["status": .string("disabled")]))
        #expect(requests[4].body == .object(["status": .string("enabled")]))
        #expect(requests[5].body == .object(["state": .string("0123abcd")]))
        #expect(requests.allSatisfy { $0.problem == nil || $0.problem == "not_configured" })
    }

    /// One scripted answer sequence and what the client must make of it.
    struct ErrorCase: CustomTestStringConvertible, Sendable {
        let name: String
        let answers: [[String: String]]
        /// nil: the call succeeds in the end.
        let code: GoogleManagementError.Code?
        let requests: Int
        let messageHolds: String
        var testDescription: String { name }
    }

    static let errorCases: [ErrorCase] = [
        ErrorCase(
            name: "400: google_bad_request at once", answers: [["status": "400", "message": "Missing field url"]],
            code: .badRequest, requests: 1, messageHolds: "Google says \"Missing field url\""),
        ErrorCase(
            name: "401: google_unauthorized at once", answers: [["status": "401", "message": "Invalid JWT"]],
            code: .unauthorized, requests: 1, messageHolds: "SIWA_GOOGLE_SERVICE_ACCOUNT_FILE"),
        ErrorCase(
            name: "403 (no RISC role): google_forbidden, Google's cause shown",
            answers: [["status": "403", "message": "Permission 'riscconfigs.update' denied"]], code: .forbidden,
            requests: 1, messageHolds: "Permission 'riscconfigs.update' denied"),
        ErrorCase(
            name: "404: google_not_configured", answers: [["status": "404", "message": "not found"]],
            code: .notConfigured, requests: 1, messageHolds: "google register"),
        ErrorCase(
            name: "500 to every try: google_unavailable after 3 tries",
            answers: Array(repeating: ["status": "500", "message": "backend error"], count: 3), code: .unavailable,
            requests: 3, messageHolds: "every try"),
        ErrorCase(
            name: "500 once: retried, done", answers: [["status": "500", "message": "backend error"]], code: nil,
            requests: 2, messageHolds: ""),
        ErrorCase(
            name: "429 asking 3600 s: google_throttled at once, not waited",
            answers: [["status": "429", "message": "quota", "retry_after": "3600"]], code: .throttled, requests: 1,
            messageHolds: "asks to wait 3600 s"),
        ErrorCase(
            name: "429 to every try: google_throttled after 3",
            answers: Array(repeating: ["status": "429", "message": "quota", "retry_after": "0"], count: 3),
            code: .throttled, requests: 3, messageHolds: "3 times in a row"),
        ErrorCase(
            name: "418: google_unexpected_answer", answers: [["status": "418", "message": "teapot"]],
            code: .unexpectedAnswer, requests: 1, messageHolds: "HTTP 418"),
    ]

    @Test("each answer of Google's becomes its named error (or a retry that ends done)", arguments: errorCases)
    func errorPaths(_ errorCase: ErrorCase) throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start(answers: ["stream:update": errorCase.answers])
        let client = try stack.client()
        do {
            try client.updateStream(receiverURL: GoogleManagementStack.receiverURL, eventTypes: Self.allEvents)
            #expect(errorCase.code == nil, "the call succeeded")
        } catch {
            #expect(error.code == errorCase.code)
            #expect(error.message.contains(errorCase.messageHolds), "\(error.message)")
            #expect(!error.message.contains("Bearer") && !error.message.contains("eyJ"), "no token in a message")
        }
        #expect(try stack.requests().count == errorCase.requests)
    }

    @Test("Google's message reaches the operator's terminal without control characters (no escape sequence acts)")
    func googlesMessageIsPrintable() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start(answers: [
            "stream:update": [["status": "403", "message": "denied\u{1B}]0;title\u{07} here\u{9B}31m\u{7F}\nnext"]]
        ])
        let error = try #require(throws: GoogleManagementError.self) {
            try stack.client().updateStream(receiverURL: GoogleManagementStack.receiverURL, eventTypes: Self.allEvents)
        }
        #expect(error.code == .forbidden)
        #expect(error.message.contains("Google says \"denied]0;title here31mnext\""), "\(error.message)")
    }

    @Test("a 429 with Retry-After 1: the next try waits a second, then succeeds")
    func retryAfterIsHonoured() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        try stack.start(answers: ["stream:update": [["status": "429", "message": "slow down", "retry_after": "1"]]])
        let started = ContinuousClock.now
        try stack.client().updateStream(receiverURL: GoogleManagementStack.receiverURL, eventTypes: Self.allEvents)
        #expect(ContinuousClock.now - started >= .seconds(1))
        #expect(try stack.requests().map(\.status) == [429, 200])
    }

    @Test("nothing listens at the API URL: google_unreachable after the tries")
    func unreachable() throws {
        let stack = try GoogleManagementStack()
        defer { stack.shutdown() }
        let port = try LoopbackPort.free()
        let client = GoogleManagementClient(
            apiURL: "https://localhost:\(port)/",
            authorization: GoogleManagementAuthorization(
                key: try GoogleServiceAccountKey(contentsOf: stack.keyFilePath)),
            caFile: stack.authority.caCertificatePath, timeoutSeconds: 2, attempts: 2, retryDelayMilliseconds: 10)
        let error = try #require(throws: GoogleManagementError.self) { _ = try client.stream() }
        #expect(error.code == .unreachable && error.httpStatus == nil)
        #expect(error.message.contains("connect_failed"))
    }

    @Test("SIWA_GOOGLE_RECEIVER_URL must be https; the API URL https (http only to loopback)")
    func receiverURLMustBeHTTPS() throws {
        let base = ["SIWA_GOOGLE_SERVICE_ACCOUNT_FILE": "/nonexistent/key.json"]
        // Plain http to loopback passes the fetcher's rule, not the receiver's: Google pushes over HTTPS only.
        for url in [
            "http://example.com/google/risc", "http://localhost/google/risc", "http://127.0.0.1:8443/google/risc",
            "ftp://example.com/", "https://user:pw@example.com/google/risc", "https://example.com/google/risc#x",
        ] {
            let error = try #require(throws: ConfigurationError.self) {
                try GoogleManagementConfiguration(environment: base.merging(["SIWA_GOOGLE_RECEIVER_URL": url]) { $1 })
            }
            #expect(error.setting == "SIWA_GOOGLE_RECEIVER_URL")
        }
        let error = try #require(throws: ConfigurationError.self) {
            try GoogleManagementConfiguration(
                environment: base.merging(["SIWA_GOOGLE_RISC_API_URL": "http://risc.googleapis.com"]) { $1 })
        }
        #expect(error.setting == "SIWA_GOOGLE_RISC_API_URL")
        let missing = try #require(throws: ConfigurationError.self) {
            try GoogleManagementConfiguration(environment: [:])
        }
        #expect(missing.setting == "SIWA_GOOGLE_SERVICE_ACCOUNT_FILE")
        let accepted = try GoogleManagementConfiguration(
            environment: base.merging(["SIWA_GOOGLE_RECEIVER_URL": GoogleManagementStack.receiverURL]) { $1 })
        #expect(accepted.receiverURL == GoogleManagementStack.receiverURL)
        #expect(accepted.apiURL == "https://risc.googleapis.com")
    }

    @Test("each verify's state is fresh: 128 random bits in hex, never the same twice")
    func freshStates() {
        let states = (0..<64).map { _ in GoogleVerificationWatch.freshState() }
        #expect(Set(states).count == 64)
        #expect(states.allSatisfy { $0.count == 32 && $0.allSatisfy(\.isHexDigit) && $0 == $0.lowercased() })
    }
}
