import Foundation
import Glibc
import SIWATestSupport
import Testing

@testable import SIWASpool

/// A spool the service's user may read but not update: `serve` cannot open it, and
/// `serve --check`, run as that user, says so the same way (run here as `nobody`; only
/// root can make the setup and switch users).
@Suite("A spool serve cannot open, refused by serve --check alike", .enabled(if: geteuid() == 0))
struct SpoolOpeningRefusalTests {
    static let nobody: UInt32 = 65_534

    @Test("a replay position this user may read but not update: exit 2 from both, the same event and setting")
    func positionNotUpdatable() throws {
        var refusals: [[String: String]] = []
        for arguments in [["serve", "--check"], ["serve"]] {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "siwa-spool-opening-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let spool = directory.appendingPathComponent("spool").path
            try FileManager.default.createDirectory(
                atPath: spool + "/rejected", withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            // A position as serve writes it, left owned by root (readable by all).
            try SpoolPositionFile.open(directory: spool, name: NotificationSpool.positionFileName, mode: 0o644).close()
            for path in [directory.path, spool, spool + "/rejected"] {
                #expect(chown(path, Self.nobody, Self.nobody) == 0)
            }
            #expect(chmod(directory.path, 0o755) == 0)
            #expect(chmod(spool + "/" + NotificationSpool.positionFileName, 0o644) == 0)
            let environment = [
                "SIWA_CLIENT_IDS": ServeStack.clientID, "SIWA_REDIS_URL": "redis://127.0.0.1:1/0",
                "SIWA_JWKS_URL": "http://127.0.0.1:1/keys", "SIWA_JWKS_TIMEOUT_SECONDS": "1",
                "SIWA_FCGI_SOCKET": directory.path + "/fcgi.sock", "SIWA_SPOOL_DIR": spool,
                "SIWA_JWKS_CACHE": directory.path + "/jwks.json", "SIWA_WORKERS": "1", "PATH": "/usr/bin:/bin",
            ]
            let run = try CommandRun.run(
                URL(fileURLWithPath: "/usr/bin/setpriv"),
                ["--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", ServeProcess.binaryURL.path]
                    + arguments,
                environment: environment, timeout: .seconds(30))
            let name = arguments.joined(separator: " ")
            #expect(!run.timedOut && run.status == 2, "\(name): \(run.errors)")
            #expect(!run.errors.contains(#""event":"started""#), "\(name)")
            let line = run.errors.split(separator: "\n").last.map(String.init) ?? ""
            let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]) ?? [:]
            refusals.append(
                object.compactMapValues { $0 as? String }.filter { $0.key == "event" || $0.key == "setting" })
            #expect(line.contains("spool_position_unreadable"), "\(name): \(line)")
        }
        #expect(refusals[0] == ["event": "configuration_invalid", "setting": "SIWA_SPOOL_DIR"])
        #expect(refusals[0] == refusals[1])
    }
}
