import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel

extension DeviceRoutes {
    /// `POST /v1/devices/import` (secret, `devices:write`, `Content-Type:
    /// text/csv`): registers one device per CSV row, as `POST /v1/devices` would.
    ///
    /// The handler checks the key and the content type on the event loop and
    /// hands the body to a task: it reads the header, then parses up to
    /// `DeviceImport.rowsPerJob` rows at a time and applies them in one shard
    /// job; the next batch is parsed only after that job's mutations are
    /// durable. So the shard turn stays short, the log takes bounded batches,
    /// and the event loop never parses. A row that is rejected changes nothing
    /// (rule 7) and the rows after it still apply. When the log fails part-way
    /// the answer is 503: the rows before were applied (importing the file
    /// again is safe: known tokens answer as `updated`).
    ///
    /// With `Content-Type: application/x-ndjson` (spec §11) the body is an
    /// export (`GET /v1/devices/export`): each line is restored as it was
    /// written, id and timestamps kept where free, else rejected
    /// (`ImportRow.restore`, decision 0053); the same batches, limits and answer.
    func importDevices(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let contentType = context.request.head.headers["Content-Type"]
        if DeviceImport.isMediaType(contentType, "application/x-ndjson") {
            let run = DeviceImport(registry: registry, scope: scope, columns: [], now: requestTime(context))
            let start = DeviceImport.Progress(reader: CSVReader([]), lines: NDJSONReader(context.request.body))
            return .detached { sink in
                Task { await run.run(start, sink: sink) }
            }
        }
        guard DeviceImport.isCSV(contentType) else {
            throw DeviceImport.unsupportedMediaType
        }
        var reader = CSVReader(context.request.body)
        let columns = try DeviceImport.header(&reader)
        let run = DeviceImport(registry: registry, scope: scope, columns: columns, now: requestTime(context))
        let start = DeviceImport.Progress(reader: reader)
        return .detached { sink in
            Task { await run.run(start, sink: sink) }
        }
    }
}

/// One CSV import in progress.
struct DeviceImport: Sendable {
    /// The largest CSV body (spec §2: 64 MiB).
    static let bodyBytesMax = 64 * 1024 * 1024
    /// Rows applied per shard job.
    static let rowsPerJob = 1_000
    /// Rejections listed in the answer; all of them are counted in `rejected_count`.
    static let rejectionsListedMax = 10_000

    static let unsupportedMediaType = APIError(
        status: 415, code: "unsupported_media_type",
        message: "the import body must be sent as Content-Type: text/csv or application/x-ndjson")

    /// How far an import got: the reader's position and the counts so far.
    struct Progress: Sendable {
        var reader: CSVReader
        /// The lines of an NDJSON import (nil: a CSV import reads `reader`).
        var lines: NDJSONReader?
        var created = 0
        var updated = 0
        var rejectedCount = 0
        var rejected: [(line: Int, code: String)] = []

        mutating func reject(line: Int, code: String) {
            rejectedCount += 1
            if rejected.count < DeviceImport.rejectionsListedMax { rejected.append((line, code)) }
        }

        /// Adds what one batch did.
        mutating func add(_ batch: ImportBatch) {
            created += batch.created
            updated += batch.updated
            for rejection in batch.rejected { reject(line: rejection.line, code: rejection.code) }
        }
    }

    let registry: Registry
    let scope: IndexScope
    /// The register-body member each column fills.
    let columns: [String]
    let now: Timestamp

    /// Returns whether a `Content-Type` value is `text/csv` (parameters such as
    /// `charset=utf-8` allowed; the body is read as UTF-8).
    static func isCSV(_ value: String?) -> Bool {
        isMediaType(value, "text/csv")
    }

    /// Returns whether a `Content-Type` value names `mediaType` (parameters allowed).
    static func isMediaType(_ value: String?, _ mediaType: String) -> Bool {
        guard let value else { return false }
        let named = value.split(separator: ";", maxSplits: 1).first.map { trimmed($0) } ?? ""
        return asciiCaseInsensitiveEqual(named, mediaType)
    }

    /// Reads the header row: every column must be a member of the register
    /// body, once, and `platform` and `token` must be there. 400 `invalid_csv`
    /// (with the column as `field` where one is at fault) otherwise.
    static func header(_ reader: inout CSVReader) throws(APIError) -> [String] {
        guard let record = reader.next() else { throw invalidCSV("the body holds no header row", field: nil) }
        guard let names = record.fields else { throw invalidCSV("the header row is not valid CSV", field: nil) }
        var columns: [String] = []
        for raw in names {
            let name = trimmed(raw)
            guard RegisterBody.memberNames.contains(name) else {
                throw invalidCSV("unknown column \"\(name.prefix(64))\"", field: String(name.prefix(64)))
            }
            guard !columns.contains(name) else { throw invalidCSV("column \(name) appears twice", field: name) }
            columns.append(name)
        }
        for required in ["platform", "token"] where !columns.contains(required) {
            throw invalidCSV("the header must name a \(required) column", field: required)
        }
        return columns
    }

