#if canImport(Glibc)
    import Glibc
#endif

/// A `Duration` in the units C calls, settings, metrics and log lines take: the one
/// conversion from `components` (seconds and attoseconds) in the code base.
extension Duration {
    private static let attosecondsPerNanosecond: Int64 = 1_000_000_000
    private static let attosecondsPerMicrosecond: Int64 = 1_000_000_000_000
    private static let attosecondsPerMillisecond: Int64 = 1_000_000_000_000_000

    /// In seconds, with the fraction (durations measured for metrics, rates and logs).
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// Whole seconds, the fraction dropped (settings that are whole seconds).
    public var wholeSeconds: Int64 { components.seconds }

    /// Whole milliseconds, the fraction dropped (Redis's `PX`, `WAIT`, log fields in ms).
    public var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / Self.attosecondsPerMillisecond
    }

    /// Whole nanoseconds, nil when they do not fit in an `Int64`.
    public var wholeNanoseconds: Int64? {
        let nanoseconds = components.seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanoseconds.overflow else { return nil }
        return nanoseconds.partialValue + components.attoseconds / Self.attosecondsPerNanosecond
    }

    #if canImport(Glibc)
        /// As a `timeval` (`SO_RCVTIMEO`, `SO_SNDTIMEO`), to the microsecond.
        public var timeValue: timeval {
            timeval(
                tv_sec: Int(components.seconds), tv_usec: Int(components.attoseconds / Self.attosecondsPerMicrosecond))
        }

        /// As a `timespec` (`nanosleep`), to the nanosecond.
        public var timeSpec: timespec {
            timespec(
                tv_sec: Int(components.seconds), tv_nsec: Int(components.attoseconds / Self.attosecondsPerNanosecond))
        }
    #endif
}
