import Glibc

/// The addresses a webhook must not reach unless its destination allows it (SSRF): loopback,
/// unspecified, RFC 1918 private, CGNAT (100.64.0.0/10), link-local, multicast, the reserved
/// 240.0.0.0/4 and broadcast; IPv6 loopback, unspecified, unique local (fc00::/7), link-local
/// (fe80::/10), multicast (ff00::/8), and an IPv4-mapped address by its IPv4 rule.
public enum PrivateAddress {
    /// The address in text when it is one of those, nil when it is a public address.
    /// `sockaddr` holds a `sockaddr_in` or `sockaddr_in6`; any other family is special.
    public static func describeIfSpecial(family: Int32, sockaddr: UnsafeBufferPointer<UInt8>) -> String? {
        if family == AF_INET, sockaddr.count >= MemoryLayout<sockaddr_in>.size {
            let octets = Array(sockaddr[4..<8])
            return isSpecialIPv4(octets) ? octets.map(String.init).joined(separator: ".") : nil
        }
        if family == AF_INET6, sockaddr.count >= MemoryLayout<sockaddr_in6>.size {
            let bytes = Array(sockaddr[8..<24])
            return isSpecialIPv6(bytes) ? describeIPv6(bytes) : nil
        }
        return "an address of family \(family)"
    }

    public static func isSpecialIPv4(_ octets: [UInt8]) -> Bool {
        guard octets.count == 4 else { return true }
        let (a, b) = (octets[0], octets[1])
        return a == 0 || a == 10 || a == 127 || (a == 100 && (b & 0xC0) == 64) || (a == 169 && b == 254)
            || (a == 172 && (b & 0xF0) == 16) || (a == 192 && b == 168) || a >= 224
    }

    public static func isSpecialIPv6(_ bytes: [UInt8]) -> Bool {
        guard bytes.count == 16 else { return true }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
            return isSpecialIPv4(Array(bytes[12..<16]))
        }
        let unspecifiedOrLoopback = bytes[0..<15].allSatisfy { $0 == 0 } && bytes[15] <= 1
        return unspecifiedOrLoopback || (bytes[0] & 0xFE) == 0xFC || (bytes[0] == 0xFE && (bytes[1] & 0xC0) == 0x80)
            || bytes[0] == 0xFF
    }

    static func describeIPv6(_ bytes: [UInt8]) -> String {
        stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            .joined(separator: ":")
    }
}
