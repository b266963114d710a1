import Glibc
import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostStorage
import RoostTelemetry
import RoostTesting
import Testing

@testable import RoostAPI

/// A harness whose service logs to memory, with the access log on.
func observedHarness(accessLog: Bool = true) -> (Harness, Logger) {
    let log = VolatileLog()
    let clock = ManualWallClock()
    let catalog = Catalog(state: CatalogState(), log: log, clock: clock)
    let logger = Logger(output: .memory)
    let service = RoostService(
        catalog: catalog, adminKey: Harness.adminKey, clock: clock, registry: Registry(shardCount: 2, log: log),
        logger: logger, accessLog: accessLog)
    return (Harness(service: service, clock: clock, catalog: catalog), logger)
}

/// A scrape as text, with lookups of one sample's value.
struct Scrape {
    let text: String

    init(_ harness: Harness) async throws {
        let answer = await harness.call(.get, "/metrics", key: Harness.adminKey)
        guard answer.status == 200 else { throw HarnessError(message: "/metrics answered \(answer.status)") }
        text = String(decoding: answer.body, as: UTF8.self)
    }

    /// The value of the sample written exactly as `series` (name and labels), or nil.
    func value(_ series: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.utf8.count + 1))
        }
        return nil
    }
}

@Suite("Metrics and request ids (in process)")
struct ObservabilityTests {
    @Test("every answer carries an X-Request-Id, distinct per request: routed, unmatched, refused by auth or by HTTP")
    func requestIDOnEveryAnswer() async throws {
        let (harness, _) = observedHarness()
        var seen: Set<String> = []
        for (method, target, key) in [
            (HTTPMethod.get, "/healthz", nil), (.get, "/no/such/route", nil), (.get, "/v1/apps", "wrong-key"),
            (.post, "/v1/apps", Harness.adminKey), (.get, "/metrics", Harness.adminKey),
            (.delete, "/healthz", nil),
        ] as [(HTTPMethod, String, String?)] {
            let answer = await harness.call(method, target, key: key, body: method == .post ? #"{"name":"A"}"# : nil)
            let id = try #require(answer.header("X-Request-Id"), "\(method.name) \(target) answered without an id")
            #expect(id.utf8.count == 15)
            #expect(id.utf8.allSatisfy { (48...57).contains($0) || (97...118).contains($0) }, "\(id)")
            #expect(seen.insert(id).inserted, "request id \(id) given twice")
        }
        let refused = harness.service.response(for: .badRequest(reason: "test"))
        #expect(refused.status == 400)
        let refusedID = try #require(refused.headers.first { $0.name == "X-Request-Id" }?.value)
        #expect(seen.insert(refusedID).inserted)
    }

    @Test("GET /metrics is for the operator key only: 401 without or with a wrong key, 403 for an app's key")
    func metricsNeedsTheOperatorKey() async throws {
        let (harness, _) = observedHarness()
        let app = try await harness.createApp()
        let setup = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        #expect(await harness.call(.get, "/metrics").status == 401)
        #expect(await harness.call(.get, "/metrics", key: "not-a-key").status == 401)
        #expect(await harness.call(.get, "/metrics", key: setup.key).status == 403)
        let answer = await harness.call(.get, "/metrics", key: Harness.adminKey)
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
    }

    @Test("requests are counted by route pattern and status, never by raw path; latency per route")
    func requestsByRoutePattern() async throws {
        let (harness, _) = observedHarness()
        let device = try await DeviceApp.make(harness)
        let id = try await device.registerID(1)
        #expect(await device.device(id).status == 200)
        #expect(await device.device("dev_nosuchdevice").status == 404)
        #expect(await harness.call(.get, "/v1/devices/\(id)/no/such").status == 404)
        let scrape = try await Scrape(harness)
        #expect(scrape.value(#"roost_http_requests_total{method="POST",route="/v1/devices",code="201"}"#) == 1)
        #expect(scrape.value(#"roost_http_requests_total{method="GET",route="/v1/devices/{id}",code="200"}"#) == 1)
        #expect(scrape.value(#"roost_http_requests_total{method="GET",route="/v1/devices/{id}",code="404"}"#) == 1)
        #expect(scrape.value(#"roost_http_requests_total{method="any",route="unmatched",code="404"}"#) == 1)
        #expect(!scrape.text.contains(id), "a device id (a raw path) reached the metrics")
        #expect(
            scrape.value(#"roost_http_request_duration_seconds_count{method="GET",route="/v1/devices/{id}"}"#) == 2)
        #expect(
            scrape.value(
                #"roost_http_request_duration_seconds_bucket{method="GET",route="/v1/devices/{id}",le="+Inf"}"#) == 2)
        // A second scrape sees the first one counted.
        let again = try await Scrape(harness)
        #expect(again.value(#"roost_http_requests_total{method="GET",route="/metrics",code="200"}"#) == 1)
    }

    @Test("devices and people are gauges per app and mode")
    func devicesAndPeoplePerAppAndMode() async throws {
        let (harness, _) = observedHarness()
        let device = try await DeviceApp.make(harness)
        _ = try await device.registerID(1, #""external_id":"user_1""#)
        _ = try await device.registerID(2, #""external_id":"user_1""#)
        _ = try await device.registerID(3, key: device.testSecret)
        let scrape = try await Scrape(harness)
        let app = device.app
        #expect(scrape.value(#"roost_devices{app="\#(app)",mode="live"}"#) == 2)
        #expect(scrape.value(#"roost_people{app="\#(app)",mode="live"}"#) == 1)
        #expect(scrape.value(#"roost_devices{app="\#(app)",mode="test"}"#) == 1)
        #expect(scrape.value(#"roost_people{app="\#(app)",mode="test"}"#) == 0)
        #expect(scrape.value("roost_apps") == 1)
    }

    @Test("a request refused by its key's rate limit is counted for its app")
    func rateLimitHits() async throws {
        let (harness, _) = observedHarness()
        let app = try await harness.createApp()
        let limited = try await harness.createKey(
            app: app, #"{"kind":"secret","capabilities":["devices:read"],"rate_limit_per_second":1}"#)
        var limitedAnswers = 0
        for _ in 0..<3 where await harness.call(.get, "/v1/stats", key: limited.key).status == 429 {
            limitedAnswers += 1
        }
        #expect(limitedAnswers == 2)
        let scrape = try await Scrape(harness)
        #expect(scrape.value(#"roost_rate_limit_hits_total{app="\#(app)"}"#) == 2)
        #expect(scrape.value("roost_rate_limited_requests_total") == 2)
        #expect(scrape.value(#"roost_http_requests_total{method="GET",route="/v1/stats",code="429"}"#) == 2)
    }

    @Test("the access log: one line per answer with id, route pattern, status, duration and app; no secrets")
    func accessLogLines() async throws {
        let (harness, logger) = observedHarness()
        let device = try await DeviceApp.make(harness)
        let answer = await device.registerIOS(7, #""installation_secret":"s3cret-installation-value""#)
        #expect(answer.status == 201)
        let id = try #require(answer.header("X-Request-Id"))
        let line = try #require(logger.lines.first { $0.contains(id) })
        let json = try JSONReader.parse(Array(line.utf8))
        #expect(json["event"]?.stringValue == "http.request")
        #expect(json["request.id"]?.stringValue == id)
        #expect(json["http.method"]?.stringValue == "POST")
        #expect(json["http.route"]?.stringValue == "/v1/devices")
        #expect(json["http.status"]?.intValue == 201)
        #expect(json["app.id"]?.intValue == device.app)
        #expect(json["duration.ms"] != nil)
        let all = logger.lines.joined(separator: "\n")
        for secret in [device.secret, device.mobile, device.testSecret, Harness.adminKey, TestTokens.apns(7)] {
            #expect(!all.contains(secret), "a secret reached the access log")
        }
        #expect(!all.contains("s3cret-installation-value"))
        // Operator requests name no app; every answer has its line.
        let created = try #require(logger.lines.first { $0.contains(#""http.route":"/v1/apps""#) })
        #expect(!created.contains("app.id"))
        #expect(logger.lines.filter { $0.contains(#""event":"http.request""#) }.count == 5)
    }

    @Test("without --access-log no request line is written")
    func accessLogOff() async throws {
        let (harness, logger) = observedHarness(accessLog: false)
        #expect(await harness.call(.get, "/healthz").status == 200)
        #expect(logger.lines.isEmpty)
    }

    @Test("a failed fdatasync: roost_wal_failed is 1, the 503 is counted, and the fault is one JSON error line")
    func logFault() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let logger = Logger(output: .memory)
        var options = Harness.storageOptions
        options.fileSystem = fileSystem
        options.logger = logger
        let directory = "/virtual/roost-metrics-fault"
        let (engine, _) = try DurableEngine.open(
            directory: directory, policy: .always, shardCount: 1, options: options)
        defer { engine.close() }
        let clock = ManualWallClock()
        let service = try RoostService(
            dataDirectory: directory, adminKey: Harness.adminKey, engine: engine, clock: clock, logger: logger)
        let harness = Harness(service: service, clock: clock, catalog: service.catalog)
        _ = try await harness.createApp()
        let healthy = try await Scrape(harness)
        #expect(healthy.value("roost_wal_failed") == 0)
        #expect(healthy.value("roost_wal_records_per_fsync_count") ?? 0 >= 1)
        fileSystem.inject(.init(operation: .syncData, nth: 1, errno: EIO, sticky: true))
        let refused = await harness.call(.post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"B"}"#)
        #expect(refused.status == 503)
        let failed = try await Scrape(harness)
        #expect(failed.value("roost_wal_failed") == 1)
        #expect(failed.value(#"roost_http_requests_total{method="POST",route="/v1/apps",code="503"}"#) == 1)
        let fault = try #require(logger.lines.first { $0.contains(#""event":"wal.error""#) })
        let json = try JSONReader.parse(Array(fault.utf8))
        #expect(json["level"]?.stringValue == "error")
        #expect(json["wal.errno"]?.intValue == Int(EIO))
        #expect(json["wal.state"]?.stringValue == "failed")
    }
}
