import SIWAHTTPS
import Testing

/// `Retry-After` as RFC 9110 writes it: delay seconds or an IMF-fixdate, read the same for
/// Apple's 429s (transfer, reconcile, revoke).
@Suite("Retry-After")
struct RetryAfterTests {
    /// 2026-12-05T16:00:00Z.
    static let now: Int64 = 1_796_486_400

    @Test(
        "delay seconds and HTTP dates; a past date is 0; anything else is not a Retry-After",
        arguments: [
            ("2", 2), (" 120\t", 120), ("0", 0), ("Sat, 05 Dec 2026 16:00:30 GMT", 30),
            ("Sat, 05 Dec 2026 15:00:00 GMT", 0),
        ] as [(String, Int64)])
    func read(_ text: String, _ seconds: Int64) {
        #expect(RetryAfter.seconds(text, nowSeconds: Self.now) == seconds)
    }

    @Test(
        "refused: negative, fractional, empty, another date form, not GMT",
        arguments: [
            "-1", "1.5", "", "soon", "Saturday, 05-Dec-26 16:00:30 GMT", "Sat Dec  5 16:00:30 2026",
            "Sat, 05 Dec 2026 16:00:30 UTC", "99999999999",
        ])
    func refused(_ text: String) {
        #expect(RetryAfter.seconds(text, nowSeconds: Self.now) == nil)
    }
}
