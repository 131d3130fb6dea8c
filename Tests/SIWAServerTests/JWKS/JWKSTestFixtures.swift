import Foundation
import SIWACrypto
import SIWAJSON
import SIWASupport
import SIWATestKit
import SIWAVerification
import Synchronization

extension TestSigningKey {
    /// A request body holding a consent-revoked notification signed with this key.
    func signedBody(audience: String = JWKSTestFixtures.clientID, issuedAt: Int64) throws -> [UInt8] {
        let notification = TestNotification(
            type: "consent-revoked", subject: "001234.abcdef0123456789.0001", clientID: audience,
            tokenID: "AbCdEfGhIjKlMnOpQrStUv", issuedAt: issuedAt)
        return Array(try notification.requestBody(signedWith: self).utf8)
    }
}

enum JWKSTestFixtures {
    static let clientID = "com.example.app"

    static func document(_ keys: [TestSigningKey]) throws -> [UInt8] {
        Array(try TestSigningKey.jwksDocument(keys).utf8)
    }

    static var verifier: NotificationVerifier { NotificationVerifier(keys: JSONWebKeySet(), clientIDs: [clientID]) }

    /// A fresh directory under the system temporary directory; the caller removes it.
    static func temporaryDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-jwks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    static var wallClock: Int64 { Int64(Date().timeIntervalSince1970) }
}

/// A clock the test moves by hand: the wall reading and the monotonic one move together,
/// except when the test steps the wall clock alone (an NTP step, `date -s`).
final class JWKSTestClock: Sendable {
    private struct Reading {
        var wallSeconds: Int64
        var monotonicOffset: Duration = .zero
        var monotonicReads = 0
    }

    private let reading: Mutex<Reading>
    private let monotonicStart = ContinuousClock.now

    init(_ start: Int64 = JWKSTestFixtures.wallClock) { reading = Mutex(Reading(wallSeconds: start)) }

    /// The wall reading, in Unix seconds.
    var now: Int64 { reading.withLock { $0.wallSeconds } }

    /// How often the monotonic reading was taken: the JWKS provider takes it once for each
    /// refresh it considers, so a test sees that the refresher has checked the schedule.
    var monotonicReadCount: Int { reading.withLock { $0.monotonicReads } }

    /// Time passes: both readings move by `delta` seconds.
    func advance(by delta: Int64) {
        reading.withLock {
            $0.wallSeconds += delta
            $0.monotonicOffset += .seconds(delta)
        }
    }

    /// The wall clock is set to another time; no time passes on the monotonic clock.
    func stepWallClock(by delta: Int64) { reading.withLock { $0.wallSeconds += delta } }

    var endpointClock: EndpointClock {
        EndpointClock(
            monotonic: { [self] in
                let offset = reading.withLock { reading -> Duration in
                    reading.monotonicReads += 1
                    return reading.monotonicOffset
                }
                return monotonicStart + offset
            },
            wallMilliseconds: { [self] in now * 1000 })
    }
}
