import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTelemetry

/// The application behind the HTTP server: routes every request of spec
/// §1–3 to its handler and renders every error in the envelope of spec §2.
public final class RoostService: HTTPResponder {
    /// The default largest JSON body (spec §2).
    public static let jsonBodyBytesMax = 64 * 1024

    private let router: Router
    private let authenticator: Authenticator
    private let clock: any APIClock
    package let registry: Registry
    package let catalog: Catalog
    package let identityKeys: IdentityKeyStore
    /// The per-address limit of the routes a mobile key or an identity token authorizes.
    package let clientLimiter: ClientAddressLimiter
    /// The requests waiting for engine outcomes, one table per engine loop.
    private let loopRequests: [LoopRequests]
    /// What `GET /readyz` answers.
    package let readiness: Readiness
    /// Counts, stamps (`X-Request-Id`) and logs every answer.
    package let observer: RequestObserver
    /// `GET /metrics`, and where start-up hands it the server and recovery figures.
    package let metrics: MetricsExporter
    /// Requests with an `Idempotency-Key` not yet answered (spec §7: 409).
    let idempotencyInFlight = IdempotencyInFlight()
    /// The inactivity sweep (spec §8); `roost serve` starts it once it serves.
    package let inactivity: InactivitySweeper
    /// The slots of `GET /v1/devices/export` (`DeviceExport.concurrentMax`, per app `concurrentPerAppMax`).
    let deviceExportSlots = ExportSlots()
    /// In cluster mode (spec §13), the engine's log: whether this node leads,
    /// and the leader it knows. Nil on one node.
    private let clusterLog: ClusterLog?
    /// In cluster mode, the node: its status for the read gate and `GET /v1/cluster`. Nil on one node.
    private let cluster: (any ClusterControl)?

    /// Opens the service over a recovered engine, whose catalog (apps, keys,
    /// settings, counters, identity signing keys) recovery rebuilt: migrates
    /// an older release's `DIR/catalog.json` and `DIR/identity-keys.json` into
    /// the log (`CatalogStartup`). Throws, with one line saying what to do,
    /// when the pieces disagree or are damaged. Call `reconcile` before serving.
    package convenience init(
        dataDirectory: String, adminKey: String, engine: DurableEngine, clock: any APIClock = SystemClock(),
        logger: Logger = .standard, accessLog: Bool = false, trustedProxies: [IPAddress] = [],
        cluster: (any ClusterControl)? = nil
    ) throws {
        try CatalogStartup.open(
            directory: dataDirectory, store: engine.catalog, sync: { _ = try engine.log.wal.sync() },
            now: clock.wallMilliseconds())
        let catalog = Catalog(state: engine.catalog, clock: clock)
        let identityKeys = IdentityKeyStore(state: engine.catalog)
        self.init(
            catalog: catalog, adminKey: adminKey, clock: clock, registry: engine.registry, identityKeys: identityKeys,
            engine: engine, logger: logger, accessLog: accessLog, trustedProxies: trustedProxies, cluster: cluster)
    }

    /// Makes the recovered indexes agree with the recovered catalog, before
    /// anything is served: refuses data of an app the catalog never created
    /// (its catalog records are missing: serving would drop the data, and the
    /// id would be given again); drops data of an app the catalog deleted
    /// (a crash came between the catalog's record and the shard's removal
    /// record). Settings need nothing: the catalog owns them and the indexes
    /// adopt them at their first turn. O(indexes).
    package func reconcile(dataDirectory: String) async throws {
        let state = catalog.currentState()
        for shard in registry.shardSet.shards {
            for key in await shard.keys() {
                guard key.app.rawValue < state.nextAppID else {
                    throw CatalogStartError(
                        "the log in \(dataDirectory) holds devices of app \(key.app.rawValue), which the catalog "
                            + "never created (next app id \(state.nextAppID)): the catalog is missing or incomplete. "
                            + "If an older release ran here, restore \(dataDirectory)/catalog.json from a backup; "
                            + "otherwise restore the whole data directory")
                }
                guard state.apps[key.app] == nil else { continue }
                // A cluster follower changes nothing: the leader's removal record reaches it through the group log.
                guard registry.shardSet.log.takesLocalWrites else { continue }
                guard await registry.removeApp(key.app) != nil else {
                    throw CatalogStartError("the log could not take the removal of deleted app \(key.app.rawValue)")
                }
            }
        }
    }

