import SIWATelemetry
import Synchronization

/// A log sink that keeps every line written to it, in order: a test reads what a part
/// logged in process, without a child process and its standard error.
final class LoggedLines: Sendable {
    private let lines = Mutex<[String]>([])

    var sink: EventLog.Sink {
        EventLog.Sink { [self] line in self.lines.withLock { $0.append(String(decoding: line, as: UTF8.self)) } }
    }

    /// Every line, newline included.
    var all: [String] { lines.withLock { $0 } }

    /// The lines with `"event":"<name>"`.
    func lines(event name: String) -> [String] { all.filter { $0.contains(#""event":"\#(name)""#) } }
}
