import RoostModel

/// `roost-bench inactivity [--devices N]`: the cost of spec §8's bounded
/// inactivity steps on one `AppIndex` of N devices (no engine, no log): a
/// preview pass that matches nothing (the sweep's usual case: a scan), one
/// that matches everything, and an invalidation pass of every device, each
/// in steps of the named per-turn bounds. Prints the mean and the longest
/// step, which is how long one shard turn is held.
enum InactivityBenchmark {
    static let day = Limits.millisecondsPerDay

    static func run(devices: Int) {
        var index = AppIndex(appID: AppID(1), mode: .live)
        let start = Timestamp(millisecondsSinceEpoch: 1_790_000_000_000)
        for number in 0..<devices {
            let request = RegisterRequest(token: RegistryBenchmark.token(number, generation: 0))
            guard case .success = index.register(request, at: start.adding(milliseconds: Int64(number))) else {
                preconditionFailure("registration \(number) refused")
            }
        }
        let now = start.adding(milliseconds: 400 * day)
        print(
            "inactivity steps over \(devices) devices (examine \(Limits.inactiveScanDevicesPerTurnMax), "
                + "invalidate \(Limits.inactiveInvalidationsPerTurnMax) per step)")
        measure("preview, nothing matches", devices: devices) { step in
            let slice = index.previewInactive(
                InactivityStep(lastSeenBefore: start, afterSequence: step), keep: Limits.inactivePreviewLimitDefault)
            return (slice.matched, slice.next)
        }
        measure("preview, everything matches (keep 100)", devices: devices) { step in
            let slice = index.previewInactive(
                InactivityStep(lastSeenBefore: now.adding(milliseconds: -day), afterSequence: step),
                keep: Limits.inactivePreviewLimitDefault)
            return (slice.matched, slice.next)
        }
        measure("invalidate, everything matches", devices: devices) { step in
            let (slice, mutations) = index.invalidateInactive(
                InactivityStep(lastSeenBefore: now.adding(milliseconds: -day), afterSequence: step), at: now)
            precondition(mutations.count == slice.invalidated, "one upsert per invalidation")
            return (slice.invalidated, slice.next)
        }
    }

    /// Runs `step` from sequence 0 until it says done; prints steps, matches,
    /// mean and longest step, and nanoseconds per device.
    private static func measure(_ name: String, devices: Int, _ step: (UInt64) -> (matched: Int, next: UInt64?)) {
        let clock = ContinuousClock()
        var after: UInt64 = 0
        var steps = 0
        var matched = 0
        var longest = Duration.zero
        let began = clock.now
        while true {
            let stepStart = clock.now
            let (count, next) = step(after)
            longest = max(longest, clock.now - stepStart)
            steps += 1
            matched += count
            guard let next else { break }
            after = next
        }
        let total = clock.now - began
        let mean = total / steps
        print(
            "  \(name): \(steps) steps, \(matched) matched, total \(total), mean step \(mean), longest step "
                + "\(longest), \(nanoseconds(total) / max(1, devices)) ns/device")
    }

    private static func nanoseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
    }
}
