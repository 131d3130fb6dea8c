/// The record inspector: what a connection's peeked bytes hold, decided from the bytes
/// alone (no socket, no clock), so it can be tested and fuzzed on its own.
extension FastCGIAcceptor {
    /// The most records a request may take: nginx sends its parameters in one record and,
    /// buffering the body first (the shipped site's `fastcgi_request_buffering`, on), its
    /// body in records of up to 32 KiB: a handful. A peer's thousands of one-byte records
    /// made every look at its connection walk them all again, and hundreds of such peers
    /// took the acceptor's one thread (`/healthz` seconds late).
    static let recordLimit = 1024

    enum RequestState: Equatable { case complete, parametersComplete, partial, garbage }

    /// What the peeked bytes of a connection hold: how far its request has come, its
    /// parameters once they are complete (when asked to read them), and how many body
    /// bytes are there already.
    struct Inspection {
        var state: RequestState
        var parameters: Result<FastCGIParameters, FastCGIRefusal>?
        var bodyBytes = 0
    }

    static func requestState(_ bytes: ArraySlice<UInt8>) -> RequestState { inspect(bytes).state }

    /// Walks FastCGI record headers (version 1; type; request id; content length;
    /// padding). A request is a BEGIN_REQUEST (responder role), its PARAMS up to the empty
    /// record, then its STDIN up to the empty record, all with the request's id; any other
    /// record in their place is garbage (nginx sends nothing else), and more than
    /// `recordLimit` records are refused (`tooManyRecords`). With
    /// `readingParameters`, the PARAMS stream is read (`FastCGIParameters.init(reading:)`)
    /// once its empty record is there; a connection's later looks need not read it again.
    static func inspect(_ bytes: ArraySlice<UInt8>, readingParameters: Bool = true) -> Inspection {
        let beginRequest: UInt8 = 1
        let params: UInt8 = 4
        let stdin: UInt8 = 5
        var requestID: Int?
        var parametersEnded = false
        // Where the PARAMS records begin: their contents are joined only once the empty
        // record is there, so a look at parameters still arriving copies nothing.
        var parametersStart: Int?
        var inspection = Inspection(state: .partial)
        var offset = bytes.startIndex
        var records = 0
        while bytes.endIndex - offset >= 8 {
            guard bytes[offset] == 1 else { return Inspection(state: .garbage) }
            records += 1
            guard records <= recordLimit else {
                return Inspection(state: .partial, parameters: .failure(.tooManyRecords))
            }
            let type = bytes[offset + 1]
            let id = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            let length = Int(bytes[offset + 4]) << 8 | Int(bytes[offset + 5])
            let padding = Int(bytes[offset + 6])
            let contentEnd = min(bytes.endIndex, offset + 8 + length)
            switch type {
            case beginRequest:
                guard requestID == nil, id != 0, length == 8 else { return Inspection(state: .garbage) }
                // The role (two bytes) is checked once the body is there: 1, responder.
                if bytes.endIndex - offset >= 10, bytes[offset + 8] != 0 || bytes[offset + 9] != 1 {
                    return Inspection(state: .garbage)
                }
                requestID = id
                parametersStart = offset + 8 + length + padding
            case params:
                guard id == requestID, !parametersEnded else { return Inspection(state: .garbage) }
                if length == 0 {
                    parametersEnded = true
                    if readingParameters, let parametersStart {
                        let parameterBytes = joinedContents(bytes, from: parametersStart, to: offset)
                        inspection.parameters = Result { () throws(FastCGIRefusal) in
                            try FastCGIParameters(reading: parameterBytes[...])
                        }
                    }
                }
            case stdin:
                guard id == requestID, parametersEnded else { return Inspection(state: .garbage) }
                if length == 0 {
                    inspection.state = .complete
                    return inspection
                }
                inspection.bodyBytes += contentEnd - (offset + 8)
            default:
                return Inspection(state: .garbage)
            }
            offset += 8 + length + padding
        }
        inspection.state = parametersEnded ? .parametersComplete : .partial
        return inspection
    }

    /// The contents of the records from `start` to `end` (whole records, each header
    /// already checked by `inspect`), joined.
    private static func joinedContents(_ bytes: ArraySlice<UInt8>, from start: Int, to end: Int) -> [UInt8] {
        var joined: [UInt8] = []
        var offset = start
        while offset < end {
            let length = Int(bytes[offset + 4]) << 8 | Int(bytes[offset + 5])
            joined += bytes[(offset + 8)..<(offset + 8 + length)]
            offset += 8 + length + Int(bytes[offset + 6])
        }
        return joined
    }
}
