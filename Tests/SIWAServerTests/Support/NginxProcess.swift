import Foundation
import SIWAHTTPS

/// A real nginx serving files from `documentRoot` over HTTPS (and plain HTTP) on
/// loopback ports, with every path it writes inside its own directory.
///
/// Start it with `start(in:certificatePath:keyPath:extraLocations:)`, stop it with
/// `stop()` in a `defer`, so it goes away when a test fails too.
final class NginxProcess {
    let directory: URL
    let documentRoot: URL
    let accessLogPath: String
    let httpsPort: Int
    let httpPort: Int
    private let process: Process

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    private init(directory: URL, documentRoot: URL, httpsPort: Int, httpPort: Int, process: Process) {
        self.directory = directory
        self.documentRoot = documentRoot
        self.accessLogPath = directory.appendingPathComponent("access.log").path
        self.httpsPort = httpsPort
        self.httpPort = httpPort
        self.process = process
    }

    /// Starts nginx in `directory`; `extraLocations` is nginx text placed in both
    /// server blocks, where `$HTTPS_PORT` names the HTTPS port.
    static func start(
        in directory: URL, certificatePath: String, keyPath: String, extraLocations: String = ""
    ) throws -> NginxProcess {
        let documentRoot = directory.appendingPathComponent("www")
        try FileManager.default.createDirectory(at: documentRoot, withIntermediateDirectories: true)
        try "ok".write(to: documentRoot.appendingPathComponent("ready"), atomically: true, encoding: .utf8)
        var lastFailure = "nginx did not start"
        // A port free when chosen may be taken before nginx binds it; a few tries with new
        // ports are enough. Both from below the kernel's ephemeral range (`LoopbackPort`):
        // there, a test's outgoing connections left ports in TIME_WAIT that nginx could not
        // bind ("Address already in use", every try, with the test processes side by side).
        for _ in 0..<5 {
            let httpsPort = try LoopbackPort.free()
            var httpPort = try LoopbackPort.free()
            while httpPort == httpsPort { httpPort = try LoopbackPort.free() }
            let configuration = Self.configuration(
                directory: directory, documentRoot: documentRoot, httpsPort: httpsPort, httpPort: httpPort,
                certificatePath: certificatePath, keyPath: keyPath,
                extraLocations: extraLocations.replacingOccurrences(of: "$HTTPS_PORT", with: String(httpsPort)))
            let configurationPath = directory.appendingPathComponent("nginx.conf").path
            try configuration.write(toFile: configurationPath, atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/nginx")
            process.arguments = ["-p", directory.path, "-c", configurationPath, "-e", "stderr", "-g", "daemon off;"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let nginx = NginxProcess(
                directory: directory, documentRoot: documentRoot, httpsPort: httpsPort, httpPort: httpPort,
                process: process)
            // The readiness probe asks for /ready, so counts of other paths start at zero.
            if nginx.waitUntilReady(timeoutSeconds: 5) { return nginx }
            nginx.stop()
            let log = (try? String(contentsOfFile: directory.appendingPathComponent("error.log").path, encoding: .utf8))
            lastFailure = "nginx did not start: \(log ?? "no error log")"
        }
        throw Failure(description: lastFailure)
    }

    /// Writes a file into the document root (replacing it atomically).
    func serve(_ bytes: [UInt8], at name: String) throws {
        try Data(bytes).write(to: documentRoot.appendingPathComponent(name), options: .atomic)
    }

    /// How many requests nginx logged for exactly `path`, of those answered before this is
    /// asked. nginx logs a request as it finalises it, which may be just after the client has
    /// read the whole response; so this asks for a marker (`/ready?count=<uuid>`) and waits,
    /// at most 10 s, for the marker's own line. nginx's one worker handles its events in
    /// turn, so every request it had answered before the marker came is logged by then.
    func requestCount(path: String) -> Int {
        let marker = "/ready?count=\(UUID().uuidString)"
        _ = try? HTTPSFetcher(timeoutSeconds: 5).fetch("http://127.0.0.1:\(httpPort)\(marker)")
        var lines: [Substring] = []
        _ = waitUntil(timeout: 10) {
            let log = (try? String(contentsOfFile: accessLogPath, encoding: .utf8)) ?? ""
            lines = log.split(separator: "\n")
            return lines.contains { $0.contains("\"GET \(marker) HTTP/") }
        }
        return lines.filter { $0.contains("\"GET \(path) HTTP/") }.count
    }

    /// Stops nginx (fast shutdown), waiting at most a few seconds before killing it.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date(timeIntervalSinceNow: 5)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    private func waitUntilReady(timeoutSeconds: Double) -> Bool {
        let probe = HTTPSFetcher(timeoutSeconds: 1)
        let deadline = Date(timeIntervalSinceNow: timeoutSeconds)
        while Date() < deadline && process.isRunning {
            if (try? probe.fetch("http://127.0.0.1:\(httpPort)/ready")) != nil { return true }
            usleep(50_000)
        }
        return false
    }

    private static func configuration(
        directory: URL, documentRoot: URL, httpsPort: Int, httpPort: Int, certificatePath: String, keyPath: String,
        extraLocations: String
    ) -> String {
        let path = directory.path
        return """
            worker_processes 1;
            pid \(path)/nginx.pid;
            error_log \(path)/error.log info;
            events { worker_connections 64; }
            http {
                access_log \(path)/access.log;
                client_body_temp_path \(path)/client_body;
                proxy_temp_path \(path)/proxy;
                fastcgi_temp_path \(path)/fastcgi;
                uwsgi_temp_path \(path)/uwsgi;
                scgi_temp_path \(path)/scgi;
                default_type application/json;
                server {
                    listen 127.0.0.1:\(httpsPort) ssl;
                    ssl_certificate \(certificatePath);
                    ssl_certificate_key \(keyPath);
                    root \(documentRoot.path);
                    \(extraLocations)
                }
                server {
                    listen 127.0.0.1:\(httpPort);
                    root \(documentRoot.path);
                    \(extraLocations)
                }
            }

            """
    }
}
