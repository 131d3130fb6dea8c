import Foundation
import Testing

/// The shared test kit keeps the promises the other suites rely on.
@Suite("Test support: process runner and loopback ports")
struct TestSupportTests {
    @Test("a free loopback port leaves room for a cluster bus port (never above 55535)")
    func freePortBelowBusLimit() throws {
        // The kernel picks from 32768...60999 here: a fifth of its picks would be too high.
        let ports = try (0..<300).map { _ in try LoopbackPort.free() }
        #expect(ports.allSatisfy { $0 >= 1024 && $0 <= LoopbackPort.highest }, "\(ports.filter { $0 > 55_535 })")
    }

    @Test("a free loopback port is below the kernel's ephemeral range, where outgoing connections take theirs")
    func freePortOutsideTheEphemeralRange() throws {
        #expect(LoopbackPort.ephemeralRangeStart - LoopbackPort.lowest >= 1000)
        let ports = try (0..<300).map { _ in try LoopbackPort.free() }
        let outside = ports.filter { $0 < LoopbackPort.lowest || $0 >= LoopbackPort.ephemeralRangeStart }
        #expect(outside.isEmpty, "\(outside)")
        // Drawn at random, not one port over and over.
        #expect(Set(ports).count > 250)
    }

    @Test("a port handed out is not handed out again soon, though nothing bound it yet: six drawn for a group are six")
    func portsHandedOutAreDistinct() throws {
        // 400 draws from about 3,000 to 12,000 ports: at random alone, some twice (the
        // birthday bound); a sentinel group drew six before starting any.
        let ports = try (0..<400).map { _ in try LoopbackPort.free() }
        #expect(Set(ports).count == ports.count, "\(ports.count - Set(ports).count) drawn twice")
        let slice = LoopbackPort.slice
        #expect(ports.allSatisfy { (slice.start..<slice.end).contains($0) })
    }

    @Test("a run gets its standard input, and one still going at its timeout is killed and says so")
    func runnerFeedsInputAndKillsAtTimeout() throws {
        let echoed = try CommandRun.run(URL(fileURLWithPath: "/bin/cat"), [], input: Data("piped in".utf8))
        #expect(echoed.status == 0 && echoed.output == "piped in" && !echoed.timedOut)

        let started = ContinuousClock.now
        let stuck = try CommandRun.run(URL(fileURLWithPath: "/bin/sleep"), ["300"], timeout: .seconds(1))
        #expect(stuck.timedOut)
        #expect(stuck.status == SIGKILL)
        #expect(ContinuousClock.now - started < .seconds(120))
    }
}
