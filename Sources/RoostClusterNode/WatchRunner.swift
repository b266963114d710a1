import RoostCluster
import RoostPlatform
import Synchronization

/// Runs the machine's watch: each `start` opens a watch on a thread of its
/// own (with its own `EtcdClient`) and posts its events to the mailbox until
/// it fails or is cancelled; a cancelled watch posts nothing more.
final class WatchRunner: Sendable {
    /// How long one read of the stream blocks before the thread looks at its cancellation.
    static let pollMilliseconds: Int64 = 200

    private struct Running {
        var cancelled: Set<WatchToken> = []
        var cancellers: [WatchToken: EtcdWatchCanceller] = [:]
    }

    private let endpoints: [EtcdEndpoint]
    private let options: EtcdClientOptions
    private let mailbox: NodeMailbox
    private let running = Mutex(Running())

    init(endpoints: [EtcdEndpoint], options: EtcdClientOptions, mailbox: NodeMailbox) {
        self.endpoints = endpoints
        self.options = options
        self.mailbox = mailbox
    }

    /// Watches `range` from revision `from` (the replication thread).
    func start(_ token: WatchToken, _ range: EtcdKeyRange, from revision: EtcdRevision) {
        let spawned = Result { () throws(SystemCallError) in
            try PlatformThread.spawn(name: "roost-watch") { [self] in self.run(token, range, revision) }
        }
        switch spawned {
        case .success(let thread): thread.detach()
        case .failure: mailbox.post(.watchFailed(token, .unavailable))  // the machine reads, then watches again
        }
    }

    /// Ends the watch `token` (its thread posts nothing more).
    func cancel(_ token: WatchToken) {
        let canceller = running.withLock { running -> EtcdWatchCanceller? in
            running.cancelled.insert(token)
            return running.cancellers.removeValue(forKey: token)
        }
        canceller?.cancel()
    }

    private func isCancelled(_ token: WatchToken) -> Bool {
        running.withLock { $0.cancelled.contains(token) }
    }

    private func run(_ token: WatchToken, _ range: EtcdKeyRange, _ revision: EtcdRevision) {
        let client = EtcdClient(endpoints: endpoints, options: options)
        defer {
            client.close()
            running.withLock { running in
                running.cancellers[token] = nil
                running.cancelled.remove(token)
            }
        }
        let stream: EtcdWatchStream
        do {
            stream = try client.watch(range, from: revision)
        } catch {
            if !isCancelled(token) { mailbox.post(.watchFailed(token, error.failure)) }
            return
        }
        defer { stream.close() }
        let registered = running.withLock { running -> Bool in
            guard !running.cancelled.contains(token) else { return false }
            running.cancellers[token] = stream.canceller
            return true
        }
        guard registered else { return }
        while true {
            do {
                let events = try stream.next(timeout: .milliseconds(Self.pollMilliseconds))
                if isCancelled(token) { return }
                if !events.isEmpty { mailbox.post(.watchDelivered(token, events)) }
            } catch {
                if !isCancelled(token) { mailbox.post(.watchFailed(token, error.failure)) }
                return
            }
        }
    }
}
