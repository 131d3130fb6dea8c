#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension String {
    /// Byte-for-byte equality of the UTF-8 encodings. `==` would take a canonically
    /// equivalent spelling as equal; `utf8.elementsEqual` says the same as this but walks
    /// both views index by index, several times slower on the verification path.
    func hasSameUTF8(as other: String) -> Bool {
        guard utf8.count == other.utf8.count else { return false }
        var this = self
        var that = other
        return this.withUTF8 { thisBytes in
            that.withUTF8 { thatBytes in
                thisBytes.isEmpty || memcmp(thisBytes.baseAddress!, thatBytes.baseAddress!, thisBytes.count) == 0
            }
        }
    }
}
