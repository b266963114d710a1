import RoostModel
import Synchronization

/// The shards and the mailboxes in front of them. Jobs for one shard are run
/// in the order they were submitted: each shard has one mailbox and at most one
/// drain in flight, which takes everything queued at once (natural batching:
/// the busier the shard, the larger its batches).
package final class ShardSet: Sendable {
    /// The most jobs one drain hands a shard at once, so one turn stays short.
    package static let jobsPerTurnMax = 1024

    package let shards: [Shard]
    package let log: any MutationLog
    private let mailboxes: [Mailbox]

    /// Creates the shards, each with the indexes recovery built for it (or none).
    package init(shardCount: Int, log: any MutationLog, tables: [IndexTable]? = nil) {
        precondition(shardCount >= 1 && shardCount <= 256, "shard count \(shardCount) out of 1...256")
        precondition(tables == nil || tables?.count == shardCount, "one recovered table per shard")
        self.log = log
        shards = (0..<shardCount).map { Shard(number: $0, log: log, table: tables?[$0] ?? IndexTable()) }
        mailboxes = (0..<shardCount).map { _ in Mailbox() }
    }

    /// Returns the shard that owns `app`.
    package func shardNumber(for app: AppID) -> Int {
        ShardSet.shardNumber(for: app, shardCount: shards.count)
    }

    /// Returns the shard that owns `app` among `shardCount`: a stable hash, so
    /// the same app lands on the same shard in every run with the same count.
    package static func shardNumber(for app: AppID, shardCount: Int) -> Int {
        var hash = UInt64(app.rawValue) &* 0x9E37_79B9_7F4A_7C15
        hash ^= hash >> 32
        return Int(hash % UInt64(shardCount))
    }

    /// Queues one job; it runs after every job queued before it for that shard.
    package func submit(_ job: ShardJob) {
        submit([job])
    }

    /// Queues jobs (any apps); each shard runs its part in submission order.
    package func submit(_ jobs: [ShardJob]) {
        if shards.count == 1 {
            enqueue(jobs, on: 0)
            return
        }
        var groups = [[ShardJob]](repeating: [], count: shards.count)
        for job in jobs { groups[shardNumber(for: job.app)].append(job) }
        for (number, group) in groups.enumerated() where !group.isEmpty { enqueue(group, on: number) }
    }

    private func enqueue(_ jobs: [ShardJob], on number: Int) {
        let mailbox = mailboxes[number]
        let mustSchedule = mailbox.state.withLock { state in
            state.jobs.append(contentsOf: jobs)
            if state.draining { return false }
            state.draining = true
            return true
        }
        guard mustSchedule else { return }
        let shard = shards[number]
        Task {
            // Two buffers swap places: the drain takes the whole queue without
            // copying it and hands the emptied buffer back for the next turn.
            var batch: [ShardJob] = []
            while true {
                batch.removeAll(keepingCapacity: true)
                let more = mailbox.state.withLock { state -> Bool in
                    let queued = state.jobs.count - state.head
                    if queued == 0 {
                        state.draining = false
                        return false
                    }
                    if state.head == 0 && queued <= ShardSet.jobsPerTurnMax {
                        swap(&batch, &state.jobs)
                        return true
                    }
                    // A long queue: take the next turn's worth from the head.
                    let end = state.head + min(queued, ShardSet.jobsPerTurnMax)
                    batch.append(contentsOf: state.jobs[state.head..<end])
                    if end == state.jobs.count {
                        state.jobs.removeAll(keepingCapacity: true)
                        state.head = 0
                    } else if end * 2 >= state.jobs.count {
                        // Most of the buffer is taken: drop it (amortized O(1) a job).
                        state.jobs.removeFirst(end)
                        state.head = 0
                    } else {
                        state.head = end
                    }
                    return true
                }
                if !more { return }
                await shard.run(batch)
            }
        }
    }

    /// Jobs queued for one shard, and whether a drain task is running for it.
    private final class Mailbox: Sendable {
        /// Jobs before `head` have been taken by the drain.
        let state = Mutex<(jobs: [ShardJob], head: Int, draining: Bool)>(([], 0, false))
    }
}
