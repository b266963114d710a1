/// One row of a bulk import, as the API parsed it: a registration for the
/// model, or a row the API refused before it reached the model (its error code).
package enum ImportRow: Hashable, Sendable {
    case register(line: Int, RegisterRequest)
    /// A device as the export wrote it, kept as is where free (NDJSON import).
    case restore(line: Int, Device)
    case refused(line: Int, code: String)
}

/// A row of an import that changed nothing, and why.
package struct ImportRejection: Hashable, Sendable {
    package var line: Int
    package var code: String

    package init(line: Int, code: String) {
        self.line = line
        self.code = code
    }
}

/// What one import batch did: devices created and updated, rows rejected (in order).
package struct ImportBatch: Hashable, Sendable {
    package var created = 0
    package var updated = 0
    package var rejected: [ImportRejection] = []

    package init(created: Int = 0, updated: Int = 0, rejected: [ImportRejection] = []) {
        self.created = created
        self.updated = updated
        self.rejected = rejected
    }
}

extension AppIndex {
    /// Registers each row in order, as `register` would: a rejected row
    /// changes nothing (rule 7) and the rows after it still apply. Returns
    /// the batch's counts and the mutations of every accepted row, in order.
    /// O(rows) registrations.
    mutating func importRows(_ rows: [ImportRow], at now: Timestamp) -> (ImportBatch, [Mutation]) {
        var batch = ImportBatch()
        var mutations: [Mutation] = []
        for row in rows {
            switch row {
            case .refused(let line, let code):
                batch.rejected.append(ImportRejection(line: line, code: code))
            case .restore(let line, let device):
                switch store.importExported(device, settings: settings) {
                case .failure(let rejection):
                    batch.rejected.append(ImportRejection(line: line, code: rejection.code))
                case .success(let restored):
                    batch.created += 1
                    mutations.append(contentsOf: restored)
                }
            case .register(let line, let request):
                switch register(request, at: now, appendingTo: &mutations) {
                case .failure(let rejection):
                    batch.rejected.append(ImportRejection(line: line, code: rejection.code))
                case .success(let outcome):
                    if outcome.created { batch.created += 1 } else { batch.updated += 1 }
                }
            }
        }
        return (batch, mutations)
    }
}