    /// `identityKeys` nil keeps fresh signing keys in memory (tests);
    /// `engine` gives `/metrics` the log's and the snapshots' figures;
    /// `trustedProxies` are the peers whose `X-Forwarded-For` names the
    /// client for the per-address limit (`ClientAddressLimiter`).
    package init(
        catalog: Catalog, adminKey: String, clock: any APIClock, registry: Registry,
        identityKeys: IdentityKeyStore? = nil, engine: DurableEngine? = nil, logger: Logger = .standard,
        accessLog: Bool = false, trustedProxies: [IPAddress] = [], cluster: (any ClusterControl)? = nil
    ) {
        self.registry = registry
        self.cluster = cluster
        self.catalog = catalog
        // The shards read each app's settings from the catalog, their one owner.
        registry.shardSet.catalog.attach(catalog.state)
        loopRequests = registry.shardSet.loops.map { LoopRequests(loop: $0) }
        for requests in loopRequests { requests.loop.setReceiver(requests) }
        let clientLimiter = ClientAddressLimiter(trustedProxies: trustedProxies, clock: clock)
        self.clientLimiter = clientLimiter
        let keys = identityKeys ?? IdentityKeyStore.inMemory(now: clock.wallMilliseconds())
        self.identityKeys = keys
        let authenticator = Authenticator(
            adminKey: adminKey, catalog: catalog, identityKeys: keys, clientLimiter: clientLimiter)
        self.authenticator = authenticator
        let apps = AppRoutes(catalog: catalog, registry: registry)
        let readiness = Readiness(registry: registry, cluster: cluster)
        self.readiness = readiness
        let compat =
            BaruaRoutes(catalog: catalog).routes
            + NativeNotifyRoutes(catalog: catalog, clientLimiter: clientLimiter).routes
            + ConnectRoutes(keys: keys).routes
        let routes =
            [Route(.get, "/healthz", access: .open, RoostService.health), readiness.route] + ConsoleRoutes().routes
            + apps.routes
            + NativeRoutes(catalog: catalog, registry: registry, exports: deviceExportSlots).routes + compat
            + (cluster.map { ClusterRoutes(cluster: $0).routes } ?? [])
        // The counters know every route before the router exists: /metrics
        // is the last route, and its handler needs them.
        let labels = routes.map { RequestMetrics.RouteLabel(method: $0.method.name, route: $0.path) }
        let observer = RequestObserver(
            metrics: RequestMetrics(routes: labels + [MetricsRoutes.label], loops: registry.shardSet.loops.count),
            clock: clock,
            logger: logger, accessLog: accessLog, cluster: cluster)
        let inactivity = InactivitySweeper(catalog: catalog, registry: registry, clock: clock, logger: logger)
        self.inactivity = inactivity
        let metrics = MetricsExporter(
            observer: observer, registry: registry, catalog: catalog, engine: engine, logger: logger, clock: clock,
            inactivity: inactivity, cluster: cluster)
        self.router = Router(routes + MetricsRoutes(exporter: metrics).routes)
        precondition(
            router.routes.map { RequestMetrics.RouteLabel(method: $0.method.name, route: $0.path) }
                == Array(observer.metrics.labels.prefix(router.routes.count)),
            "the request counters' routes differ from the router's")
        self.observer = observer
        self.metrics = metrics
        self.clock = clock
        self.clusterLog = registry.shardSet.log as? ClusterLog
    }

