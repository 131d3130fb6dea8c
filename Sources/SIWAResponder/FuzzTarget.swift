import Foundation
import SIWAFastCGI
import SIWARedis
import SIWASettingKeys
import SIWASettings
import SIWASpool
import SIWAVerification

/// What the fuzz target does with one input, shared by `siwa-fuzz` and the corpus test
/// (so a seed that stops short of what it is meant to reach fails a test, not silently).
///
/// The first byte picks the parser of outside input; the rest is the input:
/// 0 the claims of a token whose signature checked out (mutated claims can never carry a
/// valid signature, so the whole-body path alone would not reach them), 1 a spool segment
/// as a crash may leave it, 2 a JWKS document from the network, 3 settings (`NAME=value`
/// lines), 4 a URL or address setting (Redis URL, JWKS URL, FastCGI socket), 5 the first
/// bytes of a FastCGI connection as the acceptor reads them (records, then the
/// parameters, read once for the acceptor and the worker). Any other
/// first byte: the whole input is a request body (a JSON body starts with `{`).
///
/// Each parser's invariants are checked with `precondition`, so a violation is a crash
/// libFuzzer keeps.
package struct FuzzTarget: Sendable {
    package enum Selector: UInt8, CaseIterable {
        case claims = 0, spoolSegment = 1, jwksDocument = 2, settings = 3, url = 4, fastCGIRequest = 5
    }

    /// What an input came to: accepted (a verified notification, a record, a key set,
    /// settings, an address) or refused with a named error.
    package enum Outcome: Equatable {
        case accepted(String)
        case refused(String)
    }

    let verifier: NotificationVerifier
    let clientID: String
    let now: Int64

    /// `jwks` signed the seeds, for `clientID`, at `now` (Unix seconds): the test kit's
    /// `FuzzFixture`.
    package init(jwks: String, clientID: String, now: Int64) throws(JWKSError) {
        verifier = NotificationVerifier(keys: try JSONWebKeySet(jsonBytes: Array(jwks.utf8)), clientIDs: [clientID])
        self.clientID = clientID
        self.now = now
    }

    @discardableResult
    package func check(_ bytes: [UInt8]) -> Outcome {
        guard let first = bytes.first, let selector = Selector(rawValue: first) else { return body(bytes) }
        let input = Array(bytes.dropFirst())
        switch selector {
        case .claims: return claims(input)
        case .spoolSegment: return spoolSegment(input)
        case .jwksDocument: return jwksDocument(input)
        case .settings: return settings(input)
        case .url: return url(input)
        case .fastCGIRequest: return fastCGIRequest(input)
        }
    }

    func body(_ bytes: [UInt8]) -> Outcome {
        do {
            return notification(try verifier.verify(body: bytes, now: now))
        } catch {
            return refusal(error)
        }
    }

    func claims(_ bytes: [UInt8]) -> Outcome {
        do {
            return notification(try verifier.interpret(claims: bytes, now: now))
        } catch {
            return refusal(error)
        }
    }

    func notification(_ notification: VerifiedNotification) -> Outcome {
        // A verified result always names a served client and a non-empty subject.
        precondition(notification.clientID == clientID && !notification.subject.isEmpty)
        return .accepted("notification")
    }

    func refusal(_ error: VerificationError) -> Outcome {
        precondition(!error.code.rawValue.isEmpty && (400...503).contains(NotificationResponder.httpStatus(for: error)))
        return .refused(error.code.rawValue)
    }

    /// Every entry of a segment, whatever a crash did to it: records are whole and
    /// round-trip through the encoder; bad stretches are named and the reader always moves on.
    func spoolSegment(_ bytes: [UInt8]) -> Outcome {
        // The reader reads a file in pieces, as the spool does: the input becomes that file.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "siwa-fuzz-segment-\(getpid()).log"
        ).path
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else {
            preconditionFailure("cannot write the fuzz segment file")
        }
        defer { try? FileManager.default.removeItem(atPath: path) }
        guard let reader = try? SpoolSegmentReader(path: path, offset: 0) else {
            preconditionFailure("cannot open the fuzz segment file")
        }
        var records = 0
        var previous = 0
        while let entry = try? reader.next() {
            precondition(reader.offset > previous && reader.offset <= bytes.count, "the reader did not move on")
            previous = reader.offset
            switch entry {
            case .record(let notification, _, let attemptedAt, _):
                records += 1
                let again = SpoolRecord.encode(notification, attemptedAt: attemptedAt)
                guard case .notification(let decoded, _, let attemptedAgain) = SpoolRecord.decode(again.dropLast()),
                    attemptedAgain == attemptedAt
                else {
                    preconditionFailure("a decoded record does not round-trip")
                }
                precondition(
                    SpoolRecord.encode(decoded, attemptedAt: attemptedAgain) == again,
                    "a decoded record does not round-trip")
            case .securityEvent(let securityEvent, _, let attemptedAt, _):
                records += 1
                let again = SpoolRecord.encode(securityEvent, attemptedAt: attemptedAt)
                guard case .securityEvent(let decoded, _, let attemptedAgain) = SpoolRecord.decode(again.dropLast()),
                    attemptedAgain == attemptedAt, decoded == securityEvent
                else {
                    preconditionFailure("a decoded Google record does not round-trip")
                }
            case .bad: break
            }
        }
        precondition((try? SpoolSegmentReader.countRecords(path: path, from: 0).count) == records)
        return records > 0 ? .accepted("spool records: \(records)") : .refused("no whole record")
    }

    /// A JWKS document: parsed strictly; every usable kid resolves to its key.
    func jwksDocument(_ bytes: [UInt8]) -> Outcome {
        do {
            let keySet = try JSONWebKeySet(jsonBytes: bytes)
            for keyID in keySet.usableKeyIDs {
                precondition((try? keySet.key(forKeyID: keyID)) != nil, "a usable kid does not resolve")
            }
            return keySet.usableKeyIDs.isEmpty ? .refused("no usable key") : .accepted("jwks")
        } catch {
            precondition(!error.description.isEmpty, "a JWKS error says nothing")
            return .refused("jwks")
        }
    }

    /// Settings as an env file would hold them (`NAME=value` lines), read as the environment.
    func settings(_ bytes: [UInt8]) -> Outcome {
        var environment: [String: String] = [:]
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            environment[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        // Files named by the settings are checked for readability only: keep them out of
        // reach of the fuzzer's strings so no input makes it read a real file.
        environment[SettingKey.jwksCAFile.name] = nil
        for name in [
            SettingKey.redisTLSCAFile.name, SettingKey.redisTLSCertificateFile.name, SettingKey.redisTLSKeyFile.name,
        ] {
            environment[name] = nil
        }
        do {
            _ = try ServerConfiguration(environment: environment)
            return .accepted("settings")
        } catch {
            precondition(!error.setting.isEmpty, "a settings error names no setting")
            return .refused(error.setting)
        }
    }

    /// One setting's text as each URL or address parser reads it.
    func url(_ bytes: [UInt8]) -> Outcome {
        let text = String(decoding: bytes, as: UTF8.self)
        var accepted: [String] = []
        if (try? RedisEndpoint(parsing: text)) != nil { accepted.append("redis") }
        if (try? FastCGIListenAddress.parse(text)) != nil { accepted.append("fcgi") }
        if (try? ServerConfiguration(environment: [SettingKey.clientIDs.name: clientID, SettingKey.jwksURL.name: text]))
            != nil
        {
            accepted.append("jwks")
        }
        return accepted.isEmpty ? .refused("no parser accepts it") : .accepted(accepted.joined(separator: ","))
    }

    /// A FastCGI connection's first bytes, as the acceptor reads them. Invariants: the
    /// reading is the same twice; parameters read are names without a control byte or `=`,
    /// each once, and written out again they read back the same, with the same length.
    func fastCGIRequest(_ bytes: [UInt8]) -> Outcome {
        let look = FastCGIRequestReading.look(bytes)
        precondition(FastCGIRequestReading.look(bytes) == look, "the same bytes read two ways")
        switch look.parameters {
        case nil: return .refused("parameters incomplete: \(look.state)")
        case .failure(let refusal): return .refused(refusal.rawValue)
        case .success(let parameters):
            for name in parameters.keys {
                precondition(!name.utf8.contains { $0 < 0x20 || $0 == 0x7f || $0 == UInt8(ascii: "=") }, "a name read")
            }
            var stream: [UInt8] = []
            for (name, value) in parameters {
                for length in [name.utf8.count, value.utf8.count] {
                    if length < 0x80 {
                        stream.append(UInt8(length))
                    } else {
                        stream += [
                            UInt8(0x80 | (length >> 24)), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff),
                            UInt8(length & 0xff),
                        ]
                    }
                }
                stream += Array(name.utf8) + Array(value.utf8)
            }
            precondition(FastCGIRequestReading.read(stream) == .success(parameters), "parameters written out read back")
            return .accepted("\(look.state) length \(look.contentLength.map(String.init) ?? "none")")
        }
    }
}
