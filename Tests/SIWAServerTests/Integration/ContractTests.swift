import Foundation
import SIWAJSON
import SIWARedis
import SIWAVerification
import Testing

/// The example readers' files, docs/contract.md and the machine-readable contract.
enum ExampleFiles {
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func path(_ relative: String) -> String { packageRoot.appendingPathComponent(relative).path }

    static func text(_ relative: String) throws -> String {
        try String(contentsOfFile: path(relative), encoding: .utf8)
    }

    /// scripts/test makes a virtualenv with redis-py in .build/test-venv and names its python in
    /// SIWA_TEST_PYTHON; without either, the system python3 (which needs redis-py installed).
    static let python: String = {
        if let named = ProcessInfo.processInfo.environment["SIWA_TEST_PYTHON"] { return named }
        let venv = path(".build/test-venv/bin/python")
        return FileManager.default.isExecutableFile(atPath: venv) ? venv : "/usr/bin/python3"
    }()

    /// Every reader docs/contract.md shows: Python, Node.js, Ruby.
    static let readers = [
        "examples/python/siwa_state.py", "examples/python/siwa_deletions.py", "examples/node/siwa_reader.js",
        "examples/ruby/siwa_reader.rb", "examples/python/siwa_transfer.py",
    ]

    /// A flat JSON object as strings (`null`, `true`/`false`, numbers as their text).
    static func flatJSON(_ text: String) throws -> [String: String] {
        guard case .object(let members) = try StrictJSONParser.parse(Array(text.utf8)) else { return [:] }
        return members.mapValues { value in
            switch value {
            case .bool(let flag): flag ? "true" : "false"
            case .integer(let number): String(number)
            case .string(let text): text
            default: "null"
            }
        }
    }

    /// examples/contract.json.
    struct Contract {
        let object: [String: JSONValue]

        init() throws {
            guard case .object(let object) = try StrictJSONParser.parse(Array(try text("examples/contract.json").utf8))
            else { throw Failure(description: "examples/contract.json is not an object") }
            self.object = object
        }

        func names(_ member: String) -> Set<String> {
            guard case .object(let fields)? = object[member] else { return [] }
            return Set(fields.keys)
        }

        func strings(_ member: String) -> [String] {
            guard case .array(let values)? = object[member] else { return [] }
            return values.compactMap { if case .string(let text) = $0 { text } else { nil } }
        }

        func unit(_ member: String, _ field: String) -> String? {
            guard case .object(let fields)? = object[member], case .string(let unit)? = fields[field] else {
                return nil
            }
            return unit
        }

        /// Every name of Google's part (contract version 2): its user fields, stream fields and types.
        var googleNames: Set<String> {
            guard case .object(let google)? = object["google"] else { return [] }
            var names: Set<String> = []
            for member in ["user_fields", "stream_fields"] {
                if case .object(let fields)? = google[member] { names.formUnion(fields.keys) }
            }
            if case .array(let types)? = google["types"] {
                names.formUnion(types.compactMap { if case .string(let text) = $0 { text } else { nil } })
            }
            return names
        }

        /// A key pattern with the default prefix: `siwa:user:{<client_id>:<sub>}`.
        func keyPattern(_ name: String) -> String? {
            guard case .object(let keys)? = object["keys"], case .object(let key)? = keys[name],
                case .string(let pattern)? = key["pattern"]
            else { return nil }
            return pattern.replacingOccurrences(of: "<prefix>", with: "siwa")
        }
    }

    struct Failure: Error, CustomStringConvertible { let description: String }
}

