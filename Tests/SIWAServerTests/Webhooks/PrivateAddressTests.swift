import Glibc
import SIWAHTTPS
import Testing

/// The addresses a webhook refuses unless its destination allows them (SSRF), in process:
/// every block of IANA's special-purpose registries, and every IPv6 form that carries an
/// IPv4 address judged by that IPv4 address.
@Suite struct PrivateAddressTests {
    static func ipv4(_ text: String) -> [UInt8] {
        var address = in_addr()
        precondition(inet_pton(AF_INET, text, &address) == 1, text)
        return withUnsafeBytes(of: &address) { Array($0) }
    }

    static func ipv6(_ text: String) -> [UInt8] {
        var address = in6_addr()
        precondition(inet_pton(AF_INET6, text, &address) == 1, text)
        return withUnsafeBytes(of: &address) { Array($0) }
    }

    @Test("IPv4: every block of IANA's special-purpose registry, multicast, reserved and broadcast refused")
    func ipv4Special() {
        for special in [
            "0.0.0.0", "0.255.255.255", "10.1.2.3", "100.64.0.1", "100.127.255.255", "100.100.100.200", "127.0.0.1",
            "127.255.255.254", "169.254.169.254", "169.254.0.1", "172.16.0.1", "172.31.255.255", "192.0.0.1",
            "192.0.0.9", "192.0.0.170", "192.0.0.255", "192.0.2.1", "192.31.196.1", "192.52.193.1", "192.88.99.1",
            "192.168.1.1", "192.175.48.1", "198.18.0.1", "198.19.255.255", "198.51.100.1", "203.0.113.1",
            "224.0.0.1", "239.255.255.255", "240.0.0.1", "255.255.255.255",
        ] {
            #expect(PrivateAddress.isSpecialIPv4(Self.ipv4(special)), "\(special)")
        }
    }

    @Test("IPv4: public addresses, next to each special block, allowed")
    func ipv4Public() {
        for publicAddress in [
            "8.8.8.8", "1.1.1.1", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.1", "126.255.255.255",
            "128.0.0.1", "169.253.255.255", "169.255.0.1", "172.15.255.255", "172.32.0.1", "192.0.1.1",
            "192.0.3.1", "192.88.98.1", "192.167.255.255", "192.169.0.1", "198.17.255.255", "198.20.0.1",
            "198.51.99.1", "203.0.112.1", "223.255.255.255", "17.253.144.10",
        ] {
            #expect(!PrivateAddress.isSpecialIPv4(Self.ipv4(publicAddress)), "\(publicAddress)")
        }
    }

    @Test("IPv6: outside 2000::/3 and the special blocks inside it refused; global unicast allowed")
    func ipv6Special() {
        for special in [
            "::", "::1", "fc00::1", "fd12::1", "fd00:ec2::254", "fd20:ce::254", "fe80::1", "febf::1", "fec0::1",
            "ff02::1", "ff0e::1", "100::1", "100:0:0:1::1", "64:ff9b:1::1", "64:ff9b:1::808:808", "64:ff9b:1:a00:1::",
            "64:ff9b::1:0:0:808:808", "::ffff:0:808:808", "5f00::1", "4000::1", "2001:1::1", "2001:2::1",
            "2001:3::1", "2001:4:112::1", "2001:10::1", "2001:20::1", "2001:30::1", "2001:1ff::1", "2001:db8::1",
            "2620:4f:8000::1", "3fff::1", "3fff:fff::1",
        ] {
            #expect(PrivateAddress.isSpecialIPv6(Self.ipv6(special)), "\(special)")
        }
        for publicAddress in [
            "2001:4860:4860::8888", "2001:200::1", "2606:4700::1111", "2620:4f:8001::1", "3ffe::1", "3fff:1000::1",
            "2a00:1450::1", "2001:db9::1",
        ] {
            #expect(!PrivateAddress.isSpecialIPv6(Self.ipv6(publicAddress)), "\(publicAddress)")
        }
    }

    @Test("IPv6 carrying IPv4: mapped, compatible, NAT64 64:ff9b::/96, 6to4 and Teredo judged by the IPv4 address")
    func ipv6CarryingIPv4() {
        for special in [
            "::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::10.0.0.1", "::127.0.0.1",
            "::169.254.169.254", "64:ff9b::10.0.0.1", "64:ff9b::169.254.169.254", "64:ff9b::127.0.0.1",
            "64:ff9b::100.100.100.200", "64:ff9b::192.168.0.1", "64:ff9b::0.0.0.0", "2002:a00:1::1",
            "2002:a9fe:a9fe::1", "2002:7f00:1::", "2002:c0a8:101::1",
            // Teredo: server 10.0.0.1 (client public), then client 10.0.0.1 (inverted: f5ff:fffe), server public.
            "2001:0:a00:1:0:0:f7f7:f7f7", "2001:0:808:808:0:0:f5ff:fffe", "2001:0:808:808::5601:5601",
        ] {
            #expect(PrivateAddress.isSpecialIPv6(Self.ipv6(special)), "\(special)")
        }
        for publicAddress in [
            "::ffff:8.8.8.8", "::8.8.8.8", "64:ff9b::8.8.8.8", "64:ff9b::17.253.144.10", "2002:808:808::1",
            // Teredo: server 8.8.8.8, client 8.8.4.4 (inverted: f7f7:fbfb).
            "2001:0:808:808:0:0:f7f7:fbfb",
        ] {
            #expect(!PrivateAddress.isSpecialIPv6(Self.ipv6(publicAddress)), "\(publicAddress)")
        }
    }

    @Test("describeIfSpecial: a NAT64 address of the metadata service named, a public one nil, another family refused")
    func describe() {
        func described(_ text: String) -> String? {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            _ = inet_pton(AF_INET6, text, &address.sin6_addr)
            return withUnsafeBytes(of: &address) { raw in
                PrivateAddress.describeIfSpecial(
                    family: AF_INET6,
                    sockaddr: UnsafeBufferPointer(
                        start: raw.bindMemory(to: UInt8.self).baseAddress,
                        count: raw.count))
            }
        }
        #expect(described("64:ff9b::169.254.169.254") == "64:ff9b:0:0:0:0:a9fe:a9fe")
        #expect(described("64:ff9b::8.8.8.8") == nil)
        var unixAddress = sockaddr_un()
        let unixText = withUnsafeBytes(of: &unixAddress) { raw in
            PrivateAddress.describeIfSpecial(
                family: AF_UNIX,
                sockaddr: UnsafeBufferPointer(
                    start: raw.bindMemory(to: UInt8.self).baseAddress,
                    count: raw.count))
        }
        #expect(unixText == "an address of family \(AF_UNIX)")
    }
}
