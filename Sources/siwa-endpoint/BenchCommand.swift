import Foundation
import SIWASupport
import SIWATestKit
import SIWAVerification

/// `bench`: full verification of one notification of Apple's and of one Security Event
/// Token of Google's against the bare OpenSSL RS256 check of the notification's signature,
/// on one thread, in the same run, as ratios.
enum BenchCommand {
    static let help = """
        usage: siwa-endpoint bench [--iterations N] [--rounds R]
               siwa-endpoint bench --replay --redis-url URL [--records N]  (see bench --replay --help)
               siwa-endpoint bench --webhooks --redis-url URL --receiver-log FILE  (see bench --webhooks --help)
               siwa-endpoint bench --redis-call --redis-url URL [--calls N]  (see bench --redis-call --help)

        Signs one notification with a fresh test key, then alternates R rounds of N
        full verifications (body -> payload -> JWS -> key by kid -> signature ->
        claims -> event) with R rounds of N bare OpenSSL RS256 checks of the same
        signature. Prints the median rate of each and their ratio. Each round also
        runs N full verifications of one Google Security Event Token
        (sessions-revoked) signed with the same key (token -> JWS -> header -> key by
        kid -> signature -> claims -> event -> subject), printed after Apple's lines
        with its own ratio to the same bare check. Build with -c release for
        meaningful figures. Defaults: N = 2000, R = 7.
        """

    static func run(_ words: [String]) throws -> ExitStatus {
        if words.contains("--replay") { return try BenchReplayCommand.run(words) }
        if words.contains("--webhooks") { return try BenchWebhooksCommand.run(words) }
        if words.contains("--redis-call") { return try BenchRedisCallCommand.run(words) }
        if words.contains("--help") {
            Output.line(help)
            return .success
        }
        let arguments = try CommandLineArguments(words, valueOptions: ["--iterations", "--rounds"])
        let iterations = Int(try arguments.integer("--iterations") ?? 2000)
        let rounds = Int(try arguments.integer("--rounds") ?? 7)
        guard iterations > 0, rounds > 0 else { throw UsageError("--iterations and --rounds must be positive") }

        let now = Int64(Date().timeIntervalSince1970)
        let key = try TestSigningKey.generate(keyID: "bench-key")
        let notification = TestNotification(
            type: "email-disabled", subject: "001234.0123456789abcdef0123456789abcdef.0123",
            clientID: "com.example.app",
            email: "abc123@privaterelay.appleid.com", isPrivateEmail: true, issuedAt: now)
        let body = Array(try notification.requestBody(signedWith: key).utf8)
        let keys = try JSONWebKeySet(jsonBytes: Array(try TestSigningKey.jwksDocument([key]).utf8))
        let verifier = NotificationVerifier(keys: keys, clientIDs: ["com.example.app"])

        // Google's token, signed with the same key, so the floor (one RS256 check with
        // this key) is the same for both providers.
        let googleClientID = "123456789012-bench.apps.googleusercontent.com"
        let securityEventToken = Array(
            try TestSecurityEvent.token(
                .sessionsRevoked, clientID: googleClientID, sub: "109876543210987654321", issuedAt: now,
                tokenID: "bench-set-0001", key: key
            ).utf8)
        let securityEventVerifier = SecurityEventVerifier(clientIDs: [googleClientID])
        let googleIssuer = TestSecurityEvent.issuer

        // The bare check's inputs, prepared once outside the timed loop.
        let token = Array(try notification.token(signedWith: key).utf8)
        let lastDot = token.lastIndex(of: UInt8(ascii: "."))!
        let signingInput = Array(token[..<lastDot])
        let signature = Base64URL.decode(token[(lastDot + 1)...])!
        let publicKey = try keys.key(forKeyID: "bench-key")

        guard (try? verifier.verify(body: body, now: now)) != nil,
            publicKey.isValidRS256Signature(signature, for: signingInput)
        else {
            Output.error("bench: the benchmark notification does not verify")
            return .failed
        }
        guard
            (try? securityEventVerifier.verify(token: securityEventToken, keys: keys, issuer: googleIssuer, now: now))
                != nil
        else {
            Output.error("bench: the benchmark Security Event Token does not verify")
            return .failed
        }

        var fullTimes: [Double] = []
        var fullCPUTimes: [Double] = []
        var bareTimes: [Double] = []
        var googleTimes: [Double] = []
        var googleCPUTimes: [Double] = []
        var verified = 0
        for _ in 0..<rounds {
            let cpuStart = threadCPUSeconds()
            fullTimes.append(
                seconds {
                    for _ in 0..<iterations where (try? verifier.verify(body: body, now: now)) != nil { verified += 1 }
                })
            fullCPUTimes.append(threadCPUSeconds() - cpuStart)
            bareTimes.append(
                seconds {
                    for _ in 0..<iterations where publicKey.isValidRS256Signature(signature, for: signingInput) {
                        verified += 1
                    }
                })
            let googleCPUStart = threadCPUSeconds()
            googleTimes.append(
                seconds {
                    for _ in 0..<iterations
                    where
                        (try? securityEventVerifier.verify(
                            token: securityEventToken, keys: keys, issuer: googleIssuer, now: now)) != nil
                    {
                        verified += 1
                    }
                })
            googleCPUTimes.append(threadCPUSeconds() - googleCPUStart)
        }
        guard verified == 3 * rounds * iterations else {
            Output.error("bench: a verification failed during the run")
            return .failed
        }
        let fullRate = Double(iterations) / median(fullTimes)
        let bareRate = Double(iterations) / median(bareTimes)
        let ratio = fullRate / bareRate
        let fullCPUMicroseconds = median(fullCPUTimes) / Double(iterations) * 1e6
        let googleRate = Double(iterations) / median(googleTimes)
        let googleRatio = googleRate / bareRate
        let googleCPUMicroseconds = median(googleCPUTimes) / Double(iterations) * 1e6
        Output.line(
            """
            notification body: \(body.count) bytes; \(rounds) rounds x \(iterations) iterations each, one thread
            bare OpenSSL RS256 check: \(format(bareRate)) /s (\(format(1e6 / bareRate, digits: 1)) us each)
            full verification:        \(format(fullRate)) /s (\(format(1e6 / fullRate, digits: 1)) us each)
            full verification CPU time: \(format(fullCPUMicroseconds, digits: 1)) us each (this thread's, so other load on the machine counts less)
            ratio full/bare: \(format(ratio, digits: 3)) (goal >= 0.90)
            Google SET: \(securityEventToken.count) bytes (sessions-revoked), same key, same rounds, same bare check
            Google SET full verification: \(format(googleRate)) /s (\(format(1e6 / googleRate, digits: 1)) us each)
            Google SET full verification CPU time: \(format(googleCPUMicroseconds, digits: 1)) us each
            ratio Google SET full/bare: \(format(googleRatio, digits: 3)) (goal >= 0.90)
            """)
        return .success
    }

    private static func seconds(_ work: () -> Void) -> Double {
        let start = ContinuousClock.now
        work()
        let elapsed = ContinuousClock.now - start
        return elapsed.inSeconds
    }

    /// CPU time this thread has used, in seconds.
    static func threadCPUSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted[sorted.count / 2]
    }

    private static func format(_ value: Double, digits: Int = 0) -> String {
        String(format: "%.\(digits)f", value)
    }
}
