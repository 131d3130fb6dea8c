import SIWAStore
import SIWAWebhooks
import Testing

/// The destinations file's defaults, in process: what an entry that names only its name, URL
/// and key gets. An address goes only to a destination that asks for it.
@Suite struct WebhookDestinationsFileTests {
    static func destination(_ members: String) throws -> WebhookDestination {
        let text =
            #"{"destinations":[{"name":"d","url":"https://hooks.example.com/siwa","signing_key_files":["/k"]"#
            + members + "}]}"
        let destinations = try WebhookDestinationsFile.parse(Array(text.utf8), readKeys: false)
        return try #require(destinations.first)
    }

    @Test("include_email absent: no address (false); true only when the entry says so")
    func includeEmailDefault() throws {
        #expect(try Self.destination("").includeEmail == false)
        #expect(try Self.destination(#","include_email":false"#).includeEmail == false)
        #expect(try Self.destination(#","include_email":true"#).includeEmail == true)
    }

    @Test("the other defaults: every type, every client ID, no private address, standard-webhooks, system CAs")
    func otherDefaults() throws {
        let destination = try Self.destination("")
        #expect(destination.types == Set(WebhookEvent.types))
        #expect(destination.clientIDs == nil)
        #expect(destination.allowPrivateAddress == false)
        #expect(destination.format == .standardWebhooks)
        #expect(destination.caFile == nil)
    }

    @Test("include_email that is not true or false is refused, naming the member")
    func includeEmailWrongType() {
        #expect {
            _ = try Self.destination(#","include_email":"yes""#)
        } throws: { error in
            (error as? WebhookSettingError)?.message == #"destination d: "include_email" must be true or false"#
        }
    }
}
