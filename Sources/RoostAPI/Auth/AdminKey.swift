import Glibc
import RoostCrypto
import RoostModel
import RoostPlatform

/// Where the operator key comes from (spec §1): `ROOST_ADMIN_KEY`, else
/// `DIR/admin.key` (mode 0600), created with a random key on first start.
public enum AdminKey {
    /// The shortest admin key accepted from the environment.
    public static let environmentKeyBytesMin = 16

    /// Returns the admin key and, when it lives in a file, that file's path
    /// (which the server prints; the key itself is never printed).
    public static func resolve(
        environmentValue: String?, dataDirectory: String
    ) throws -> (key: String, filePath: String?) {
        if let environmentValue, !environmentValue.isEmpty {
            guard environmentValue.utf8.count >= environmentKeyBytesMin else {
                throw AdminKeyError.tooShort(minimumBytes: environmentKeyBytesMin)
            }
            return (environmentValue, nil)
        }
        let path = dataDirectory + "/admin.key"
        if let existing = try DurableFile.readIfExists(path: path, limitBytes: 4096) {
            let key = String(decoding: existing, as: UTF8.self).trimmingASCIIWhitespace()
            guard key.utf8.count >= environmentKeyBytesMin else { throw AdminKeyError.unreadable(path: path) }
            return (key, path)
        }
        let key = "rk_admin_" + Hex.encode(Crypto.randomBytes(32))
        try DurableFile.replace(path: path, with: Array((key + "\n").utf8))
        return (key, path)
    }
}

/// The admin key cannot be used.
public enum AdminKeyError: Error, CustomStringConvertible {
    case tooShort(minimumBytes: Int)
    case unreadable(path: String)

    public var description: String {
        switch self {
        case .tooShort(let minimumBytes): "ROOST_ADMIN_KEY must be at least \(minimumBytes) bytes"
        case .unreadable(let path): "\(path) does not hold a usable admin key"
        }
    }
}

extension String {
    /// Returns the string without leading and trailing ASCII whitespace.
    func trimmingASCIIWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" }
        return String(self.drop(while: isSpace).reversed().drop(while: isSpace).reversed())
    }
}