/// The contract stated once (docs/contract.md, examples/contract.json), and checked three ways: against
/// what the real responder writes, against docs/contract.md, and against every example reader.
@Suite("The Redis contract", .serialized)
struct ContractTests {
    @Test("what the real responder writes has exactly the contract's keys, fields, units and message members")
    func responderWritesTheContract() throws {
        let contract = try ExampleFiles.Contract()
        // What the responder writes is the same in a process and in process.
        let stack = try ServeStack(inProcess: true)
        defer { stack.shutdown() }
        let subscriber = try RedisTestSubscriber(port: stack.redis.port, channel: "siwa:notifications")
        let posts: [(String, String, String?)] = [
            ("email-enabled", "000030.c.0001", "c@privaterelay.appleid.com"), ("consent-revoked", "000030.c.0002", nil),
            ("account-deleted", "000030.c.0003", nil), ("email-disabled", "000030.c.0004", "d@example.com"),
            ("some-new-type", "000030.c.0005", nil),
        ]
        for (type, sub, email) in posts {
            let body = try stack.body(type: type, sub: sub, email: email, isPrivateEmail: email.map { _ in true })
            #expect(try stack.post(body).status == 200)
        }
        let connection = stack.redisConnection()

        // Keys: every key is one of the contract's patterns, with its type.
        let keys = (try connection.command("KEYS", "*").array ?? []).compactMap(\.string)
        for key in keys {
            let type = try connection.command("TYPE", key).string
            if key == "siwa:events" || key == "siwa:deletions" {
                #expect(type == "stream")
            } else if key == "siwa:clients" {
                // The endpoint's own bookkeeping (the silence figures), outside the contract.
                #expect(type == "hash")
            } else if key.hasPrefix("siwa:user:{\(ServeStack.clientID):000030.c.") && key.hasSuffix("}") {
                #expect(type == "hash")
            } else {
                #expect(key.hasPrefix("siwa:seen:{\(ServeStack.clientID):000030.c.") && type == "string", "\(key)")
            }
        }
        #expect(keys.filter { $0.hasPrefix("siwa:seen:") }.count == posts.count)
        #expect(contract.keyPattern("user") == "siwa:user:{<client_id>:<sub>}")
        #expect(contract.keyPattern("seen") == "siwa:seen:{<client_id>:<sub>}:<jti>")
        #expect(contract.keyPattern("events") == "siwa:events")
        #expect(contract.keyPattern("deletions") == "siwa:deletions")
        #expect(contract.keyPattern("notifications") == "siwa:notifications")

        // The hash: the union of the fields written is the contract's, and times are ms.
        var hashFields: Set<String> = []
        for (_, sub, _) in posts {
            for (field, value) in try stack.userHash(sub: sub) {
                hashFields.insert(field)
                if contract.unit("user_fields", field) == "ms" {
                    #expect(Int64(value).map { $0 > 1_000_000_000_000 } == true, "\(field)=\(value) is not ms")
                }
            }
        }
        // `refresh_token_refused_at` and `tokens_revoked_at` are written by `reconcile` and
        // `revoke` only (their own tests check them).
        #expect(
            hashFields
                == contract.names("user_fields").subtracting([
                    "refresh_token_refused_at", "tokens_revoked_at", "transferred_to", "transferred_from",
                    "transferred_at",
                ]))

        // The stream: the same.
        var streamFields: Set<String> = []
        let entries = try connection.command("XRANGE", "siwa:events", "-", "+").array ?? []
        #expect(entries.count == posts.count)
        for entry in entries {
            let fields = entry.array?.last?.fieldMap ?? [:]
            streamFields.formUnion(fields.keys)
            #expect(contract.strings("types").contains(fields["type"] ?? ""), "\(fields["type"] ?? "")")
            #expect(Int64(fields["event_time"] ?? "").map { $0 > 1_000_000_000_000 } == true)
        }
        #expect(streamFields == contract.names("stream_fields"))

        // The deletions stream: the events entry of each account-deleted, field for field.
        let deletions = (try connection.command("XRANGE", "siwa:deletions", "-", "+").array ?? []).map {
            $0.array?.last?.fieldMap ?? [:]
        }
        let deletedEntries = entries.map { $0.array?.last?.fieldMap ?? [:] }.filter { $0["type"] == "account-deleted" }
        #expect(deletions.count == 1)
        #expect(deletions == deletedEntries)

