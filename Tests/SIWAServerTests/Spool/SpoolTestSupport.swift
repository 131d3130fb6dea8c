import Foundation
import SIWAVerification
import Testing

/// Runs `body` with a fresh private directory and removes it afterwards, also when a
/// test expectation fails or the body throws.
func withSpoolDirectory<Result>(_ body: (String) throws -> Result) throws -> Result {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("spool-test-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// A notification whose token ID is `t<index>`; the types and optional fields vary with the index
/// so that every field of every kind of record goes through the spool.
func spoolNotification(_ index: Int, prefix: String = "t") -> VerifiedNotification {
    let rawTypes = ["consent-revoked", "email-disabled", "email-enabled", "account-delete", "some-future-type"]
    let rawType = rawTypes[index % rawTypes.count]
    let type = NotificationEventType(rawType: rawType)
    return VerifiedNotification(
        clientID: "com.example.app\(index % 2)", subject: "000\(index).abc\"quote\\slash\nline.\u{00E9}\u{1F600}",
        type: type, rawType: rawType, eventTimeMilliseconds: 1_670_016_125_295 + Int64(index),
        tokenID: "\(prefix)\(index)", issuedAt: 1_670_016_000 + Int64(index),
        expiresAt: index % 3 == 0 ? nil : 1_670_102_400 + Int64(index),
        email: type.isEmailEvent ? "user\(index)@privaterelay.appleid.com" : nil,
        isPrivateEmail: type.isEmailEvent ? (index % 4 == 1 ? nil : index % 2 == 0) : nil)
}

/// The file names in `directory`, sorted.
func spoolFileNames(_ directory: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
}

func segmentNames(_ directory: String) throws -> [String] {
    try spoolFileNames(directory).filter { $0.hasPrefix("segment-") && $0.hasSuffix(".log") }
}

/// The one segment holding records; fails the test if there is not exactly one.
func onlyNonEmptySegment(_ directory: String) throws -> String {
    let names = try segmentNames(directory).filter { try! fileBytes(directory + "/" + $0).count > 0 }
    try #require(names.count == 1)
    return directory + "/" + names[0]
}

func fileBytes(_ path: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))) }

func writeBytes(_ bytes: [UInt8], to path: String) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

func permissions(_ path: String) throws -> Int {
    try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
}

/// The lines of a segment, each with its newline.
func recordLines(_ bytes: [UInt8]) -> [[UInt8]] {
    var lines: [[UInt8]] = []
    var current: [UInt8] = []
    for byte in bytes {
        current.append(byte)
        if byte == 0x0A {
            lines.append(current)
            current = []
        }
    }
    if !current.isEmpty { lines.append(current) }
    return lines
}

/// What `apply` throws in tests to stand for Redis refusing a record.
struct RedisDown: Error, Equatable {}

/// CRC-32 (zlib polynomial) of a string's UTF-8, to write files in a legacy format by hand.
enum CRC32Hex {
    static func of(_ text: String) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in text.utf8 {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        }
        return crc ^ 0xFFFF_FFFF
    }
}
