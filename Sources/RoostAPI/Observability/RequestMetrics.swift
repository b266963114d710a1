import RoostTelemetry

/// Requests by route and status and their latency, counted per lane: one
/// lane per engine loop (written by that loop's thread only) and one more for
/// everything else (tests, tools, refusals the HTTP layer asks about). An
/// observation is three relaxed adds on the lane's own cells: no lock, no
/// shared cache line (docs/metrics-and-logs.md). A scrape sums the lanes.
///
/// Routes are slots: the router's table in order, then `unmatched` (404 or
/// 405 from the router) and `refused` (the HTTP layer's own 400/413/431…).
/// Statuses are slots too: every code RFC 9110 defines that a server sends,
/// and `other` for the rest.
package final class RequestMetrics: Sendable {
    /// The codes with a slot of their own.
    package static let statuses: [Int] = [
        100, 101, 200, 201, 202, 204, 206, 301, 302, 304, 307, 308, 400, 401, 403, 404, 405, 406, 408, 409, 410, 411,
        412, 413, 414, 415, 416, 417, 421, 422, 425, 426, 428, 429, 431, 451, 500, 501, 502, 503, 504, 505, 507,
    ]
    /// Status code → slot; codes outside 0..<600 or without a slot go to `other`.
    private static let statusSlotByCode: [UInt8] = {
        precondition(statuses.count < 255, "too many status slots")
        var table = [UInt8](repeating: UInt8(statuses.count), count: 600)
        for (slot, code) in statuses.enumerated() { table[code] = UInt8(slot) }
        return table
    }()
    /// Slots per route: the codes and `other`.
    static let statusSlots = statuses.count + 1
    static let latency = HistogramBuckets.latencyNanoseconds

    /// One route's labels.
    package struct RouteLabel: Sendable, Equatable {
        package var method: String
        package var route: String
    }

    /// Every route slot's labels: the table, then `unmatched` and `refused`.
    package let labels: [RouteLabel]
    /// The slot of requests no route matched, and of requests the HTTP layer refused.
    package let unmatchedSlot: Int
    package let refusedSlot: Int
    /// Lanes: one per engine loop, then the shared one (`otherLane`).
    private let lanes: [CounterCells]
    package var otherLane: Int { lanes.count - 1 }

    private let latencyBase: Int
    private let sumBase: Int
    private let sequenceCell: Int

    /// Counters for `routes` (method and declared path, in table order) and `loops` engine loops.
    package init(routes: [RouteLabel], loops: Int) {
        precondition(loops >= 0, "negative loop count \(loops)")
        labels =
            routes + [RouteLabel(method: "any", route: "unmatched"), RouteLabel(method: "any", route: "refused")]
        unmatchedSlot = routes.count
        refusedSlot = routes.count + 1
        let routeSlots = labels.count
        latencyBase = routeSlots * Self.statusSlots
        sumBase = latencyBase + routeSlots * Self.latency.bucketCount
        sequenceCell = sumBase + routeSlots
        let cells = sequenceCell + 1
        lanes = (0...loops).map { _ in CounterCells(count: cells) }
    }

    /// Returns the lane of engine loop `loop`, or the shared lane for any other caller.
    package func lane(forLoop loop: Int) -> Int {
        loop >= 0 && loop < otherLane ? loop : otherLane
    }

    /// Counts one answered request of route slot `route` in `lane`.
    @inline(__always)
    package func record(route: Int, status: Int, nanoseconds: UInt64, lane: Int) {
        precondition(route >= 0 && route < labels.count, "route slot \(route) outside 0..<\(labels.count)")
        let cells = lanes[lane]
        let statusSlot = status >= 0 && status < 600 ? Int(Self.statusSlotByCode[status]) : Self.statuses.count
        cells.add(route * Self.statusSlots + statusSlot)
        cells.add(latencyBase + route * Self.latency.bucketCount + Self.latency.bucket(for: nanoseconds))
        cells.add(sumBase + route, nanoseconds)
    }

    /// Returns the next request number of `lane` (0, 1, 2, …).
    package func nextSequence(lane: Int) -> UInt64 {
        lanes[lane].increment(sequenceCell)
    }

    /// The counts summed over the lanes, at one moment.
    package struct Totals: Sendable {
        /// Per route slot and status: (status label, count) of the non-zero ones.
        package var requests: [[(status: String, count: UInt64)]]
        /// Per route slot: its latency histogram.
        package var latency: [Histogram]
    }

    /// Adds up every lane. O(lanes × routes × (statuses + buckets)).
    package func totals() -> Totals {
        let sum = CounterCells.sum(lanes)
        var requests: [[(status: String, count: UInt64)]] = []
        var latency: [Histogram] = []
        for route in labels.indices {
            var row: [(status: String, count: UInt64)] = []
            for slot in 0..<Self.statusSlots {
                let count = sum[route * Self.statusSlots + slot]
                guard count > 0 else { continue }
                row.append((slot < Self.statuses.count ? String(Self.statuses[slot]) : "other", count))
            }
            requests.append(row)
            let base = latencyBase + route * Self.latency.bucketCount
            latency.append(
                Histogram(
                    Self.latency, counts: Array(sum[base..<base + Self.latency.bucketCount]), sum: sum[sumBase + route])
            )
        }
        return Totals(requests: requests, latency: latency)
    }
}
