import SIWAKeys
import Synchronization

/// An in-process stand-in for the HTTPS fetch of Apple's JWKS (Apple cannot be reached
/// from a test): serves the document set last, or fails, and counts the fetches.
final class JWKSFetcherDouble: JWKSFetching {
    struct Unreachable: Error, CustomStringConvertible {
        var description: String { "the JWKS host does not answer (test double)" }
    }

    private struct State {
        var document: [UInt8]?
        var fetches = 0
    }
    private let state = Mutex(State())

    /// What the next fetches return; nil makes them fail.
    func serve(_ document: [UInt8]?) { state.withLock { $0.document = document } }

    var fetchCount: Int { state.withLock { $0.fetches } }

    func fetch(_ url: String) throws -> [UInt8] {
        let document = state.withLock { state in
            state.fetches += 1
            return state.document
        }
        guard let document else { throw Unreachable() }
        return document
    }
}
