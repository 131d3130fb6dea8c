import Foundation
import Glibc
import SIWAFastCGIClient
import SIWATestKit
import Testing

@testable import SIWAFastCGI

/// The server behind a real nginx, with `fastcgi_keep_conn` on (connections pinned to
/// workers, the case the idle-connection shutdown exists for) and off (the site default).
// No skip when nginx is missing: CI installs it (scripts/install-deps), and a suite that
// skips itself on a machine without it would pass while proving nothing.
@Suite("FastCGINginx")
struct FastCGINginxTests {
    private typealias Kit = FastCGITestKit

    @Test(
        "nginx → server: body, path and request id arrive; 413 from the handler; stop() with kept connections",
        arguments: [true, false])
    func behindNginx(keepConnections: Bool) throws {
        let directory = Kit.TemporaryDirectory()
        defer { directory.remove() }
        let socketPath = directory.path + "/fcgi.sock"
        let server = try FastCGIServer(
            // ioTimeout 60 s: a kept connection that stop() failed to end would hold the server
            // that long (nginx keeps idle upstream connections 60 s), far past stop's 20 s below.
            configuration: .init(
                address: .unixSocket(path: socketPath), workerCount: 2, maximumBodyBytes: 4096,
                ioTimeout: .seconds(60)),
            handler: { request in
                guard case .complete(let body) = request.body else {
                    return FastCGIResponse(status: 413, contentType: "text/plain", body: "too large")
                }
                let text = "\(request.method) \(request.path) \(body.count) \(request.requestID ?? "-")"
                return FastCGIResponse(status: 200, contentType: "text/plain", body: text)
            })
        try server.start()
        defer { server.stop(timeout: .seconds(10)) }

        let nginx = try NginxUnderTest(
            directory: directory.path, socketPath: socketPath, keepConnections: keepConnections)
        defer { nginx.stop() }

        for round in 0..<3 {
            let body = [UInt8](repeating: UInt8(ascii: "a") + UInt8(round), count: 3000)
            let (status, text) = try Self.http(
                port: nginx.port, method: "POST", path: "/siwa/notifications?r=\(round)", body: body)
            #expect(status == 200)
            let fields = text.split(separator: " ")
            #expect(fields.count == 4)
            #expect(fields.prefix(3) == ["POST", "/siwa/notifications", "3000"])
            #expect(fields.last?.count == 32, "nginx's $request_id arrives as REQUEST_ID")
        }
        let (status, text) = try Self.http(
            port: nginx.port, method: "POST", path: "/", body: [UInt8](repeating: 0x7a, count: 5000))
        #expect(status == 413)
        #expect(text == "too large")

        // nginx still holds its upstream connections (when kept) while the server stops. The
        // proof that stop() ends them is that it finishes at all within 20 s, a bound a loaded
        // machine meets with room (it takes milliseconds) and a held connection (60 s) cannot.
        #expect(server.stop(timeout: .seconds(20)))
        let (after, _) = try Self.http(port: nginx.port, method: "POST", path: "/", body: [0x31])
        #expect(after == 502, "nobody is listening any more")
    }

    /// One HTTP/1.1 request with `Connection: close`; returns the status and the body.
    static func http(port: UInt16, method: String, path: String, body: [UInt8]) throws -> (Int, String) {
        let connection = try FastCGIClient(.tcp(port: port)).connect()
        defer { connection.close() }
        let head =
            "\(method) \(path) HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        try connection.writeAll(Array(head.utf8) + body)
        let raw = String(decoding: try connection.readToEnd(), as: UTF8.self)
        let parts = raw.components(separatedBy: "\r\n\r\n")
        let statusLine = parts.first?.split(separator: "\r\n").first ?? ""
        let status = statusLine.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
        return (status, parts.dropFirst().joined(separator: "\r\n\r\n"))
    }
}

/// nginx in the foreground on a free loopback port, stopped (and waited for) by `stop()`.
private final class NginxUnderTest {
    let port: UInt16
    private let process = Process()

    init(directory: String, socketPath: String, keepConnections: Bool) throws {
        port = UInt16(try LoopbackPort.free())
        // Running as root, nginx's workers would switch to "nobody" and lose the 0660 socket.
        let user = geteuid() == 0 ? "user root root;" : ""
        let config = """
            \(user)
            worker_processes 1;
            daemon off;
            pid \(directory)/nginx.pid;
            error_log \(directory)/error.log warn;
            events { worker_connections 64; }
            http {
                access_log off;
                client_body_temp_path \(directory)/body;
                fastcgi_temp_path \(directory)/fastcgi;
                proxy_temp_path \(directory)/proxy;
                uwsgi_temp_path \(directory)/uwsgi;
                scgi_temp_path \(directory)/scgi;
                client_max_body_size 1m;
                upstream responder { server unix:\(socketPath) max_fails=0; keepalive 4; }
                server {
                    listen 127.0.0.1:\(port);
                    location / {
                        include /etc/nginx/fastcgi_params;
                        fastcgi_param REQUEST_ID $request_id;
                        fastcgi_keep_conn \(keepConnections ? "on" : "off");
                        fastcgi_pass responder;
                    }
                }
            }
            """
        try config.write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/nginx")
        process.arguments = ["-p", directory, "-c", directory + "/nginx.conf", "-e", directory + "/error.log"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = ContinuousClock.now.advanced(by: .seconds(10))
        while ContinuousClock.now < deadline {
            if let connection = try? FastCGIClient(.tcp(port: port)).connect() {
                connection.close()
                return
            }
            guard process.isRunning else { break }
            usleep(20_000)
        }
        stop()
        let log = (try? String(contentsOfFile: directory + "/error.log", encoding: .utf8)) ?? ""
        throw FastCGIClient.Failure(description: "nginx did not start: \(log)")
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = ContinuousClock.now.advanced(by: .seconds(10))
        while process.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

}
