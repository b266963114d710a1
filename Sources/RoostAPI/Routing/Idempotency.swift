import Glibc
import RoostCrypto
import RoostEngine
import RoostHTTP
import RoostModel
import Synchronization

/// `Idempotency-Key` (spec §7) on the service's side: which routes take it,
/// the header's checks, whose answer it is, the requests still in flight,
/// and how a route's engine work is wrapped so that the shard replays or
/// remembers its answer (`Command.idempotent`, `RememberedAnswers`).
/// docs/decisions/0050-batches-and-idempotency.md.
enum Idempotency {
    static let headerName = "Idempotency-Key"
    static let replayedHeader = (name: "Idempotent-Replayed", value: "true")

    /// Whether a route takes the header: a write (POST, PUT, PATCH, DELETE)
    /// of an app-scoped, compatibility or batch route (spec §4, §6, §7), i.e.
    /// one an app key, an identity token or Native Notify's app token calls.
    /// Elsewhere (apps and keys, the operator's routes) the header is ignored.
    static func applies(to route: Route) -> Bool {
        switch route.method {
        case .post, .put, .patch, .delete: break
        default: return false
        }
        switch route.access {
        case .open, .operatorKey, .setup, .liveSetup: return false
        case .secretKey, .liveSecretKey, .deviceRegistrar, .mobileKey, .identityToken, .nativeNotifyAppToken:
            return true
        }
    }

    /// Returns the request's key, nil without the header, or 400
    /// `invalid_idempotency_key` for a value that is not 1 to 200 visible
    /// ASCII characters, or for the header sent twice.
    static func key(_ head: HTTPRequestHead) throws(APIError) -> IdempotencyKey? {
        let values = head.headers.values(headerName)
        guard let first = values.first else { return nil }
        guard values.count == 1, let key = IdempotencyKey(first[...]) else {
            throw APIError(
                status: 400, code: "invalid_idempotency_key",
                message:
                    "Idempotency-Key must be sent once, with 1 to \(IdempotencyLimits.keyCharactersMax) visible ASCII characters",
                field: headerName)
        }
        return key
    }

    /// Returns whose answers a caller's keys name: its API key's id; for an
    /// identity token, its minting key's id and SHA-256 of its principal
    /// (two users of one mobile key never share answers, and the owner name
    /// stores no external id: decision 0079); for Native Notify, the key its
    /// `appToken` named (noted by the route). Nil for the operator.
    static func owner(_ caller: Caller) -> IdempotencyOwner? {
        switch caller {
        case .appKey(let key): IdempotencyOwner(key.id)
        case .identity(let claims, _):
            IdempotencyOwner(
                claims.mintingKeyID + " p" + Hex.encode(Crypto.sha256(Array(claims.principal.rendered.utf8))))
        case .unchecked: IdempotencyKeyNote.take().map { IdempotencyOwner($0) }
        case .operatorKey: nil
        }
    }

    /// SHA-256 of the method, the request target (path and query) and the body.
    static func digest(_ request: HTTPRequest) -> RequestDigest {
        var bytes = Array(request.head.method.name.utf8)
        bytes.append(0x0A)
        bytes += Array(request.head.target.utf8)
        bytes.append(0x0A)
        bytes += request.body
        return RequestDigest(Crypto.sha256(bytes))
    }

    static let keyReused = APIError(
        status: 422, code: "idempotency_key_reused",
        message: "this Idempotency-Key was first used with another method, path or body", field: headerName)
    static let keyInUse = APIError(
        status: 409, code: "idempotency_key_in_use",
        message: "a request with this Idempotency-Key is still in flight; retry once it is answered",
        field: headerName)
    static let tooManyInFlight = APIError.unavailable(
        "too many requests with an Idempotency-Key are in flight; retry later")

