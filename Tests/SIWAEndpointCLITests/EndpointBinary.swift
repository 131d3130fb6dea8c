import Foundation

/// Runs the built `siwa-endpoint` executable, as an operator would.
struct EndpointBinary {
    struct Run {
        let status: Int32
        let standardOutput: String
        let standardError: String
    }

    /// Beside the test bundle in the build products directory.
    static let url: URL = {
        if let override = ProcessInfo.processInfo.environment["SIWA_ENDPOINT_BINARY"] {
            return URL(fileURLWithPath: override)
        }
        let testBundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return testBundle.deletingLastPathComponent().appendingPathComponent("siwa-endpoint")
    }()

    static func run(_ arguments: [String], input: Data? = nil) throws -> Run {
        let process = Process()
        process.executableURL = url
        process.arguments = arguments
        let output = Pipe()
        let error = Pipe()
        let stdin = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = stdin
        try process.run()
        if let input { stdin.fileHandleForWriting.write(input) }
        try stdin.fileHandleForWriting.close()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(
            status: process.terminationStatus, standardOutput: String(decoding: outputData, as: UTF8.self),
            standardError: String(decoding: errorData, as: UTF8.self))
    }
}
