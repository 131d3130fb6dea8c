/// The TEST FIXTURE that signed the fuzz seed corpus (`Fuzz/corpus`): its JWKS (the
/// private key is `Fuzz/test-fixture-signing-key.pem`), the client ID and the time the
/// seeds were signed at. Defined here once, for the fuzz target and the corpus test.
/// Never configure this key in production.
public enum FuzzFixture {
    public static let jwksDocument = #"""
        {"keys":[{"alg":"RS256","e":"AQAB","kid":"fuzz-fixture-key","kty":"RSA","n":"528bYvL6XUteZT967neeQhiEnjRN_zArWArvooH4jXYZjPh_v9ZwkJhvgAmveF4Qzbux8-6Pw0YqStLsVREjlOF8CoOtcfiE-epvt7iWrNPUq8_hbN1E75QzaqXV8wcK505YASpbSkRtkpaLEMi1YbV7-BQhquhbINhI1RstNnUXNmXI5Rn55Or5xQnSe9TjTrIAqxBnqVEBryaX2i2BcQl68CJctKl5opSF2VuZfFp3iEzj1hwriu2BeLNAaleHXSeH5fXOcgnPnX9kWusDuW0BjxowtpteFH1uInc4jEXyVoxxsHcmog6YyQvDEk4ImrkEnr7oKJ30jEjWTvG3EQ","use":"sig"}]}
        """#

    public static let clientID = "com.example.app"

    /// The seeds were signed at this time (Unix seconds), so they verify, and the fuzzer
    /// explores beyond the signature check by mutating signed claims' neighbours.
    public static let now: Int64 = 1_796_000_000
}