    /// Every route the service serves, in declaration order, each with its
    /// declared `RouteAccess` (the isolation matrix test walks it).
    package var routes: [Route] { router.routes }

    /// Makes `/readyz` answer 503 from now on: call it when a shutdown signal
    /// arrives, before the server stops accepting (spec §11).
    public func beginShutdown() {
        readiness.beginShutdown()
    }

    public func bodyLimitBytes(for head: HTTPRequestHead) -> Int {
        router.bodyLimitBytes(path: head.path) ?? RoostService.jsonBodyBytesMax
    }

    public func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        var minimumPosition: UInt64? = nil
        if cluster != nil, let requested = ClusterPositionWait.requested(request.head) {
            switch requested {
            case .refused(let error):
                let exchange = observer.begin(
                    request.head.method, loop: sink.loopIndex, route: observer.metrics.unmatchedSlot)
                return .respond(observer.finish(exchange, error.response))
            case .position(let position):
                minimumPosition = position
            }
        }
        var exchange = observer.begin(request.head.method, loop: sink.loopIndex, route: observer.metrics.unmatchedSlot)
        let outcome = route(request, exchange: &exchange)
        if case .response(let response) = outcome { return .respond(observer.finish(exchange, response)) }
        if let refusal = refusalWhileLogFailed(request.head.method) {
            return .respond(observer.finish(exchange, refusal))
        }
        if let cluster, let minimumPosition,
            !ClusterPositionWait.reached(minimumPosition, of: exchange.index, cluster: cluster)
        {
            Task { await self.respondOnceApplied(outcome, exchange, sink: sink, position: minimumPosition, cluster) }
            return .deferred(nil)
        }
        // Consumed: the work is moved to the loop, not copied (issue 25).
        switch consume outcome {
        case .response(let response):
            return .respond(observer.finish(exchange, response))
        case .engine(let work, let answer):
            precondition(sink.loopIndex < loopRequests.count, "loop \(sink.loopIndex) has no engine loop")
            let requests = loopRequests[sink.loopIndex]
            let observed = requests.observedSink(inner: sink, observer: observer, exchange: exchange)
            requests.submit(work, answer: answer, sink: observed, wake: false)
            return .deferred(Self.tenant(exchange.app))
        case .detached(let start):
            start(ObservedSink(inner: sink, observer: observer, exchange: exchange))
            return .deferred(Self.tenant(exchange.app))
        }
    }

    /// A routed read with `Roost-Min-Position` this node has not applied yet
    /// (spec §13.3): waits up to `ClusterPositionWait.timeout`, then answers
    /// it as any read (its engine work through the registry's async path,
    /// from this task), or 503 `position_not_reached`.
    private func respondOnceApplied(
        _ outcome: RouteOutcome, _ exchange: Exchange, sink: any HTTPReplySink, position: UInt64,
        _ cluster: any ClusterControl
    ) async {
        guard await ClusterPositionWait.wait(until: position, of: exchange.index, cluster: cluster) else {
            sink.send(observer.finish(exchange, ClusterPositionWait.notReached.response))
            return
        }
        let observed = ObservedSink(inner: sink, observer: observer, exchange: exchange)
        switch outcome {
        case .response(let response):
            sink.send(observer.finish(exchange, response))
        case .engine(let work, let answer):
            CallerReply(registry: registry, sink: observed).submit(work, answer: answer)
        case .detached(let start):
            start(observed)
        }
    }

    /// Apps are the tenants the HTTP loops share their work between
    /// (decision 0063): one app's flood is held to its share of a busy loop.
    private static func tenant(_ app: AppID?) -> HTTPTenant? {
        app.map { HTTPTenant(UInt64($0.rawValue)) }
    }

    /// 503 for a write once the log has failed, before anything is applied in
    /// memory; reads (GET, HEAD) are still served.
    private func refusalWhileLogFailed(_ method: HTTPMethod) -> HTTPResponse? {
        guard !registry.acceptsWrites, method != .get, method != .head else { return nil }
        return APIError.logUnavailable.response
    }

    /// Renders, within the round's budget, the engine answers loop `loop`
    /// left for this round (`LoopRequests.renderingPerRoundMax`).
    public func willFinishRound(loop: Int, startedAt start: LoopInstant, clock: LoopClock) {
        // A server on loops of its own (tests) has more loops than the engine:
        // those never hand it work.
        guard loop < loopRequests.count else { return }
        loopRequests[loop].beginRound(at: start, clock: clock)
    }

    public func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        // Counted in the shared lane: the HTTP layer does not say which loop asks.
        let exchange = observer.begin(.other("-"), loop: -1, route: observer.metrics.refusedSlot)
        return observer.finish(exchange, APIError.from(failure).response)
    }

    /// Routes one request at the exchange's time (every thrown error becomes
    /// its envelope); notes its route slot and the app its key belongs to in
    /// `exchange`.
    private func route(_ request: HTTPRequest, exchange: inout Exchange) -> RouteOutcome {
        _ = RequestAttribution.take()
        _ = IdempotencyKeyNote.take()
        defer {
            let attributed = RequestAttribution.take()
            exchange.app = attributed?.app
            exchange.mode = attributed?.mode
        }
        do throws(APIError) {
            let (route, parameters) = try router.match(method: request.head.method, path: request.head.path)
            exchange.route = route.index
            if let clusterLog, clusterLog.role != .leader, request.head.method.changesState,
                !ClusterReadGate.isExempt(request.head.path)
            {
                // Spec §13.4: nothing is applied, forwarded or redirected (the
                // cluster's own routes answer for themselves: step-down is 409 here).
                throw APIError.notLeader(leaderURL: clusterLog.leaderURL)
            }
            if let cluster, !request.head.method.changesState, !ClusterReadGate.isExempt(request.head.path) {
                try ClusterReadGate.check(request.head, cluster: cluster)
            }
            let now = exchange.wallMilliseconds
            let digests = loopRequests.indices.contains(exchange.lane) ? loopRequests[exchange.lane].keyDigests : nil
            let caller = try authenticator.authorize(
                route.access, request.head, nowSeconds: now / 1000, digests: digests)
            let idempotencyKey = Idempotency.applies(to: route) ? try Idempotency.key(request.head) : nil
            // The caller moves into the context and is read from there after
            // (a copy retained each string of its key record).
            let context = RequestContext(
                request: request, parameters: parameters, nowMilliseconds: now, caller: consume caller)
            let outcome: RouteOutcome
            do throws(APIError) {
                outcome = try route.handler(context)
            } catch {
                // With a key, a refusal of the route's own checks still meets the key's first use (422).
                guard idempotencyKey != nil else { throw error }
                outcome = .response(error.response)
            }
            // The handler only decoded: nothing is applied before the work is wrapped.
            guard let idempotencyKey, let owner = Idempotency.owner(context.caller) else { return outcome }
            let tag = IdempotencyTag(
                owner: owner, key: idempotencyKey, digest: Idempotency.digest(request),
                at: Timestamp(millisecondsSinceEpoch: now))
            return Idempotency.wrap(
                outcome, tag: tag, caller: context.caller,
                gate: IdempotencyGate(inFlight: idempotencyInFlight, catalog: catalog, registry: registry))
        } catch {
            return .response(error.response)
        }
    }

    /// Answers one request and waits for a deferred answer (tests and tools;
    /// never on an event loop).
    /// Counted and stamped as a served request is, in the shared lane.
    package func handle(_ request: HTTPRequest) async -> HTTPResponse {
        var exchange = observer.begin(request.head.method, loop: -1, route: observer.metrics.unmatchedSlot)
        let outcome = route(request, exchange: &exchange)
        let observer = observer
        switch outcome {
        case .response(let response):
            return observer.finish(exchange, response)
        case .engine(let work, let answer):
            if let refusal = refusalWhileLogFailed(request.head.method) { return observer.finish(exchange, refusal) }
            return await withCheckedContinuation { continuation in
                let sink = ObservedSink(
                    inner: ContinuationSink(continuation: continuation), observer: observer, exchange: exchange)
                CallerReply(registry: registry, sink: sink).submit(work, answer: answer)
            }
        case .detached(let start):
            if let refusal = refusalWhileLogFailed(request.head.method) { return observer.finish(exchange, refusal) }
            return await withCheckedContinuation { continuation in
                start(
                    ObservedSink(
                        inner: ContinuationSink(continuation: continuation), observer: observer, exchange: exchange))
            }
        }
    }

    private static let healthBody = Array(#"{"status":"ok"}"#.utf8)

    private static func health(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: healthBody)
    }
}

