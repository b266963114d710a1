/// `POST /v1/devices/batch` (spec §7): registrations applied in order in one
/// shard turn, each exactly as `register` would apply it alone.
package enum DeviceBatch {
    /// The most registrations one batch may hold (spec §7: 1 to 1,000); more
    /// is 400 `batch_too_large` before anything is applied.
    package static let itemsMax = 1_000
}

extension AppIndex {
    /// Registers each request in order, as `register` would: a rejected one
    /// changes nothing (rule 7) and those after it still apply. Returns one
    /// outcome per request (`registered` or `rejected`), in order, and the
    /// mutations of every accepted one, in order: they go to the log in the
    /// shard's one append for the turn. O(requests) registrations.
    mutating func registerBatch(_ requests: [RegisterRequest], at now: Timestamp) -> (Outcome, [Mutation]) {
        precondition(requests.count <= DeviceBatch.itemsMax, "a batch of \(requests.count) registrations")
        var results: [Outcome] = []
        results.reserveCapacity(requests.count)
        var mutations: [Mutation] = []
        for request in requests {
            // The log has the mutations; the answer does not need a second copy.
            switch register(request, at: now, appendingTo: &mutations) {
            case .success(let registered):
                results.append(.registered(registered))
            case .failure(let rejection):
                results.append(.rejected(rejection))
            }
        }
        return (.batch(results), mutations)
    }
}
