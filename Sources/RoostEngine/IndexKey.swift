import RoostModel

/// One app's data in one mode: the unit an `AppIndex` holds and a shard owns.
package struct IndexKey: Hashable, Sendable, CustomStringConvertible {
    package var app: AppID
    package var mode: AppMode

    package init(app: AppID, mode: AppMode) {
        self.app = app
        self.mode = mode
    }

    package var description: String { "\(app)/\(mode)" }
}
