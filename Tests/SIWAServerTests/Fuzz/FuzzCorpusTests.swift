import Foundation
import SIWAResponder
import SIWATestKit
import Testing

/// Every seed in Fuzz/corpus reaches what it is meant to reach, through the very code
/// the fuzzer runs (`FuzzTarget`): a body seed verifies (it does not stop at the
/// signature), a claims seed is accepted, a spool segment yields records, a JWKS has a
/// usable key, settings and URLs parse. Only the seeds named here are refusals on purpose.
@Suite("Fuzz seed corpus")
struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fuzz/corpus")

    /// Seeds that are refusals by design, with the code each must get.
    static let refusals: [String: String] = [
        "alg-none.json": "alg_not_allowed",
        "nested.json": "body_not_object",
    ]

    @Test("every seed verifies (or is a named refusal), and every parser has a seed")
    func everySeedVerifies() throws {
        let target = try FuzzTarget(
            jwks: FuzzFixture.jwksDocument, clientID: FuzzFixture.clientID, now: FuzzFixture.now)
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).sorted()
        try #require(names.count >= 10, "the corpus is at \(Self.corpus.path)")
        var selectors: Set<UInt8> = []
        for name in names {
            let bytes = [UInt8](try Data(contentsOf: Self.corpus.appendingPathComponent(name)))
            if let first = bytes.first, FuzzTarget.Selector(rawValue: first) != nil { selectors.insert(first) }
            let outcome = target.check(bytes)
            if let code = Self.refusals[name] {
                #expect(outcome == .refused(code), "\(name)")
            } else if case .accepted = outcome {
                continue
            } else {
                Issue.record("seed \(name) does not reach its parser's success: \(outcome)")
            }
        }
        #expect(selectors == Set(FuzzTarget.Selector.allCases.map(\.rawValue)), "a parser has no seed")
        #expect(names.contains { !$0.hasSuffix(".bin") }, "no whole-body seed")
    }
}