    /// Wraps a route's outcome for a request with `tag` (held in `inFlight`
    /// until answered):
    /// - a single command on one index becomes `Command.idempotent`: replayed,
    ///   refused or run and remembered in the shard's turn, in the same
    ///   append as its mutations;
    /// - a 2xx answer the route made at once (an identity token minted: no
    ///   state changed) is remembered as `Command.answer`, or the remembered
    ///   one is sent instead;
    /// - a detached CSV import first looks its key up; it runs only when
    ///   nothing is remembered, and its 2xx summary is remembered afterwards
    ///   (not in its rows' appends: decision 0050);
    /// - an answer of the route's own checks (a 4xx) is not remembered: it
    ///   is sent as it is, unless the key was first used for another
    ///   request (422);
    /// - other work (none of these routes sends any) is not remembered.
    static func wrap(
        _ outcome: RouteOutcome, tag: IdempotencyTag, caller: Caller, gate: IdempotencyGate
    ) -> RouteOutcome {
        switch outcome {
        case .engine(let work, let answer):
            guard work.count == 1, case .index(let key, let settings, let command) = work[0] else { return outcome }
            return gate.entering(tag) {
                let wrapped = EngineAnswer { outcomes, reply in
                    gate.inFlight.leave(tag.name)
                    switch outcomes?.first {
                    case .replayed(.rejected(.personErased))?:
                        // Redacted by an erasure (decision 0079): the same answer on every route.
                        reply.sink.send(replayedAnswer(.rejected(.personErased)))
                    case .replayed(let first)?:
                        answer.finish([first], ReplayedReply(inner: reply, sink: ReplayedSink(inner: reply.sink)))
                    case .idempotencyKeyReused?:
                        reply.sink.send(keyReused.response)
                    default:
                        answer.finish(outcomes, reply)
                    }
                }
                return .engine([.index(key, settings: settings, .idempotent(tag, command))], answer: wrapped)
            }
        case .response(let response):
            guard let (key, settings) = gate.index(of: caller) else { return outcome }
            guard (200..<300).contains(response.status) else {
                // Not remembered; but a key first used for another request is still 422.
                return gate.entering(tag) {
                    let answer = EngineAnswer { outcomes, reply in
                        gate.inFlight.leave(tag.name)
                        switch outcomes?.first {
                        case .idempotencyKeyReused?: reply.sink.send(keyReused.response)
                        default: reply.sink.send(response)
                        }
                    }
                    return .engine([.index(key, settings: settings, .lookUpAnswer(tag))], answer: answer)
                }
            }
            return gate.entering(tag) {
                let remember = Command.idempotent(tag, .answer(status: response.status, body: response.body))
                let answer = EngineAnswer { outcomes, reply in
                    gate.inFlight.leave(tag.name)
                    switch outcomes?.first {
                    case .replayed(let first)?: reply.sink.send(replayedAnswer(first))
                    case .idempotencyKeyReused?: reply.sink.send(keyReused.response)
                    case .answered?: reply.sink.send(response)
                    case nil: reply.sink.send(APIError.logUnavailable.response)
                    case let other?: preconditionFailure("a remembered answer answered \(other)")
                    }
                }
                return .engine([.index(key, settings: settings, remember)], answer: answer)
            }
        case .detached(let start):
            guard let (key, settings) = gate.index(of: caller) else { return outcome }
            return gate.entering(tag) {
                let answer = EngineAnswer { outcomes, reply in
                    if case .notRemembered? = outcomes?.first {
                        start(RememberingSink(inner: reply.sink, tag: tag, index: key, settings: settings, gate: gate))
                        return
                    }
                    // Out of flight before the answer leaves: a client that sends the key
                    // again as soon as it has the answer must meet the remembered one, not 409.
                    gate.inFlight.leave(tag.name)
                    switch outcomes?.first {
                    case .notRemembered?: preconditionFailure("handled above")
                    case .replayed(let first)?: reply.sink.send(replayedAnswer(first))
                    case .idempotencyKeyReused?: reply.sink.send(keyReused.response)
                    case nil: reply.sink.send(APIError.logUnavailable.response)
                    case let other?: preconditionFailure("an answer look-up answered \(other)")
                    }
                }
                return .engine([.index(key, settings: settings, .lookUpAnswer(tag))], answer: answer)
            }
        }
    }

    /// The response of a remembered `Command.answer`, or of an answer an
    /// erasure redacted (410 `person_erased`, decision 0079), marked replayed.
    static func replayedAnswer(_ outcome: Outcome) -> HTTPResponse {
        switch outcome {
        case .answered(let status, let body):
            return HTTPResponse(
                status: status, headers: [("Content-Type", "application/json"), replayedHeader], body: body)
        case .rejected(.personErased):
            var response = APIError(RegistryRejection.personErased).response
            response.headers.append(replayedHeader)
            return response
        default:
            preconditionFailure("a route's own answer was remembered as \(outcome)")
        }
    }
}

/// What `Idempotency.wrap` needs of the service: the in-flight table, the
/// catalog (an app's settings) and the registry (an import's remembered
/// summary is sent from the import's task).
struct IdempotencyGate: Sendable {
    let inFlight: IdempotencyInFlight
    let catalog: Catalog
    let registry: Registry

    /// Returns `make()` with the tag's name held in flight, or the 409 (or
    /// 503 at `IdempotencyInFlight.requestsMax`) without calling it.
    func entering(_ tag: IdempotencyTag, _ make: () -> RouteOutcome) -> RouteOutcome {
        switch inFlight.enter(tag.name) {
        case .entered: make()
        case .busy: .response(Idempotency.keyInUse.response)
        case .full: .response(Idempotency.tooManyInFlight.response)
        }
    }

