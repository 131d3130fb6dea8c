import Glibc

/// The addresses a webhook must not reach unless its destination allows it (SSRF): every block
/// of IANA's IPv4 and IPv6 Special-Purpose Address Registries (loopback, "this network",
/// private, shared/CGNAT, link-local, documentation, benchmarking, the protocol assignments,
/// AS112, AMT, ORCHID, the deprecated 6to4 relay anycast), multicast, and the reserved
/// 240.0.0.0/4 with broadcast; in IPv6 everything outside the global unicast space
/// 2000::/3 (unique local, link-local, site-local, multicast, discard, the local-use
/// NAT64 prefix 64:ff9b:1::/48, ...). The blocks the registries mark globally reachable
/// (anycast services, AS112, AMT) are refused too: no webhook receiver lives there.
///
/// An IPv6 address that carries an IPv4 address is judged by that IPv4 address, so an
/// internal host cannot be reached through a translator: IPv4-mapped (`::ffff:0:0/96`),
/// IPv4-compatible (`::/96`, `::` and `::1` included: 0.0.0.0/8), the NAT64 well-known
/// prefix (`64:ff9b::/96`), 6to4 (`2002::/16`, the IPv4 in bits 16-47) and Teredo
/// (`2001::/32`, refused when either its server or its client address is special).
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

    /// A block of addresses: the first address's bytes and the prefix length in bits.
    struct Block {
        let prefix: [UInt8]
        let length: Int

        init(prefix: [UInt8], length: Int) {
            precondition(prefix.count * 8 >= length, "a block's prefix bytes cover its length")
            self.prefix = prefix
            self.length = length
        }

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count >= prefix.count else { return false }
            var remaining = length
            for (index, byte) in prefix.enumerated() where remaining > 0 {
                let bits = min(remaining, 8)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                if address[index] & mask != byte & mask { return false }
                remaining -= bits
            }
            return true
        }
    }

    /// IANA's IPv4 Special-Purpose Address Registry (every entry, whatever its "globally
    /// reachable" column says), multicast and the reserved block with broadcast.
    static let specialIPv4: [Block] = [
        Block(prefix: [0, 0, 0, 0], length: 8),  // "this network" (0.0.0.0 reaches the host itself)
        Block(prefix: [10, 0, 0, 0], length: 8),  // private (RFC 1918)
        Block(prefix: [100, 64, 0, 0], length: 10),  // shared address space, CGNAT (RFC 6598)
        Block(prefix: [127, 0, 0, 0], length: 8),  // loopback
        Block(prefix: [169, 254, 0, 0], length: 16),  // link-local: cloud metadata services
        Block(prefix: [172, 16, 0, 0], length: 12),  // private (RFC 1918)
        Block(prefix: [192, 0, 0, 0], length: 24),  // IETF protocol assignments (DS-Lite, PCP, TURN, NAT64 discovery)
        Block(prefix: [192, 0, 2, 0], length: 24),  // documentation (TEST-NET-1)
        Block(prefix: [192, 31, 196, 0], length: 24),  // AS112-v4
        Block(prefix: [192, 52, 193, 0], length: 24),  // AMT
        Block(prefix: [192, 88, 99, 0], length: 24),  // deprecated 6to4 relay anycast
        Block(prefix: [192, 168, 0, 0], length: 16),  // private (RFC 1918)
        Block(prefix: [192, 175, 48, 0], length: 24),  // AS112 direct delegation
        Block(prefix: [198, 18, 0, 0], length: 15),  // benchmarking
        Block(prefix: [198, 51, 100, 0], length: 24),  // documentation (TEST-NET-2)
        Block(prefix: [203, 0, 113, 0], length: 24),  // documentation (TEST-NET-3)
        Block(prefix: [224, 0, 0, 0], length: 4),  // multicast
        Block(prefix: [240, 0, 0, 0], length: 4),  // reserved, and 255.255.255.255 broadcast
    ]

    /// The global unicast space: every IPv6 address outside it is special.
    static let globalUnicast = Block(prefix: [0x20], length: 3)

    /// IANA's IPv6 Special-Purpose Address Registry entries inside 2000::/3 that carry no
    /// IPv4 address (the Teredo and 6to4 entries are judged by the IPv4 they carry).
    static let specialGlobalIPv6: [Block] = [
        // IETF protocol assignments: anycast, benchmarking, ORCHID, AMT, AS112, DET.
        Block(prefix: [0x20, 0x01, 0x00, 0x00], length: 23),
        Block(prefix: [0x20, 0x01, 0x0D, 0xB8], length: 32),  // documentation
        Block(prefix: [0x26, 0x20, 0x00, 0x4F, 0x80, 0x00], length: 48),  // AS112 direct delegation
        Block(prefix: [0x3F, 0xFF, 0x00], length: 20),  // documentation (RFC 9637)
    ]

    static let mapped = Block(prefix: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF], length: 96)
    static let compatible = Block(prefix: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], length: 96)
    static let nat64WellKnown = Block(prefix: [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0], length: 96)
    static let sixToFour = Block(prefix: [0x20, 0x02], length: 16)
    static let teredo = Block(prefix: [0x20, 0x01, 0x00, 0x00], length: 32)

    public static func isSpecialIPv4(_ octets: [UInt8]) -> Bool {
        guard octets.count == 4 else { return true }
        return specialIPv4.contains { $0.contains(octets) }
    }

    public static func isSpecialIPv6(_ bytes: [UInt8]) -> Bool {
        guard bytes.count == 16 else { return true }
        if let carried = embeddedIPv4(bytes) {
            return carried.contains(where: isSpecialIPv4)
        }
        return !globalUnicast.contains(bytes) || specialGlobalIPv6.contains { $0.contains(bytes) }
    }

    /// The IPv4 addresses an IPv6 address carries (and is routed by), or nil when it carries none.
    static func embeddedIPv4(_ bytes: [UInt8]) -> [[UInt8]]? {
        if mapped.contains(bytes) || compatible.contains(bytes) || nat64WellKnown.contains(bytes) {
            return [Array(bytes[12..<16])]
        }
        if sixToFour.contains(bytes) { return [Array(bytes[2..<6])] }
        if teredo.contains(bytes) {
            // The Teredo server in bits 32-63, the client's public address inverted in the last 32.
            return [Array(bytes[4..<8]), bytes[12..<16].map { ~$0 }]
        }
        return nil
    }

    static func describeIPv6(_ bytes: [UInt8]) -> String {
        stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            .joined(separator: ":")
    }
}
