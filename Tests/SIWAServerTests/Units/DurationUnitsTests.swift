import SIWASupport
import Testing

/// The one conversion of a `Duration` into the units C calls, settings and logs take.
@Suite("Duration units")
struct DurationUnitsTests {
    @Test("seconds with the fraction, whole seconds, whole milliseconds and nanoseconds")
    func units() {
        let duration = Duration.milliseconds(1500) + .nanoseconds(250_000)
        #expect(Duration.milliseconds(1500).inSeconds == 1.5)
        #expect(abs(duration.inSeconds - 1.50025) < 1e-12)
        #expect(duration.wholeSeconds == 1)
        #expect(duration.wholeMilliseconds == 1500)
        #expect(duration.wholeNanoseconds == 1_500_250_000)
        #expect(Duration.seconds(30 * 86_400).wholeMilliseconds == 2_592_000_000)
        #expect(Duration.seconds(Int64.max).wholeNanoseconds == nil)
    }

    @Test("timeval to the microsecond, timespec to the nanosecond")
    func cStructures() {
        let duration = Duration.seconds(2) + .nanoseconds(1_234_567)
        #expect(duration.timeValue.tv_sec == 2)
        #expect(duration.timeValue.tv_usec == 1234)
        #expect(duration.timeSpec.tv_sec == 2)
        #expect(duration.timeSpec.tv_nsec == 1_234_567)
    }
}