    /// The index a caller's key acts on and its app's settings; nil for the
    /// operator, a route that checks its own credential, or a deleted app.
    func index(of caller: Caller) -> (IndexKey, AppSettings)? {
        let app: AppID
        let mode: AppMode
        switch caller {
        case .appKey(let key): (app, mode) = (key.appID, key.mode)
        case .identity(let claims, _): (app, mode) = (claims.app, claims.mode)
        case .unchecked, .operatorKey: return nil
        }
        guard let record = catalog.app(app) else { return nil }
        return (IndexKey(app: app, mode: mode), record.settings)
    }
}

/// The sink of an import run with an `Idempotency-Key`: its 2xx summary is
/// remembered (`Command.idempotent` of `Command.answer`, through the
/// registry: the import answers from its own task) before it is sent.
private struct RememberingSink: HTTPReplySink {
    let inner: any HTTPReplySink
    let tag: IdempotencyTag
    let index: IndexKey
    let settings: AppSettings
    let gate: IdempotencyGate

    func send(_ response: consuming HTTPResponse) {
        guard (200..<300).contains(response.status) else {
            gate.inFlight.leave(tag.name)
            inner.send(response)
            return
        }
        let work = ShardWork.index(
            index, settings: settings, .idempotent(tag, .answer(status: response.status, body: response.body)))
        let (registry, inner, gate, tag, response) = (gate.registry, inner, gate, tag, copy response)
        Task {
            let outcomes = await registry.shardSet.perform(batch: [work])
            gate.inFlight.leave(tag.name)
            inner.send(outcomes.first.flatMap { $0 } == nil ? APIError.logUnavailable.response : response)
        }
    }

    var loopIndex: Int { inner.loopIndex }
}

/// The requests with an `Idempotency-Key` between routing and their answer,
/// by (owner, key), for every loop (a mutex: ~6 ns uncontended). A second
/// request with the same key meanwhile is 409 `idempotency_key_in_use`.
final class IdempotencyInFlight: Sendable {
    /// Requests with a key in flight at once; above it 503 `unavailable`
    /// with Retry-After (bounded by connections × pipelining in practice).
    static let requestsMax = 65_536

    enum Entry { case entered, busy, full }

    private let names = Mutex(Set<RememberedAnswers.Name>())

    func enter(_ name: RememberedAnswers.Name) -> Entry {
        names.withLock { names in
            guard !names.contains(name) else { return .busy }
            guard names.count < Self.requestsMax else { return .full }
            names.insert(name)
            return .entered
        }
    }

    func leave(_ name: RememberedAnswers.Name) {
        let removed = names.withLock { $0.remove(name) }
        precondition(removed != nil, "an idempotency key left that never entered")
    }

    var count: Int { names.withLock { $0.count } }
}

/// The key id a route that checks its own credential (Native Notify's
/// `appToken`) admitted, noted for `Idempotency.owner` on the routing
/// thread, as `RequestAttribution` notes the app. Boxed: a key id is a String.
enum IdempotencyKeyNote {
    private final class Box {
        let id: String
        init(_ id: String) { self.id = id }
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let result = pthread_key_create(&key, nil)
        precondition(result == 0, "pthread_key_create failed with \(result)")
        return key
    }()

    /// Notes the admitted key's id (replacing an earlier note).
    static func note(_ id: String) {
        _ = take()
        pthread_setspecific(key, Unmanaged.passRetained(Box(id)).toOpaque())
    }

    /// Returns the id noted since the last call, and forgets it.
    static func take() -> String? {
        guard let value = pthread_getspecific(key) else { return nil }
        pthread_setspecific(key, nil)
        return Unmanaged<Box>.fromOpaque(value).takeRetainedValue().id
    }
}

/// A replayed answer's reply: the same route renders it, through a sink that
/// marks it `Idempotent-Replayed: true`.
private struct ReplayedReply: EngineReply {
    let inner: any EngineReply
    let sink: any HTTPReplySink

    func submit(_ work: EngineWork, answer: EngineAnswer) {
        inner.submit(work, answer: answer)
    }
}

private struct ReplayedSink: HTTPReplySink {
    let inner: any HTTPReplySink

    func send(_ response: consuming HTTPResponse) {
        var marked = response
        marked.headers.append(Idempotency.replayedHeader)
        inner.send(marked)
    }

    var loopIndex: Int { inner.loopIndex }

    func startStream(status: Int, headers: [(name: String, value: String)]) -> any HTTPBodyStream {
        inner.startStream(status: status, headers: headers + [Idempotency.replayedHeader])
    }
}
