import SIWASettings
import SIWAStore
import SIWAVerification
import Synchronization

/// What arrives for each configured client ID: the genuine notifications (verified and
/// answered 200) and the last one's time, and the refusals by reason. The silence alert
/// reads it: a healthy endpoint that Apple never reaches (a URL registered for another
/// Services ID, an expired certificate, a firewall, an `aud` nobody listed) shows as a
/// client ID whose last genuine notification grows old.
///
/// Labels are bounded: a configured client ID, `unlisted` for any other `aud` (its value is
/// never a label: anyone can post any text), or `none` when the token's `aud` cannot be read.
public final class ClientTraffic: Sendable {
    /// Why a notification was refused, as a label: a closed set.
    public enum RefusalReason: String, Sendable, CaseIterable {
        /// Apple-signed, for an `aud` not in `SIWA_CLIENT_IDS`: about the deployment.
        case aud
        case iss
        case expired
        /// Not yet valid, issued in the future, a lifetime over a day, an event after `iat`.
        case time
        /// Not signed by the key its kid names, or an algorithm other than RS256.
        case signature
        /// A kid Apple does not publish, or keys we could not fetch or use.
        case key
        /// Not a well-formed notification (or too large, or cut off).
        case malformed

        public init(_ code: VerificationError.Code) {
            switch code {
            case .audNotServed: self = .aud
            case .issMissing, .issMismatch: self = .iss
            case .tokenExpired: self = .expired
            case .tokenNotYetValid, .iatInFuture, .expBeyondLifetime, .eventTimeInFuture: self = .time
            case .algMissing, .algNotAllowed, .critNotSupported, .signatureLengthMismatch, .signatureInvalid:
                self = .signature
            case .kidUnknown, .keysUnavailable: self = .key
            default: self = code.isAboutOurKeySet ? .key : .malformed
            }
        }
    }

    /// The label of a refusal whose `aud` is not one of ours.
    public static let unlistedLabel = RequestSettings.unlistedClientLabel
    /// The label of a refusal whose `aud` could not be read.
    public static let noneLabel = RequestSettings.noneClientLabel

    /// How often, at most, one process writes a client ID's last genuine notification to Redis.
    public static let recordInterval: Int64 = 60_000

    struct Client {
        var genuine = 0
        /// Unix ms of the last genuine notification this process took, or that Redis held.
        var lastGenuineAt: Int64?
        /// Unix ms since when the endpoint has served this client ID (Redis's, once read).
        var servedSince: Int64
        /// Unix ms this process last wrote `lastGenuineAt` to Redis.
        var recordedAt: Int64?
    }

    struct State {
        var clients: [String: Client]
        var refusals: [String: [RefusalReason: Int]]
        /// Whether Redis's record was read (once, when Redis first answers).
        var loaded = false
    }

    public let clientIDs: [String]
    /// Seconds of silence before the alert, per client ID (0: no silence alert).
    public let silenceAlertSeconds: [String: Int]
    private let state: Mutex<State>

    /// `silenceAlertSeconds` holds every client ID served.
    public init(silenceAlertSeconds: [String: Int], startedAt: Int64) {
        self.clientIDs = silenceAlertSeconds.keys.sorted()
        self.silenceAlertSeconds = silenceAlertSeconds
        var clients: [String: Client] = [:]
        var refusals: [String: [RefusalReason: Int]] = [:]
        for id in clientIDs { clients[id] = Client(servedSince: startedAt) }
        for label in clientIDs + [Self.unlistedLabel, Self.noneLabel] { refusals[label] = [:] }
        state = Mutex(State(clients: clients, refusals: refusals))
    }

    /// A genuine notification for `clientID` at `now` (ms). True when this process should
    /// write it to Redis now (at most once a `recordInterval` per client ID).
    public func recordGenuine(clientID: String, at now: Int64) -> Bool {
        state.withLock { state in
            guard var client = state.clients[clientID] else { return false }
            client.genuine += 1
            client.lastGenuineAt = max(client.lastGenuineAt ?? now, now)
            let due = client.recordedAt.map { now - $0 >= Self.recordInterval } ?? true
            if due { client.recordedAt = now }
            state.clients[clientID] = client
            return due
        }
    }

    /// A refusal: `label` from `label(ofAudience:)`.
    public func recordRefusal(label: String, reason: RefusalReason) {
        state.withLock { $0.refusals[label, default: [:]][reason, default: 0] += 1 }
    }

    /// The label a refused token's `aud` gives (`audience` is read without trusting it: the
    /// refusal may be of the signature): the configured client ID it names, `unlisted`, or
    /// `none`. A forged token can move a configured client ID's refusal count, never its
    /// genuine count or its silence.
    public func label(ofAudience audience: String?) -> String {
        guard let audience else { return Self.noneLabel }
        return silenceAlertSeconds[audience] != nil ? audience : Self.unlistedLabel
    }

    /// Whether Redis's record still has to be read.
    public var needsLoading: Bool { state.withLock { !$0.loaded } }

    /// Merges what Redis holds (see `NotificationStore.clientActivity()`): the later of the
    /// last genuine times, the earlier of the serving starts.
    public func load(_ activity: [String: NotificationStore.ClientActivity]) {
        state.withLock { state in
            for (id, record) in activity {
                guard var client = state.clients[id] else { continue }
                if let last = record.lastNotificationAt {
                    client.lastGenuineAt = max(client.lastGenuineAt ?? last, last)
                }
                if let since = record.servedSince { client.servedSince = min(client.servedSince, since) }
                state.clients[id] = client
            }
            state.loaded = true
        }
    }

    /// One client ID's figures, for the metrics.
    public struct Figures: Sendable, Equatable {
        public let clientID: String
        public let genuine: Int
        public let lastGenuineAt: Int64?
        public let servedSince: Int64
        public let refusals: [RefusalReason: Int]
        public let silenceAlertSeconds: Int

        /// Seconds since the last genuine notification, or since the client ID was first
        /// served when none has come.
        public func silenceSeconds(now: Int64) -> Double {
            Double(max(0, now - (lastGenuineAt ?? servedSince))) / 1000
        }
    }

    /// Every configured client ID's figures, sorted, and the refusals of other `aud`s.
    public func figures() -> (clients: [Figures], unlisted: [RefusalReason: Int], none: [RefusalReason: Int]) {
        let snapshot = state.withLock { $0 }
        let clients = clientIDs.map { id in
            let client = snapshot.clients[id] ?? Client(servedSince: 0)
            return Figures(
                clientID: id, genuine: client.genuine, lastGenuineAt: client.lastGenuineAt,
                servedSince: client.servedSince, refusals: snapshot.refusals[id] ?? [:],
                silenceAlertSeconds: silenceAlertSeconds[id] ?? 0)
        }
        return (clients, snapshot.refusals[Self.unlistedLabel] ?? [:], snapshot.refusals[Self.noneLabel] ?? [:])
    }
}
