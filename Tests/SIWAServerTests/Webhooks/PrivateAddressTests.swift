import SIWAHTTPS
import Testing

/// The addresses a webhook refuses unless its destination allows them (SSRF), in process.
@Suite struct PrivateAddressTests {
    @Test("IPv4: loopback, unspecified, RFC 1918, CGNAT, link-local, multicast, reserved refused; public allowed")
    func ipv4() {
        for special in [
            [127, 0, 0, 1], [0, 0, 0, 0], [10, 1, 2, 3], [172, 16, 0, 1], [172, 31, 255, 255], [192, 168, 1, 1],
            [100, 64, 0, 1], [100, 127, 255, 255], [169, 254, 169, 254], [224, 0, 0, 1], [255, 255, 255, 255],
        ] {
            #expect(PrivateAddress.isSpecialIPv4(special.map(UInt8.init)), "\(special)")
        }
        for publicAddress in [
            [8, 8, 8, 8], [172, 32, 0, 1], [100, 128, 0, 1], [192, 169, 0, 1], [17, 253, 144, 10],
        ] {
            #expect(!PrivateAddress.isSpecialIPv4(publicAddress.map(UInt8.init)), "\(publicAddress)")
        }
    }

    @Test("IPv6: ::, ::1, fc00::/7, fe80::/10, ff00::/8 and a mapped private IPv4 refused; public allowed")
    func ipv6() {
        func address(_ head: [UInt8], _ tail: [UInt8] = []) -> [UInt8] {
            head + [UInt8](repeating: 0, count: 16 - head.count - tail.count) + tail
        }
        for special in [
            address([]), address([], [1]), address([0xFC]), address([0xFD, 0x12]), address([0xFE, 0x80]),
            address([0xFF, 0x02]), address([], [0xFF, 0xFF, 10, 0, 0, 1]),
        ] {
            #expect(PrivateAddress.isSpecialIPv6(special), "\(special)")
        }
        for publicAddress in [address([0x20, 0x01, 0x48, 0x60]), address([], [0xFF, 0xFF, 8, 8, 8, 8])] {
            #expect(!PrivateAddress.isSpecialIPv6(publicAddress), "\(publicAddress)")
        }
    }
}