/// A sink that resumes an async caller with the answer (tests and tools).
struct ContinuationSink: HTTPReplySink {
    let continuation: CheckedContinuation<HTTPResponse, Never>

    func send(_ response: consuming HTTPResponse) {
        continuation.resume(returning: response)
    }
}

/// The requests of one engine loop that wait for outcomes: confined to that
/// loop's thread. Each request's work goes to the loop's `ShardLoop` as
/// values with a ticket; the outcomes come back on this thread and the
/// request's `EngineAnswer` renders them here, in the order the requests
/// became complete, for at most `renderingPerRoundMax` of each loop round
/// (the rest in the next rounds: `RenderQueue`).
final class LoopRequests: OutcomeReceiver, @unchecked Sendable {
    // @unchecked: every member is touched on the loop's thread only (asserted).

    /// Parts (work items) one request may have: the ticket keeps the part in
    /// its low bits.
    static let partsPerRequestMax = 16
    /// How long one loop round renders engine answers, counted from the
    /// round's start; at least one answer per round, so a round may run over
    /// by one answer (a 1,000-device page of large devices: ~28 ms end to
    /// end in a release build). The rest wait, in order, for the next round,
    /// and the loop wakes itself for it: accepts, reads and answers that
    /// need no engine (`/healthz`) come in between. A page of 200 devices of
    /// ~3.8 KB (0.86 MB) takes 4–6 ms end to end (release, quiet machine),
    /// so under the burst of docs/http.md a round renders one or two.
    static let renderingPerRoundMax: Duration = .milliseconds(5)

