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

    static func event(provider: String?, type: String) throws -> WebhookEvent {
        var fields = [
            "client_id": "c", "sub": "s", "type": type, "raw_type": type, "event_time": "5", "jti": "j",
            "reason": "hijacking", "email": "never@example.com",
        ]
        if let provider { fields["provider"] = provider }
        return try #require(WebhookEvent(entryID: "1-0", fields: fields))
    }

    @Test("Google's types only where named (google:<type>); without types, Apple's five as before")
    func googleTypesNamed() throws {
        let appleOnly = try Self.destination("")
        let listed = try Self.destination(#","types":["consent-revoked","google:account-disabled"]"#)
        let googleDisabled = try Self.event(provider: "google", type: "account-disabled")
        let appleRevoked = try Self.event(provider: nil, type: "consent-revoked")
        #expect(appleRevoked.provider == "apple" && appleRevoked.googleFields.isEmpty)
        #expect(try Self.event(provider: "apple", type: "consent-revoked") == appleRevoked)
        #expect(googleDisabled.destinationType == "google:account-disabled")
        // Google's fields as the stream holds them, never an address.
        #expect(googleDisabled.googleFields.map { "\($0)=\($1)" } == ["reason=hijacking"])
        #expect(!appleOnly.wants(googleDisabled) && appleOnly.wants(appleRevoked))
        #expect(listed.wants(googleDisabled) && listed.wants(appleRevoked))
        // Apple's account-disabled does not exist: a type named for Google stays Google's.
        #expect(!listed.wants(try Self.event(provider: "google", type: "consent-revoked")))
        #expect(try Self.event(provider: "google", type: "consent-revoked").type == "unknown")
        #expect(!listed.wants(try Self.event(provider: "google", type: "sessions-revoked")))
        // A provider this release does not know: not an event it sends.
        #expect(
            WebhookEvent(
                entryID: "1-0",
                fields: ["provider": "other", "client_id": "c", "sub": "s", "type": "x", "event_time": "5", "jti": "j"])
                == nil)
        #expect {
            _ = try Self.destination(#","types":["google:email-enabled"]"#)
        } throws: { error in
            (error as? WebhookSettingError)?.message.hasPrefix(#"destination d: "types" names google:email-enabled;"#)
                == true
        }
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