    static func invalidCSV(_ message: String, field: String?) -> APIError {
        APIError(status: 400, code: "invalid_csv", message: message, field: field)
    }

    /// Parses the file batch by batch, applies each batch in one shard turn
    /// (a value command, `Command.importRows`) and waits for its records
    /// before parsing the next; answers when the
    /// file is done (503 when the log cannot take a batch). Runs on a task,
    /// never on an event loop.
    func run(_ start: Progress, sink: any HTTPReplySink) async {
        var progress = start
        while true {
            var rows: [ImportRow] = []
            rows.reserveCapacity(DeviceImport.rowsPerJob)
            if progress.lines != nil {
                while rows.count < DeviceImport.rowsPerJob, let line = progress.lines?.next() {
                    switch ExportedDevice.parse(line.bytes) {
                    case .success(let device): rows.append(.restore(line: line.number, device))
                    case .failure(let error): rows.append(.refused(line: line.number, code: error.code))
                    }
                }
            }
            while progress.lines == nil, rows.count < DeviceImport.rowsPerJob, let record = progress.reader.next() {
                switch parse(record) {
                case .success(let request): rows.append(.register(line: record.line, request))
                case .failure(let error): rows.append(.refused(line: record.line, code: error.code))
                }
            }
            if rows.isEmpty {
                sink.send(DeviceImport.render(progress))
                return
            }
            let outcome = await registry.execute(scope.indexKey, settings: scope.settings, .importRows(rows, at: now))
            guard let outcome else {
                sink.send(APIError.logUnavailable.response)
                return
            }
            guard case .imported(let batch) = outcome else {
                preconditionFailure("an import batch answered \(outcome)")
            }
            progress.add(batch)
        }
    }

    /// Turns one record into a register request through the JSON body parser,
    /// so a row obeys exactly the rules of `POST /v1/devices`.
    private func parse(_ record: CSVReader.Record) -> Result<RegisterRequest, APIError> {
        guard let fields = record.fields else {
            return .failure(APIError(status: 400, code: "invalid_csv_row", message: "the row is not valid CSV"))
        }
        guard fields.count == columns.count else {
            return .failure(
                APIError(status: 400, code: "invalid_csv_row", message: "the row has another number of fields"))
        }
        var members: [(key: String, value: JSONValue)] = []
        members.reserveCapacity(columns.count)
        for (name, text) in zip(columns, fields) where !text.isEmpty {
            switch name {
            case "push_permission", "opted_in":
                if asciiCaseInsensitiveEqual(text, "true") {
                    members.append((name, .bool(true)))
                } else if asciiCaseInsensitiveEqual(text, "false") {
                    members.append((name, .bool(false)))
                } else {
                    return .failure(APIError.invalidField(name, "\(name) must be true or false"))
                }
            case "client_sequence":
                // The cell's text as a number literal; `RegisterBody` checks it as in JSON.
                members.append((name, .number(text)))
            case "tags":
                guard let tags = try? JSONReader.parse(Array(text.utf8), limits: JSONBody.limits),
                    tags.objectMembers != nil
                else { return .failure(APIError(RegistryRejection.invalidTags)) }
                members.append((name, tags))
            default:
                members.append((name, .string(text)))
            }
        }
        do throws(APIError) {
            return .success(try RegisterBody.parse(.object(members)))
        } catch {
            return .failure(error)
        }
    }

    /// `{"created":N,"updated":N,"rejected":[{"line":K,"code":"…"}],"rejected_count":N}`.
    static func render(_ progress: Progress) -> HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 64 + progress.rejected.count * 40)
        writer.beginObject()
        writer.member("created", progress.created)
        writer.member("updated", progress.updated)
        writer.key("rejected")
        writer.beginArray()
        for (line, code) in progress.rejected {
            writer.beginObject()
            writer.member("line", line)
            writer.member("code", code)
            writer.endObject()
        }
        writer.endArray()
        writer.member("rejected_count", progress.rejectedCount)
        writer.endObject()
        return jsonResponse(200, writer)
    }
}

extension DeviceImport {
    /// Returns the text without leading and trailing spaces and tabs.
    static func trimmed(_ text: some StringProtocol) -> String {
        let utf8 = Array(text.utf8)
        let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        guard let first = utf8.firstIndex(where: { !isBlank($0) }), let last = utf8.lastIndex(where: { !isBlank($0) })
        else { return "" }
        return String(decoding: utf8[first...last], as: UTF8.self)
    }
}