    /// A request's parts' outcomes as they come in: the first part's
    /// inline, the others' in an array that a request of one part (nearly
    /// all of them) never allocates.
    private struct Parts {
        var first: Outcome?
        var rest: [Outcome?]

        init(count: Int) {
            first = nil
            rest = count > 1 ? Array(repeating: nil, count: count - 1) : []
        }

        subscript(part: Int) -> Outcome? {
            get { part == 0 ? first : rest[part - 1] }
            set {
                if part == 0 { first = newValue } else { rest[part - 1] = newValue }
            }
        }

        var isComplete: Bool { first != nil && rest.allSatisfy { $0 != nil } }

        /// The outcomes in part order moved into `outcomes` (emptied first);
        /// the parts are left empty.
        mutating func move(into outcomes: inout [Outcome]) {
            outcomes.removeAll(keepingCapacity: true)
            if let first = first.take() { outcomes.append(first) }
            rest.moveEach { outcome in if let outcome { outcomes.append(outcome) } }
        }
    }

    /// A request waiting for its parts' outcomes, and then, complete, for
    /// its render (the same value moves on: a second type copied each
    /// reference of it; issue 25).
    private struct Waiting {
        var answer: EngineAnswer
        var sink: ObservedSink
        var parts: Parts
        var missing: Int
        /// The log could not take a write among them.
        var failed = false
    }