        // The channel: one message per notification, with exactly the contract's members.
        let messages = try subscriber.messages(within: 10, limit: posts.count)
        #expect(messages.count == posts.count)
        for message in messages {
            #expect(Set(try ExampleFiles.flatJSON(message).keys) == contract.names("message_fields"))
            #expect(!message.contains("@"), "a message never carries an email address")
        }
    }

    @Test(
        "on a Redis Cluster, the responder writes the contract's keys under the hash-tag prefix examples/contract.json names, all in one slot on one primary"
    )
    func clusterKeysShareOneSlot() throws {
        let contract = try ExampleFiles.Contract()
        guard case .object(let clusterEntry)? = contract.object["cluster"],
            case .string(let prefix)? = clusterEntry["key_prefix"], case .string(let setting)? = clusterEntry["setting"]
        else { throw ExampleFiles.Failure(description: "examples/contract.json has no cluster entry") }
        #expect(prefix == RedisClusterNodes.keyPrefix)
        #expect(setting == "SIWA_REDIS_CLUSTER_NODES")
        let cluster = try RedisClusterNodes()
        defer { cluster.shutdown() }
        let stack = try ServeStack(extraEnvironment: ClusterServeTests.environment(cluster), inProcess: true)
        defer { stack.shutdown() }
        for (type, sub) in [("consent-revoked", "000031.c.0001"), ("account-deleted", "000031.c.0002")] {
            #expect(try stack.post(try stack.body(type: type, sub: sub)).status == 200)
        }
        let ownerPort = try #require(cluster.slotOwnerPort())
        let owner = cluster.connection(port: ownerPort)
        let keys = Set((try owner.command("KEYS", "*").array ?? []).compactMap(\.string))
        let patterns = ["user", "seen", "events", "deletions"].compactMap { name in
            contract.keyPattern(name).map { "\(name)=" + $0.replacingOccurrences(of: "siwa:", with: prefix + ":") }
        }
        #expect(
            patterns == [
                "user={siwa}:user:{<client_id>:<sub>}", "seen={siwa}:seen:{<client_id>:<sub>}:<jti>",
                "events={siwa}:events", "deletions={siwa}:deletions",
            ])
        let client = ServeStack.clientID
        #expect(keys.contains("{siwa}:user:{\(client):000031.c.0001}"))
        #expect(keys.contains("{siwa}:user:{\(client):000031.c.0002}"))
        #expect(keys.filter { $0.hasPrefix("{siwa}:seen:{\(client):000031.c.") }.count == 2)
        // `{siwa}:clients`: the silence figures' bookkeeping, in the same slot.
        #expect(keys.isSuperset(of: ["{siwa}:events", "{siwa}:deletions", "{siwa}:clients"]))
        #expect(keys.count == 7, "\(keys.sorted())")
        // Every key in the prefix's one slot, as Redis itself computes it; no other primary holds a key.
        for key in keys {
            #expect(try owner.command("CLUSTER", "KEYSLOT", key).integer == Int64(RedisClusterNodes.slot), "\(key)")
        }
        for node in cluster.nodes where node.port != ownerPort && cluster.role(of: node.port) == "master" {
            #expect(try cluster.connection(port: node.port).command("DBSIZE").integer == 0)
        }
    }

    /// The backticked names in the first column of the first table after `heading`.
    static func tableNames(_ contractPage: String, after heading: String) -> Set<String> {
        let lines = contractPage.components(separatedBy: "\n")
        guard let start = lines.firstIndex(where: { $0.hasPrefix(heading) }) else { return [] }
        var names: Set<String> = []
        var inTable = false
        for line in lines[(start + 1)...] {
            if line.hasPrefix("|") {
                inTable = true
                let cell = line.split(separator: "|", omittingEmptySubsequences: true).first ?? ""
                let parts = cell.split(separator: "`", omittingEmptySubsequences: false)
                for (index, part) in parts.enumerated() where index % 2 == 1 { names.insert(String(part)) }
            } else if inTable {
                break
            }
        }
        return names
    }

    @Test("docs/contract.md states the contract's keys, hash fields, stream fields and message members")
    func readmeStatesTheContract() throws {
        let contract = try ExampleFiles.Contract()
        let contractPage = try ExampleFiles.text("docs/contract.md")
        #expect(
            Self.tableNames(contractPage, after: "**`siwa:user:{<client_id>:<sub>}`**") == contract.names("user_fields")
        )
        #expect(Self.tableNames(contractPage, after: "**`siwa:events`**") == contract.names("stream_fields"))
        #expect(
            Self.tableNames(contractPage, after: "**Channel `siwa:notifications`**") == contract.names("message_fields")
        )
        #expect(contractPage.contains("**`siwa:seen:{<client_id>:<sub>}:<jti>`**"))
        #expect(contractPage.contains("**`siwa:deletions`**"))
        #expect(contractPage.contains("`examples/contract.json`"))
    }

    /// The names a reader reads from Redis: subscripts (`fields["x"]`, `fields[b"x"]`; not
    /// an assignment, which builds the reader's own output),
    /// lookups (`.get("x")`, `key?("x")`, `"x" in fields`, `hget(key, "x")`), JavaScript's
    /// `fields.x` / `message.x` and destructured messages, and quoted event types.
    static func contractLikeNames(_ source: String) -> Set<String> {
        var names: Set<String> = []
        let patterns = [
            #"\[b?["']([a-z_]+)["']\](?!\s*=[^=])"#, #"\.get\(b?["']([a-z_]+)["']"#, #"key\?\(["']([a-z_]+)["']\)"#,
            #"["']([a-z_]+)["'] in \w"#, #"(?i)hget\(.*,\s*b?["']([a-z_]+)["']\)"#,
            #"\b(?:fields|message)\.([a-z_]+)\b(?![(?])"#, #"const \{ ([a-z_, ]+) \} = JSON\.parse"#,
            #"["'`]((?:email|consent|account)-[a-z]+)["'`]"#, #"%w\[([a-z\- ]+)\]"#,
        ]
        for pattern in patterns {
            let expression = try! NSRegularExpression(pattern: pattern)
            let range = NSRange(source.startIndex..., in: source)
            for match in expression.matches(in: source, range: range) {
                guard let found = Range(match.range(at: 1), in: source) else { continue }
                names.formUnion(
                    source[found].split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init))
            }
        }
        return names
    }

    @Test("every name a reader uses for a field or a type is one the contract defines", arguments: ExampleFiles.readers)
    func readersUseTheContractsNames(_ reader: String) throws {
        let contract = try ExampleFiles.Contract()
        // The readers' consumer group, named like a type.
        let ownNames: Set<String> = ["account-cleanup"]
        let known = contract.names("user_fields").union(contract.names("stream_fields"))
            .union(contract.names("message_fields")).union(contract.strings("types")).union(ownNames)
            .union(contract.googleNames)
        let used = Self.contractLikeNames(try ExampleFiles.text(reader))
        #expect(used.subtracting(known) == [], "names the contract does not define")
        if reader.hasSuffix("siwa_transfer.py") {
            #expect(used == ["sub", "transferred_to"])
            return
        }
        #expect(used.contains("sessions_revoked_at") || reader.hasSuffix("siwa_deletions.py"))
        #expect(used.contains("account-deleted") || reader.hasSuffix("siwa_state.py"))
        #expect(used.contains("client_id") || reader.hasSuffix("siwa_state.py"))
    }

    @Test("each code block docs/contract.md marks as tested is a verbatim part of its example file")
    func readmeShowsTheTestedCode() throws {
        let contractPage = try ExampleFiles.text("docs/contract.md")
        let lines = contractPage.components(separatedBy: "\n")
        var shown: [String: Int] = [:]
        for (index, line) in lines.enumerated() where line.hasPrefix("<!-- tested: ") {
            let file = line.dropFirst("<!-- tested: ".count).replacingOccurrences(of: " -->", with: "")
            let source = try ExampleFiles.text(file)
            #expect(lines[index + 1].hasPrefix("```"), "a fenced block follows the marker for \(file)")
            guard let end = lines[(index + 2)...].firstIndex(where: { $0.hasPrefix("```") }) else {
                Issue.record("an unclosed block for \(file)")
                continue
            }
            let block = lines[(index + 2)..<end].joined(separator: "\n")
            #expect(
                block.count > 80 && source.contains(block + "\n"), "the block of docs/contract.md differs from \(file)")
            shown[file, default: 0] += 1
        }
        for reader in ExampleFiles.readers {
            #expect(shown[reader, default: 0] >= 1, "docs/contract.md shows no tested code of \(reader)")
        }
    }
}
