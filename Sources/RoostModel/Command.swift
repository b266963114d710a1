/// One operation of the API on one (app, mode) index, as a value: decoded on
/// the event loop that read the request, executed by the shard that owns the
/// index (`AppIndex.execute`), answered with an `Outcome` that the same event
/// loop renders. Values cross threads; closures do not (docs/architecture.md).
package enum Command: Sendable {
    /// `POST /v1/devices` and the registrations of every dialect.
    case register(RegisterRequest, at: Timestamp)
    /// `GET /v1/devices/{id}`.
    case getDevice(DeviceID)
    /// `PATCH /v1/devices/{id}`.
    case patchDevice(DeviceID, tags: TagsChange, optedIn: Bool?)
    /// `DELETE /v1/devices/{id}`.
    case deleteDevice(DeviceID)
    /// An operation not yet expressed as its own case: a function run in the
    /// shard's turn. Kept only while routes move to value commands; it is
    /// not used by the registration path.
    case custom(CustomWork)
}

/// The function of a `Command.custom`: runs on the index in the shard's turn
/// and returns the mutations to log and a value for the route to render.
package struct CustomWork: Sendable {
    package let run: @Sendable (inout AppIndex) -> (value: any Sendable, mutations: [Mutation])

    package init(_ run: @escaping @Sendable (inout AppIndex) -> (value: any Sendable, mutations: [Mutation])) {
        self.run = run
    }
}

/// What a `Command` did, as a value the route renders on its own loop.
package enum Outcome: Sendable {
    /// A registration: the device as it is now, 201 when it was created.
    case registered(RegisterOutcome)
    /// A device read, patched or found.
    case device(Device)
    /// A delete: whether a device was removed.
    case deleted(Bool)
    /// A rule of the model refused the command; nothing changed.
    case rejected(RegistryRejection)
    /// The value a `Command.custom` returned.
    case custom(any Sendable)
    /// Both modes of an app were dropped, with this many devices.
    case appRemoved(devices: Int)
}

extension AppIndex {
    /// Executes `command` on this index and returns its outcome with the
    /// mutations to log before the outcome may be acknowledged. Pure: the
    /// same index and command give the same result.
    package mutating func execute(_ command: Command) -> (outcome: Outcome, mutations: [Mutation]) {
        switch command {
        case .register(let request, let now):
            switch register(request, at: now) {
            case .success(let registered): return (.registered(registered), registered.mutations)
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .getDevice(let id):
            guard let found = device(id) else { return (.rejected(.deviceNotFound), []) }
            return (.device(found), [])
        case .patchDevice(let id, let tags, let optedIn):
            switch patchDevice(id, tags: tags, optedIn: optedIn) {
            case .success(let change): return (.device(change.device), change.mutations)
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .deleteDevice(let id):
            let removal = deleteDevice(id)
            return (.deleted(removal.deleted), removal.mutations)
        case .custom(let work):
            let (value, mutations) = work.run(&self)
            return (.custom(value), mutations)
        }
    }
}