    /// Requests waiting for outcomes, in slots reused through `freeSlots`
    /// (no hashing, no allocation per request once warm). The ticket holds
    /// the slot and the part. One value, so that recording an outcome
    /// accesses the class's state once (a dynamic exclusivity check an
    /// access: seven an outcome when the slots were read and written one
    /// property at a time; issue 25).
    private struct WaitingRequests {
        private var slots: [Waiting?] = []
        private var freeSlots: [Int] = []

        /// Puts `entry` in a free slot; returns the slot.
        mutating func add(_ entry: consuming Waiting) -> Int {
            if let free = freeSlots.popLast() {
                slots[free] = entry
                return free
            }
            slots.append(entry)
            return slots.count - 1
        }

        /// Records the outcome of the part `ticket` names; returns its
        /// request, out of its slot, when that was the last part missing.
        mutating func record(_ outcome: consuming Acknowledged, ticket: UInt64) -> Waiting? {
            let slot = Int(ticket >> 4)
            let part = Int(ticket & 15)
            precondition(slot < slots.count && slots[slot] != nil, "outcome for an empty request slot \(slot)")
            if let outcome { slots[slot]!.parts[part] = outcome } else { slots[slot]!.failed = true }
            slots[slot]!.missing -= 1
            let missing = slots[slot]!.missing
            guard missing == 0, let entry = slots[slot].take() else { return nil }
            freeSlots.append(slot)
            precondition(entry.failed || entry.parts.isComplete, "request \(slot) incomplete")
            return entry
        }
    }

    let loop: ShardLoop
    private var waiting = WaitingRequests()
    /// Requests whose outcomes are all in, waiting to be rendered.
    private var complete = RenderQueue<Waiting>(budget: LoopRequests.renderingPerRoundMax)
    /// The outcomes of the request being rendered, kept from request to request.
    private var rendering: [Outcome] = []
    /// Sinks of rendered requests that nothing else held, for the next
    /// requests (`observedSink`): one allocation less per request once the
    /// loop is warm (issue 25). At most `spareSinksMax`.
    private var spareSinks: [ObservedSink] = []
    static let spareSinksMax = 256
    /// The loop was asked for another round for what `complete` still holds.
    private var wakeAsked = false
    /// The clock of the server whose loop runs this (`beginRound`): the
    /// round's budget is spent by the clock that started it.
    private var clock = LoopClock(SystemMonotonicClock())

    /// The digests of keys that authenticated on this loop (`Authenticator.authenticate`).
    let keyDigests: PresentedKeyDigests

    init(loop: ShardLoop) {
        keyDigests = PresentedKeyDigests(executor: loop.executor)
        self.loop = loop
    }

    /// A round of the loop began at `start` (its HTTP server's loop says so,
    /// `HTTPResponder.willFinishRound`): renders what earlier rounds left, as
    /// far as this round's budget goes.
    func beginRound(at start: LoopInstant, clock: LoopClock) {
        loop.executor.preconditionOnLoop("LoopRequests.beginRound")
        self.clock = clock
        complete.beginRound(at: start)
        wakeAsked = false
        renderComplete()
    }

    /// A sink for a request read by this loop: a spare one when there is
    /// one (`renderComplete` keeps them), else a new one.
    func observedSink(inner: any HTTPReplySink, observer: RequestObserver, exchange: Exchange) -> ObservedSink {
        loop.executor.preconditionOnLoop("LoopRequests.observedSink")
        guard let spare = spareSinks.popLast() else {
            return ObservedSink(inner: inner, observer: observer, exchange: exchange)
        }
        precondition(spare.observer === observer, "a spare sink of another observer")
        spare.reuse(inner: inner, exchange: exchange)
        return spare
    }

    /// Keeps `sink` for another request when nothing else holds it: the
    /// answer is sent and no stream or further work refers to it.
    private func keepIfUnheld(_ sink: inout ObservedSink) {
        guard spareSinks.count < Self.spareSinksMax, isKnownUniquelyReferenced(&sink) else { return }
        spareSinks.append(sink)
    }

