import SIWACrypto
import SIWATestKit
import SIWAVerification
import Synchronization
import Testing

/// An in-process key source: holds a key set, and on a refresh request swaps in the next
/// one (or reports that no refresh was made). It stands in for the JWKS provider.
final class KeySourceDouble: SigningKeySource {
    private struct State {
        var keys: JSONWebKeySet
        var next: JSONWebKeySet?
        var refreshRequests = 0
    }
    private let state: Mutex<State>

    /// - Parameter next: the set a refresh brings; nil means no refresh could be made.
    init(keys: JSONWebKeySet, next: JSONWebKeySet?) {
        state = Mutex(State(keys: keys, next: next))
    }

    var refreshRequests: Int { state.withLock { $0.refreshRequests } }

    func key(forKeyID kid: String) throws(VerificationError) -> RSAPublicKey {
        let keys = state.withLock { $0.keys }
        return try keys.key(forKeyID: kid)
    }

    func refreshForUnknownKey() -> Bool {
        state.withLock { state in
            state.refreshRequests += 1
            guard let next = state.next else { return false }
            state.keys = next
            return true
        }
    }
}

/// `NotificationVerifier.verify(body:keys:now:)`: the unknown-kid rule, with a key source double.
@Suite("Unknown-kid rule")
struct KeySourceRuleTests {
    static let onlySecondary = try! JSONWebKeySet(
        jsonBytes: Array(TestSigningKey.jwksDocument([Fixtures.secondary]).utf8))
    static let verifier = NotificationVerifier(clientIDs: [Fixtures.clientID])

    static func code(_ body: [UInt8], _ source: KeySourceDouble) -> String? {
        do {
            _ = try verifier.verify(body: body, keys: source, now: Fixtures.now)
            return nil
        } catch {
            return error.code.rawValue
        }
    }

    @Test("a held kid verifies without asking for a refresh")
    func heldKey() {
        let source = KeySourceDouble(keys: Fixtures.keys, next: nil)
        #expect(Self.code(Fixtures.body(), source) == nil)
        #expect(source.refreshRequests == 0)
    }

    @Test("an unknown kid that a refresh brings verifies after one refresh")
    func refreshBringsKey() {
        let source = KeySourceDouble(keys: Self.onlySecondary, next: Fixtures.keys)
        #expect(Self.code(Fixtures.body(), source) == nil)
        #expect(source.refreshRequests == 1)
    }

    @Test("no keys yet, and a refresh brings them: verifies")
    func emptyThenRefreshed() {
        let source = KeySourceDouble(keys: JSONWebKeySet(), next: Fixtures.keys)
        #expect(Self.code(Fixtures.body(), source) == nil)
        #expect(source.refreshRequests == 1)
    }

    @Test("a refresh made for this request still lacks the kid: kid_unknown (401)")
    func refreshedStillUnknown() throws {
        let source = KeySourceDouble(keys: Self.onlySecondary, next: Self.onlySecondary)
        #expect(Self.code(Fixtures.body(), source) == "kid_unknown")
        #expect(source.refreshRequests == 1)
        #expect(VerificationError.Code.kidUnknown.failureClass == .notAuthentic)
    }

    @Test("no refresh could be made (rate limit or failure): keys_unavailable (503), not kid_unknown")
    func notRefreshed() {
        let source = KeySourceDouble(keys: Self.onlySecondary, next: nil)
        #expect(Self.code(Fixtures.body(), source) == "keys_unavailable")
        #expect(source.refreshRequests == 1)
        #expect(VerificationError.Code.keysUnavailable.failureClass == .retryable)
    }

    @Test("no keys at all and no refresh: keys_unavailable")
    func emptyNotRefreshed() {
        let source = KeySourceDouble(keys: JSONWebKeySet(), next: nil)
        #expect(Self.code(Fixtures.body(), source) == "keys_unavailable")
    }

    @Test("other refusals ask for no refresh")
    func otherRefusalNoRefresh() {
        let source = KeySourceDouble(keys: Fixtures.keys, next: nil)
        #expect(Self.code(Fixtures.body(key: Fixtures.secondary), source) == "signature_invalid")
        #expect(Self.code([UInt8]("{}".utf8), source) != nil)
        #expect(source.refreshRequests == 0)
    }

    @Test("a fixed key set stays authoritative: an unknown kid is kid_unknown")
    func fixedSet() {
        let verifier = NotificationVerifier(keys: Self.onlySecondary, clientIDs: [Fixtures.clientID])
        #expect(Fixtures.refusal(Fixtures.body(), verifier: verifier)?.code == .kidUnknown)
    }
}
