/// A small parser for `--name value`, `--flag` and positional arguments.
/// (No outside package can be fetched here, so no swift-argument-parser.)
struct CommandLineArguments {
    private(set) var values: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []

    /// - Parameters:
    ///   - arguments: the words after the subcommand.
    ///   - valueOptions: options that take a value.
    ///   - flagOptions: options that take none.
    init(_ arguments: [String], valueOptions: Set<String>, flagOptions: Set<String> = []) throws(UsageError) {
        var index = 0
        while index < arguments.count {
            let word = arguments[index]
            index += 1
            if word == "-" || !word.hasPrefix("-") {
                positionals.append(word)
                continue
            }
            var name = word
            var inlineValue: String?
            if let equals = word.firstIndex(of: "=") {
                name = String(word[..<equals])
                inlineValue = String(word[word.index(after: equals)...])
            }
            if flagOptions.contains(name), inlineValue == nil {
                flags.insert(name)
            } else if valueOptions.contains(name) {
                if let inlineValue {
                    values[name, default: []].append(inlineValue)
                } else {
                    guard index < arguments.count else { throw UsageError("\(name) needs a value") }
                    values[name, default: []].append(arguments[index])
                    index += 1
                }
            } else {
                throw UsageError("unknown option \(name)")
            }
        }
    }

    func value(_ name: String) -> String? { values[name]?.last }

    func required(_ name: String) throws(UsageError) -> String {
        guard let value = value(name), !value.isEmpty else { throw UsageError("\(name) is required") }
        return value
    }

    func all(_ name: String) -> [String] { values[name] ?? [] }

    func integer(_ name: String) throws(UsageError) -> Int64? {
        guard let text = value(name) else { return nil }
        guard let number = Int64(text) else { throw UsageError("\(name) must be an integer, got \(text)") }
        return number
    }

    func has(_ flag: String) -> Bool { flags.contains(flag) }

    /// `--json`: every command that reports takes it the same way (one JSON document, or
    /// where a command reports per user, one JSON object a line), written by `Output.json`.
    static let json = "--json"

    /// Whether `--json` was given.
    var wantsJSON: Bool { has(Self.json) }
}

/// A mistake in how the command was called: exit status 2.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
