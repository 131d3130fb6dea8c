extension VerificationError {
    /// The RFC 8935 error code a push receiver answers with (400, `{"err","description"}`),
    /// chosen by cause; nil for a refusal that is about our side (no keys yet, our entry for
    /// the kid unusable): that one is a 503 and Google redelivers. `access_denied` is
    /// registered but not used: nothing here refuses an authentic token for its sender.
    public var securityEventErrorCode: String? {
        switch code {
        case _ where failureClass == .retryable: nil
        case .kidMissing, .kidInvalid, .kidUnknown: "invalid_key"
        case .algMissing, .algNotAllowed, .critNotSupported, .signatureLengthMismatch, .signatureInvalid:
            "authentication_failed"
        case .issMissing, .issMismatch: "invalid_issuer"
        case .audMissing, .audInvalid, .audNotServed: "invalid_audience"
        default: "invalid_request"
        }
    }
}