    /// Queues a request's work for the end of this round. `wake` asks for a
    /// round when the caller runs outside the loop's dispatch (a stream's
    /// callback): the loop would otherwise sleep with the work queued.
    func submit(_ work: consuming EngineWork, answer: EngineAnswer, sink: ObservedSink, wake: Bool) {
        loop.executor.preconditionOnLoop("LoopRequests.submit")
        let parts = work.count
        precondition(parts >= 1 && parts <= Self.partsPerRequestMax, "\(parts) parts in one request")
        precondition(work.holdsOnlyValues, "a route sent Command.custom; routes send value commands")
        let slot = waiting.add(Waiting(answer: answer, sink: sink, parts: Parts(count: parts), missing: parts))
        work.forEachItem { part, item in loop.submit(item, ticket: UInt64(slot) << 4 | UInt64(part)) }
        if wake { loop.executor.wake() }
    }

    func receive(_ outcomes: inout [(ticket: UInt64, outcome: Acknowledged)]) {
        loop.executor.preconditionOnLoop("LoopRequests.receive")
        // Moved into their requests: a copy retained each outcome, and the
        // loop's list released it again.
        outcomes.moveEach { delivered in
            if let done = waiting.record(delivered.outcome, ticket: delivered.ticket) { complete.append(done) }
        }
        renderComplete()
    }

    /// Renders complete requests, oldest first, while the round's budget
    /// lasts; asks the loop for another round when some are left.
    private func renderComplete() {
        // The outcomes' array held in a local for the whole pass and given
        // back after: two checked accesses to the property a pass, not two a
        // request (each ~85 instructions with its exclusivity check; issue 25).
        var outcomes: [Outcome] = []
        swap(&outcomes, &rendering)
        defer {
            outcomes.removeAll(keepingCapacity: true)
            swap(&outcomes, &rendering)
        }
        while !complete.isEmpty, var entry = complete.next(now: clock.now) {
            if entry.failed {
                entry.answer.finish(nil, LoopReply(requests: self, observed: entry.sink))
            } else {
                entry.parts.move(into: &outcomes)
                entry.answer.finish(outcomes, LoopReply(requests: self, observed: entry.sink))
            }
            keepIfUnheld(&entry.sink)
        }
        if !complete.isEmpty && !wakeAsked {
            wakeAsked = true
            loop.executor.wake()
        }
    }
}

/// The reply handle of a request on an engine loop: two references, so it
/// travels as an `any EngineReply` without a box (issue 25).
struct LoopReply: EngineReply {
    let requests: LoopRequests
    let observed: ObservedSink

    var sink: any HTTPReplySink { observed }

    func submit(_ work: EngineWork, answer: EngineAnswer) {
        requests.submit(work, answer: answer, sink: observed, wake: true)
    }
}

/// The reply handle of a request answered outside a server (tests, tools):
/// its work runs through the registry's async path.
struct CallerReply: EngineReply {
    let registry: Registry
    let sink: any HTTPReplySink

    func submit(_ work: EngineWork, answer: EngineAnswer) {
        precondition(work.allSatisfy(\.isValue), "a route sent Command.custom; routes send value commands")
        let registry = registry
        let reply = self
        let batch = Array(work)
        Task {
            let outcomes = await registry.shardSet.perform(batch: batch)
            let acknowledged = outcomes.compactMap { $0 }
            answer.finish(acknowledged.count == outcomes.count ? acknowledged : nil, reply)
        }
    }
}

extension ShardWork {
    /// False for a `Command.custom` (a closure: tools and tests only, through
    /// `Registry.perform`). Every route's work is a value; the request path
    /// asserts it where work leaves a route (`LoopRequests`, `CallerReply`).
    var isValue: Bool {
        switch self {
        case .index(_, _, let command): !command.isCustom
        case .removeApp, .awaitLog, .replicate: true
        }
    }
}
