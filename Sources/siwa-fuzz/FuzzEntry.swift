import SIWAVerification

#if canImport(Glibc)
    import Glibc
#endif

// libFuzzer target over the whole body-to-result path. Build and run:
//   swift build --scratch-path .build/fuzz --product siwa-fuzz \
//     --sanitize=fuzzer --sanitize=address -Xswiftc -DSIWA_FUZZING \
//     -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table
//   .build/fuzz/debug/siwa-fuzz -max_total_time=60 Fuzz/corpus
// Without SIWA_FUZZING the executable replays files given as arguments (regression).

/// The TEST FIXTURE JWKS that signed the seed corpus (Fuzz/test-fixture-jwks.json).
let fuzzFixtureJWKS = #"""
    {"keys":[{"alg":"RS256","e":"AQAB","kid":"fuzz-fixture-key","kty":"RSA","n":"528bYvL6XUteZT967neeQhiEnjRN_zArWArvooH4jXYZjPh_v9ZwkJhvgAmveF4Qzbux8-6Pw0YqStLsVREjlOF8CoOtcfiE-epvt7iWrNPUq8_hbN1E75QzaqXV8wcK505YASpbSkRtkpaLEMi1YbV7-BQhquhbINhI1RstNnUXNmXI5Rn55Or5xQnSe9TjTrIAqxBnqVEBryaX2i2BcQl68CJctKl5opSF2VuZfFp3iEzj1hwriu2BeLNAaleHXSeH5fXOcgnPnX9kWusDuW0BjxowtpteFH1uInc4jEXyVoxxsHcmog6YyQvDEk4ImrkEnr7oKJ30jEjWTvG3EQ","use":"sig"}]}
    """#

let fuzzVerifier = NotificationVerifier(
    keys: try! JSONWebKeySet(jsonBytes: Array(fuzzFixtureJWKS.utf8)), clientIDs: ["com.example.app"])

/// The seeds were signed at this time (Unix seconds), so they verify and the fuzzer
/// explores beyond the signature check by mutating signed claims' neighbours.
let fuzzNow: Int64 = 1_796_000_000

/// A first byte of 0 fuzzes the claims-to-notification step directly (mutated claims can
/// never carry a valid signature, so the whole-body path alone would not reach it);
/// anything else is a whole request body.
func checkOneInput(_ bytes: [UInt8]) {
    do {
        let notification =
            bytes.first == 0
            ? try fuzzVerifier.interpret(claims: Array(bytes.dropFirst()), now: fuzzNow)
            : try fuzzVerifier.verify(body: bytes, now: fuzzNow)
        // A verified result always names a served client and a non-empty subject.
        precondition(notification.clientID == "com.example.app" && !notification.subject.isEmpty)
    } catch {
        precondition(!error.code.rawValue.isEmpty && (400...503).contains(error.httpStatus))
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    checkOneInput(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

#if !SIWA_FUZZING
    @main
    enum FuzzReplay {
        static func main() {
            var failures = 0
            for path in CommandLine.arguments.dropFirst() {
                guard let file = fopen(path, "rb") else {
                    print("cannot open \(path)")
                    failures += 1
                    continue
                }
                var bytes: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let count = fread(&buffer, 1, buffer.count, file)
                    if count <= 0 { break }
                    bytes += buffer[0..<count]
                }
                fclose(file)
                checkOneInput(bytes)
            }
            print("replayed \(CommandLine.arguments.count - 1) inputs")
            exit(failures == 0 ? 0 : 1)
        }
    }
#endif
