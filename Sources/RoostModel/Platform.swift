/// The key's mode: devices registered with a test key and with a live key live apart.
package enum AppMode: UInt8, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    case live = 0
    case test = 1

    /// Returns the mode named by its spec spelling (`live`, `test`), or nil.
    package init?(name: String) { self.init(spelling: name) }

    /// The same for a part of a string (a route parameter, a token's field).
    package init?(name: Substring) { self.init(spelling: name) }

    // Generic and private: specialised here for the two types above (a
    // generic called across modules is not, and costs ~470 instructions a name).
    private init?(spelling name: some StringProtocol) {
        guard let value = ExactText.value(of: name, ("live", Self.live), ("test", Self.test)) else { return nil }
        self = value
    }

    package var name: String {
        switch self {
        case .live: "live"
        case .test: "test"
        }
    }

    package var description: String { name }
}

/// A device's push platform: `ios` uses APNs tokens, `android` uses FCM tokens.
package enum Platform: UInt8, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    case ios = 0
    case android = 1

    /// Returns the platform named by its spec spelling (`ios`, `android`), or nil
    /// (the API answers 400 `invalid_platform`).
    package init?(name: String) { self.init(spelling: name) }

    /// The same for a part of a string (a route parameter, a token's field).
    package init?(name: Substring) { self.init(spelling: name) }

    // Generic and private: specialised here for the two types above (a
    // generic called across modules is not, and costs ~470 instructions a name).
    private init?(spelling name: some StringProtocol) {
        guard let value = ExactText.value(of: name, ("ios", Self.ios), ("android", Self.android)) else { return nil }
        self = value
    }

    package var name: String {
        switch self {
        case .ios: "ios"
        case .android: "android"
        }
    }

    package var description: String { name }
}

/// The provider environment of a token. APNs has two; FCM has none, so an
/// android device is always `production` (a compatibility value, as the Carillon
/// seed puts it).
package enum APNsEnvironment: UInt8, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    case production = 0
    case sandbox = 1

    /// Returns the environment named by its spec spelling, or nil (400 `invalid_environment`).
    package init?(name: String) { self.init(spelling: name) }

    /// The same for a part of a string (a route parameter, a token's field).
    package init?(name: Substring) { self.init(spelling: name) }

    // Generic and private: specialised here for the two types above (a
    // generic called across modules is not, and costs ~470 instructions a name).
    private init?(spelling name: some StringProtocol) {
        guard let value = ExactText.value(of: name, ("production", Self.production), ("sandbox", Self.sandbox)) else {
            return nil
        }
        self = value
    }

    package var name: String {
        switch self {
        case .production: "production"
        case .sandbox: "sandbox"
        }
    }

    package var description: String { name }

    /// Returns whether a device of `platform` may use this environment (android: production only).
    package func isAllowed(for platform: Platform) -> Bool {
        switch (platform, self) {
        case (.ios, _): true
        case (.android, .production): true
        case (.android, .sandbox): false
        }
    }
}
