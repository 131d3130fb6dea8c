/// The settings of `siwa-endpoint google` (the RISC management API).
extension SettingKey where Value == String? {
    public static var googleServiceAccountFile: Self { Self("SIWA_GOOGLE_SERVICE_ACCOUNT_FILE") }
    public static var googleReceiverURL: Self { Self("SIWA_GOOGLE_RECEIVER_URL") }
    public static var googleCAFile: Self { Self("SIWA_GOOGLE_CA_FILE") }
}

extension SettingKey where Value == String {
    public static var googleRISCAPIURL: Self { Self("SIWA_GOOGLE_RISC_API_URL") }
}
