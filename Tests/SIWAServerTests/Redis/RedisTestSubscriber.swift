import Foundation
import SIWARedis

/// A raw-socket SUBSCRIBE client, so tests can read what the store PUBLISHes without
/// adding a push-reply API to `RedisConnection` that production does not need.
final class RedisTestSubscriber {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    private let descriptor: Int32
    private var buffer: [UInt8] = []

    init(port: Int, channel: String) throws {
        guard let descriptor = connectToLoopback(port: port, receiveTimeoutMicroseconds: 200_000) else {
            throw Failure(description: "could not connect the subscriber")
        }
        self.descriptor = descriptor
        let command = Array("*2\r\n$9\r\nSUBSCRIBE\r\n$\(channel.utf8.count)\r\n\(channel)\r\n".utf8)
        guard write(descriptor, command, command.count) == command.count else {
            close(descriptor)
            throw Failure(description: "could not send SUBSCRIBE")
        }
        // The confirmation: ["subscribe", channel, 1].
        guard let confirmation = try nextFrame(within: 5), confirmation.first == "subscribe" else {
            close(descriptor)
            throw Failure(description: "no SUBSCRIBE confirmation")
        }
    }

    deinit { close(descriptor) }

    /// The payloads of messages arriving within `seconds` (stops early once `limit` arrived).
    func messages(within seconds: TimeInterval, limit: Int = .max) throws -> [String] {
        var payloads: [String] = []
        let deadline = Date().addingTimeInterval(seconds)
        while payloads.count < limit, let frame = try nextFrame(within: deadline.timeIntervalSinceNow) {
            if frame.count == 3, frame[0] == "message" { payloads.append(frame[2]) }
        }
        return payloads
    }

    /// One RESP array frame as strings (integers as their text), or nil on timeout.
    private func nextFrame(within seconds: TimeInterval) throws -> [String]? {
        let deadline = Date().addingTimeInterval(max(0, seconds))
        while true {
            if let frame = parseFrame() { return frame }
            if Date() >= deadline { return nil }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = read(descriptor, &chunk, chunk.count)
            if count > 0 {
                buffer += chunk[..<count]
            } else if count == 0 {
                throw Failure(description: "the subscriber connection closed")
            }
        }
    }

    private func parseFrame() -> [String]? {
        var index = 0
        func line() -> String? {
            var end = index
            while end + 1 < buffer.count {
                if buffer[end] == 13 && buffer[end + 1] == 10 {
                    let text = String(decoding: buffer[index..<end], as: UTF8.self)
                    index = end + 2
                    return text
                }
                end += 1
            }
            return nil
        }
        guard let header = line(), header.hasPrefix("*"), let count = Int(header.dropFirst()) else { return nil }
        var elements: [String] = []
        for _ in 0..<count {
            guard let item = line() else { return nil }
            if item.hasPrefix(":") {
                elements.append(String(item.dropFirst()))
            } else if item.hasPrefix("$"), let length = Int(item.dropFirst()) {
                guard index + length + 2 <= buffer.count else { return nil }
                elements.append(String(decoding: buffer[index..<index + length], as: UTF8.self))
                index += length + 2
            } else {
                return nil
            }
        }
        buffer.removeFirst(index)
        return elements
    }
}
