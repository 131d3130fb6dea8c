/// A JWS in compact serialisation: three strict base64url segments.
struct CompactJWS {
    let header: [UInt8]
    let claims: [UInt8]
    let signature: [UInt8]
    /// `BASE64URL(header) "." BASE64URL(claims)`: the bytes the signature covers.
    let signingInput: ArraySlice<UInt8>

    init(_ token: [UInt8]) throws(VerificationError) {
        let dot = UInt8(ascii: ".")
        var dots: [Int] = []
        var searchFrom = 0
        while dots.count <= 2, let found = token[searchFrom...].firstIndex(of: dot) {
            dots.append(found)
            searchFrom = found + 1
        }
        guard dots.count == 2 else {
            let segments = dots.count + 1
            throw VerificationError(
                .tokenSegmentCount,
                "the payload has \(segments > 3 ? "more than 3" : String(segments)) segments; a compact JWS has 3")
        }
        let headerText = token[0..<dots[0]]
        let claimsText = token[(dots[0] + 1)..<dots[1]]
        let signatureText = token[(dots[1] + 1)...]
        // An empty signature is let through to the header check, so `alg: none`
        // tokens are named as such; RS256 then refuses it for its length.
        guard !headerText.isEmpty, !claimsText.isEmpty else {
            throw VerificationError(.tokenEmptySegment, "the header or claims segment of the compact JWS is empty")
        }
        guard let header = Base64URL.decode(headerText), let claims = Base64URL.decode(claimsText),
            let signature = Base64URL.decode(signatureText)
        else {
            throw VerificationError(.tokenNotBase64URL, "a segment is not strict unpadded base64url")
        }
        self.header = header
        self.claims = claims
        self.signature = signature
        self.signingInput = token[0..<dots[1]]
    }
}
