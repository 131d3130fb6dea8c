import Foundation
import Glibc
import SIWASettingKeys
import SIWASpool

extension ServerConfiguration {
    /// The settings checked against this machine: the spool directory exists or can be
    /// created and is a writable directory; a unix socket path is free or a leftover socket
    /// (never another kind of file) in an existing directory; the socket group exists.
    /// `serve --check` and `serve` both run it, before anything is started, so a refusal
    /// names its setting and comes before `started`.
    public func checkHost() throws(ConfigurationError) {
        try Self.checkDirectory(spool.directory, setting: SettingKey.spoolDirectory.name)
        try Self.checkDirectory(spool.rejectedDirectory, setting: SettingKey.spoolDirectory.name)
        if case .unixSocket(let path, _, let group) = fastCGI.server.address {
            try Self.checkSocketPath(path)
            if let group {
                var entry = Glibc.group()
                var result: UnsafeMutablePointer<Glibc.group>?
                var buffer = [CChar](repeating: 0, count: 16 * 1024)
                guard getgrnam_r(group, &entry, &buffer, buffer.count, &result) == 0, result != nil else {
                    throw ConfigurationError(
                        SettingKey.fastCGISocketGroup, "names no group on this machine: \(group)")
                }
            }
        }
    }

    private static func checkDirectory(_ path: String, setting: String) throws(ConfigurationError) {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw ConfigurationError(setting: setting, "\(path) is not a directory")
            }
        } else {
            do {
                // With the spool's own mode: `serve --check` leaves the directory as serve would.
                try FileManager.default.createDirectory(
                    atPath: path, withIntermediateDirectories: true,
                    attributes: [.posixPermissions: Int(SpoolFileSystem.privateDirectoryMode)])
            } catch {
                throw ConfigurationError(setting: setting, "\(path) cannot be created: \(Self.reason(error))")
            }
        }
        guard access(path, W_OK | X_OK) == 0 else {
            throw ConfigurationError(setting: setting, "\(path) is not writable: \(String(cString: strerror(errno)))")
        }
    }

    private static func checkSocketPath(_ path: String) throws(ConfigurationError) {
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFSOCK {
            throw ConfigurationError(
                SettingKey.fastCGISocket, "\(path) exists and is not a socket: it is never replaced")
        }
        let directory = (path as NSString).deletingLastPathComponent
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue
        else {
            throw ConfigurationError(SettingKey.fastCGISocket, "the directory \(directory) does not exist")
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw ConfigurationError(
                SettingKey.fastCGISocket,
                "cannot create the socket in \(directory): \(String(cString: strerror(errno)))")
        }
    }

    private static func reason(_ error: any Error) -> String {
        let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError
        if let underlying, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        return (error as NSError).localizedDescription
    }
}
