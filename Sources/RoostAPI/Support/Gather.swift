import Synchronization

/// Collects the answers of several shard jobs of one request and finishes
/// once every part is in (for example the live and test counts of an app).
final class Gather<Part: Sendable>: Sendable {
    private let parts: Mutex<(values: [Part?], missing: Int, failed: Bool)>
    private let finish: @Sendable (_ parts: [Part]?) -> Void

    /// `finish` receives the parts in order, or nil when any part failed.
    init(count: Int, finish: @escaping @Sendable (_ parts: [Part]?) -> Void) {
        precondition(count > 0, "a gather needs at least one part")
        parts = Mutex((Array(repeating: nil, count: count), count, false))
        self.finish = finish
    }

    /// Records part `index`, or a failure (nil).
    func deliver(_ index: Int, _ part: Part?) {
        let done = parts.withLock { state -> (complete: Bool, values: [Part]?) in
            precondition(state.values[index] == nil, "part \(index) delivered twice")
            if let part { state.values[index] = part } else { state.failed = true }
            state.missing -= 1
            guard state.missing == 0 else { return (false, nil) }
            return (true, state.failed ? nil : state.values.map { $0! })
        }
        if done.complete { finish(done.values) }
    }
}
