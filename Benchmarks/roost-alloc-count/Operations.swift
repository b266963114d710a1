import CAllocationCounter

/// The counted operations, in the order they run (each needs the ones
/// before it: the devices, then the people they made). Each is warmed up on
/// other data first, so that what a first use of a route builds once (lazy
/// tables, runtime metadata, grown buffers) is not counted.
struct Operations {
    static let names = [
        "register_new", "register_known", "register_known_tagged", "get_device", "get_person", "batch_item",
        "export_device", "patch_device", "feedback",
    ]

    let workload: Workload
    let options: Options

    private func selected(_ name: String) -> Bool { options.only?.contains(name) ?? true }

    /// Runs every operation, counting the selected ones; returns their measurements in order.
    func run() throws -> [Measurement] {
        try workload.setUp()
        let warm = 0..<options.warmup
        let counted = options.warmup..<(options.warmup + options.count)
        var results: [Measurement] = []

        // POST /v1/devices of a device the index does not hold: 201.
        try registerAll(warm, expecting: 201)
        try results.append(
            count("register_new", unit: "request", units: counted.count) {
                try registerAll(counted, expecting: 201)
            })

        // The same bodies again: 200, the device is known (its version moves, nothing else changes).
        if selected("register_known") {
            try registerAll(warm, expecting: 200)
            try results.append(
                count("register_known", unit: "request", units: counted.count) {
                    try registerAll(counted, expecting: 200)
                })
        }

        // Devices of their own with two tags, registered new (201), then counted
        // registered again with the same body: 200, a known device that holds tags,
        // re-registered with the same ones (nothing changes but its last_seen_at).
        if selected("register_known_tagged") {
            let base = Workload.taggedDeviceBase
            let warmTagged = (base + warm.lowerBound)..<(base + warm.upperBound)
            let countedTagged = (base + counted.lowerBound)..<(base + counted.upperBound)
            try registerAll(warmTagged, tagged: true, expecting: 201)
            try registerAll(warmTagged, tagged: true, expecting: 200)
            try registerAll(countedTagged, tagged: true, expecting: 201)
            try results.append(
                count("register_known_tagged", unit: "request", units: counted.count) {
                    try registerAll(countedTagged, tagged: true, expecting: 200)
                })
        }

        // GET /v1/devices/{id}: one device with its token.
        if selected("get_device") {
            try exchangeAll(warm.map(workload.deviceRead), expecting: 200)
            let requests = try counted.map(workload.deviceRead)
            try results.append(
                count("get_device", unit: "request", units: requests.count) {
                    try exchangeAll(requests, expecting: 200)
                })
        }

        // GET /v1/people/{id}: a person and their five devices.
        if selected("get_person") {
            let people = (options.warmup + options.count) / Workload.devicesPerPerson
            try exchangeAll(warm.map { workload.personRead($0 % people) }, expecting: 200)
            let requests = counted.map { workload.personRead($0 % people) }
            try results.append(
                count("get_person", unit: "request", units: requests.count) {
                    try exchangeAll(requests, expecting: 200)
                })
        }

        // POST /v1/devices/batch: per item, batches of `Workload.batchItems` new devices.
        if selected("batch_item") {
            let size = Workload.batchItems
            let warmBatches = max(1, options.warmup / size)
            let countedBatches = max(1, options.count / size)
            let base = Workload.batchDeviceBase
            try exchangeAll((0..<warmBatches).map { workload.batch(from: base + $0 * size) }, expecting: 200)
            let requests = (warmBatches..<(warmBatches + countedBatches)).map { workload.batch(from: base + $0 * size) }
            try results.append(
                count("batch_item", unit: "item", units: countedBatches * size) {
                    try exchangeAll(requests, expecting: 200)
                })
        }

        // GET /v1/devices/export: per exported device (one NDJSON line each), every device of the app.
        if selected("export_device") {
            let request = workload.export()
            let warmLines = lines(in: try workload.exchange(request, 200))
            var countedLines = 0
            var measurement = try count("export_device", unit: "device", units: 1) {
                countedLines = lines(in: try workload.exchange(request, 200))
            }
            guard countedLines == warmLines, countedLines > 0 else {
                throw WorkloadError("the exports differ: \(warmLines) then \(countedLines) devices")
            }
            measurement.units = countedLines
            results.append(measurement)
        }
        // PATCH /v1/devices/{id}: a tag and opted_in, each patch a change.
        if selected("patch_device") {
            try exchangeAll(warm.map { try workload.devicePatch($0, round: 0) }, expecting: 200)
            let requests = try counted.map { try workload.devicePatch($0, round: $0) }
            try results.append(
                count("patch_device", unit: "request", units: requests.count) {
                    try exchangeAll(requests, expecting: 200)
                })
        }

        // POST /v1/feedback: each report invalidates a device (last: the devices stay invalid).
        if selected("feedback") {
            try exchangeAll(warm.map(workload.feedback), expecting: 200)
            let requests = counted.map(workload.feedback)
            try results.append(
                count("feedback", unit: "request", units: requests.count) {
                    try exchangeAll(requests, expecting: 200)
                })
        }
        return results.filter { selected($0.name) }
    }

    /// Counts `body`'s window when `name` is selected; runs it uncounted otherwise.
    private func count(_ name: String, unit: String, units: Int, _ body: () throws -> Void) throws -> Measurement {
        guard selected(name) else {
            try body()
            return Measurement(name: name, unit: unit, units: units, counts: roost_alloc_counts())
        }
        return try measure(name, unit: unit, units: units, backtraces: options, body)
    }

    /// Registers every device of `devices` (the client's work: its
    /// allocations are not counted) and remembers their ids.
    private func registerAll(_ devices: Range<Int>, tagged: Bool = false, expecting status: Int) throws {
        let requests = devices.map { workload.registration($0, tagged: tagged) }
        for (device, request) in zip(devices, requests) {
            try workload.register(device, request: request, expecting: status)
        }
    }

    private func exchangeAll(_ requests: [[UInt8]], expecting status: Int) throws {
        for request in requests { try workload.exchange(request, status) }
    }

    private func lines(in body: [UInt8]) -> Int {
        body.reduce(0) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
    }
}
