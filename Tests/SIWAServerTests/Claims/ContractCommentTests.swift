import Foundation
import Testing

/// The contract is written twice: for app servers in docs/contract.md, and as the summary
/// in `NotificationStore`'s doc comment for whoever changes the store. Every key and field
/// the comment names must be on the page, so the two cannot drift apart silently.
@Suite("The contract's doc comment and docs/contract.md")
struct ContractCommentTests {
    /// The doc comment above `public final class NotificationStore`, without the `///`.
    static func storeComment() throws -> String {
        let source = try String(
            contentsOf: ClaimTableTests.root.appendingPathComponent("Sources/SIWAStore/NotificationStore.swift"),
            encoding: .utf8)
        let head = try #require(source.components(separatedBy: "public final class NotificationStore").first)
        return head.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.hasPrefix("///") }.map { String($0.dropFirst(3)) }.joined(separator: "\n")
    }

    /// The key names (`P:...`, with the default prefix) and the field names (with an
    /// underscore) the text names in backticks.
    static func contractNames(in text: String) -> [String] {
        text.components(separatedBy: "`").enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
            .filter {
                ($0.hasPrefix("P:") || $0.contains("_")) && !$0.contains("*") && !$0.contains(" ") && !$0.contains("\"")
            }
            .map { $0.hasPrefix("P:") ? "siwa:" + $0.dropFirst(2) : $0 }
    }

    @Test("every key and field the store's doc comment names is in docs/contract.md")
    func commentNamesAreOnThePage() throws {
        let page = try String(
            contentsOf: ClaimTableTests.root.appendingPathComponent("docs/contract.md"), encoding: .utf8)
        let names = Self.contractNames(in: try Self.storeComment())
        // The user hash's fields, the seen marker, the streams and the channel at least.
        #expect(names.count >= 20, "\(names)")
        for key in ["siwa:user:{<client_id>:<sub>}", "siwa:events", "siwa:deletions", "siwa:notifications"] {
            #expect(names.contains(key), "the comment names \(key)")
        }
        for name in names {
            #expect(
                page.contains(name), "NotificationStore's doc comment names \(name), which docs/contract.md does not")
        }
    }
}
