import Foundation
import SIWATestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A crash of the real binary under the shipped units' `SWIFT_BACKTRACE` prints no memory: Swift's default report shows every register and the 16 bytes
/// each one points to, which can be part of a refresh token, the client secret or an
/// address. The crash is a real one: `SIGILL` delivered to the running binary goes
/// through the same backtracer as a trap of the binary's own code.
@Suite("Crash reports", .serialized)
final class CrashReportTests {
    static let deployDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("deploy")

    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    /// The one `SWIFT_BACKTRACE` value every shipped unit sets.
    static func shippedBacktraceSetting() throws -> String {
        let units = try FileManager.default.contentsOfDirectory(atPath: deployDirectory.path)
            .filter { $0.hasSuffix(".service") }.sorted()
        #expect(units.count >= 2, "\(units)")
        var values: Set<String> = []
        for unit in units {
            let text = try String(contentsOf: deployDirectory.appendingPathComponent(unit), encoding: .utf8)
            let settings = text.split(separator: "\n").filter { $0.hasPrefix("Environment=SWIFT_BACKTRACE=") }
            #expect(settings.count == 1, "\(unit) sets SWIFT_BACKTRACE once")
            values.formUnion(settings.map { String($0.dropFirst("Environment=SWIFT_BACKTRACE=".count)) })
        }
        #expect(values.count == 1, "every unit sets the same value: \(values)")
        return try #require(values.first)
    }

    /// `read`'s number, as `/proc/PID/syscall` shows it.
    #if arch(x86_64)
        static let readSyscall = 0
    #else
        static let readSyscall = 63
    #endif

    /// A line of the register dump: a register, its value, and the bytes it points to.
    static func isMemoryLine(_ line: Substring) -> Bool {
        let words = line.split(separator: " ", omittingEmptySubsequences: true)
        guard words.count >= 18, words[1].hasPrefix("0x"), words[1].count == 18 else { return false }
        return words[2..<18].allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }

    /// Starts `verify` waiting on its standard input, crashes it with `SIGILL` once it
    /// reads, and returns what it wrote on standard error.
    func crashReport(backtrace: String?) throws -> (status: Int32, report: String) {
        let keys = try EndpointBinary.run(["keygen", "--out", directory.path, "--kid", "crash-test-key"])
        #expect(keys.status == 0)
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = backtrace
        // Standard input a pipe nobody writes to, so verify blocks reading it.
        let input = Pipe()
        let errorURL = directory.appendingPathComponent("crash-\(UUID().uuidString).err")
        let process = try EndpointProcess(
            [
                "verify", "--jwks", directory.appendingPathComponent("test-jwks.json").path, "--client-id",
                "com.example.crash", "-",
            ], environment: environment, standardError: errorURL, standardInput: input.fileHandleForReading
        ).process
        defer {
            try? input.fileHandleForWriting.close()
            try? input.fileHandleForReading.close()
        }
        // Waits (bounded) until the binary blocks reading its standard input: by then the
        // runtime has long installed its crash handlers.
        let deadline = Date().addingTimeInterval(30)
        var reading = false
        while !reading && Date() < deadline {
            let syscall = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/syscall", encoding: .utf8))
            reading = syscall?.hasPrefix("\(Self.readSyscall) 0x0 ") == true
            if !reading { usleep(10_000) }
        }
        #expect(reading, "verify never blocked reading its standard input")
        kill(process.processIdentifier, SIGILL)
        process.waitUntilExit()
        let report = (try? String(contentsOf: errorURL, encoding: .utf8)) ?? ""
        return (process.terminationStatus, report)
    }

    @Test("the shipped SWIFT_BACKTRACE: the crash ends with its signal; no register, memory or image list")
    func shippedSettingPrintsNoMemory() throws {
        let setting = try Self.shippedBacktraceSetting()
        let crashed = try crashReport(backtrace: setting)
        #expect(crashed.status == SIGILL)
        #expect(!crashed.report.contains("swift-backtrace"), "no reporter is looked for: \(crashed.report)")
        #expect(!crashed.report.contains("Registers:"), "\(crashed.report)")
        #expect(!crashed.report.contains("Images"), "\(crashed.report)")
        #expect(!crashed.report.split(separator: "\n").contains(where: Self.isMemoryLine), "\(crashed.report)")
    }

    @Test("without it (the runtime's default) the same crash prints registers and the memory they point to")
    func defaultPrintsMemory() throws {
        let crashed = try crashReport(backtrace: nil)
        #expect(crashed.status == SIGILL)
        #expect(crashed.report.contains("Registers:"), "\(crashed.report)")
        #expect(crashed.report.split(separator: "\n").contains(where: Self.isMemoryLine), "\(crashed.report)")
    }
}
