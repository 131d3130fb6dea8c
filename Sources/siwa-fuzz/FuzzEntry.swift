import SIWAResponder
import SIWATestKit

#if canImport(Glibc)
    import Glibc
#endif

// libFuzzer target over every parser of outside input (the first byte picks one: see
// FuzzTarget), above all the whole body-to-result path. Build and run:
//   swift build --scratch-path .build/fuzz --product siwa-fuzz \
//     --sanitize=fuzzer --sanitize=address -Xswiftc -DSIWA_FUZZING \
//     -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table
//   .build/fuzz/debug/siwa-fuzz -max_total_time=60 Fuzz/corpus
// Without SIWA_FUZZING the executable replays files given as arguments (regression).

/// The target over the TEST FIXTURE keys that signed the seed corpus (one definition:
/// the test kit's `FuzzFixture`); what each input does is `FuzzTarget` in SIWAResponder,
/// shared with the corpus test.
let fuzzTarget = try! FuzzTarget(
    jwks: FuzzFixture.jwksDocument, clientID: FuzzFixture.clientID, now: FuzzFixture.now)

func checkOneInput(_ bytes: [UInt8]) { fuzzTarget.check(bytes) }

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
