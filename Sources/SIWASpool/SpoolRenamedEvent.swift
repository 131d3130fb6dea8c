import SIWAJSON
import SIWATelemetry

/// The spool's log events renamed so that each word means one thing: *torn* for bytes that
/// are not a whole record, *rejected* for a whole record Redis refused (they both said "set
/// aside" before). For one release each line also carries its former name (`formerly`), so
/// a search or an alert on the old name still finds it; the next release drops the field.
enum SpoolRenamedEvent: String {
    /// A torn record moved to a `.torn` file (formerly `spool_record_set_aside`).
    case recordTorn = "spool_record_torn"
    /// Rejected records of a deleted user rewrote without the address (formerly
    /// `spool_set_aside_email_removed`).
    case rejectedEmailRemoved = "spool_rejected_email_removed"
    /// That rewrite failed (formerly `spool_set_aside_email_not_removed`).
    case rejectedEmailNotRemoved = "spool_rejected_email_not_removed"

    /// The name the line carried before this release.
    var formerName: String {
        switch self {
        case .recordTorn: "spool_record_set_aside"
        case .rejectedEmailRemoved: "spool_set_aside_email_removed"
        case .rejectedEmailNotRemoved: "spool_set_aside_email_not_removed"
        }
    }

    /// One line, under the new name, with the former one beside it.
    func log(to sink: EventLog.Sink, level: String = "info", _ fields: [(String, JSONValue)]) {
        sink.event(rawValue, level: level, fields + [("formerly", .string(formerName))])
    }
}
