import RoostModel

/// The usage text of every command. `--help` prints it to stdout and exits 0;
/// a command line that cannot be understood prints it to stderr and exits 2.
enum Usage {
    static let serve = """
        usage: roost serve [--listen HOST:PORT] [--data DIR] [--fsync always|everysec|never] [--shards N]
                           [--event-loops N] [--max-connections N] [--header-timeout-ms N]
                           [--body-timeout-ms N] [--idle-timeout-ms N] [--first-byte-timeout-ms N]
                           [--partial-head-evict-after-ms N]
                           [--snapshot-log-bytes N] [--changes-retained N] [--access-log]
                           [--trusted-proxy ADDRESS]...
          --listen HOST:PORT        default 127.0.0.1:8080; port 0 picks a free one; IPv6 in brackets: [::1]:8080
          --data DIR                default ./roost-data (created if missing; one server per directory)
          --fsync POLICY            always (default): answer a write once it is on disk; everysec: lose at most
                                    about 1 s of writes on power loss; never: leave it to the OS
          --shards N                default: the number of CPU cores (at most \(ServeOptions.shardsMax))
          --event-loops N           default: the number of CPU cores
          --max-connections N       default 10000
          --header-timeout-ms N     default 10000; --body-timeout-ms N default 30000; --idle-timeout-ms N default 60000
          --first-byte-timeout-ms N  a connection that has sent nothing is closed after N ms (default 5000)
          --partial-head-evict-after-ms N  at --max-connections, a head arriving for N ms or more may lose its
                                    place to a newcomer, slowest first (default 500)
          --snapshot-log-bytes N    write a snapshot once the log grew by N bytes (default 268435456)
          --changes-retained N      devices whose latest change each app and mode's change feed keeps
                                    (GET /v1/changes; default \(ChangeFeed.retainedDefault), at most \(ChangeFeed.retainedLimit));
                                    an older cursor answers 410 cursor_expired
          --access-log              one http.request JSON line on stderr per answered request
          --trusted-proxy ADDRESS   a proxy whose X-Forwarded-For names the client for the per-address limit
                                    of the mobile routes (repeatable, at most 16; default none)
          The operator key is ROOST_ADMIN_KEY, else DIR/admin.key (created on first start).
        cluster mode (docs/cluster.md): roost serve --cluster NAME --node-id ID --etcd URL[,URL...]
                           [--advertise URL] [--lease-ttl-s N] [--read-lag-ms N] [--log-retain-bytes N]
                           [--etcd-timeout-ms N]
          --cluster NAME            the cluster (created once with roost cluster init); needs ROOST_ADMIN_KEY,
                                    the same on every node
          --node-id ID              1 to 32 of a-z 0-9 -, unique in the cluster, recorded in DIR at first start
          --etcd URL[,URL...]       etcd members' client URLs (http://HOST:PORT)
          --advertise URL           this node's URL for the others and Roost-Leader (default http:// + --listen)
          --lease-ttl-s N           the leader's lease (default 2, at least 1)
          --read-lag-ms N           a node that does not lead answers reads only within N ms of the group log
                                    (default 2000; a request may ask for more with Roost-Max-Staleness-Ms)
          --etcd-timeout-ms N       an etcd request not answered by then has failed (default 1000)
          --log-retain-bytes N      the leader keeps at most N bytes of group log in etcd beyond what every
                                    live node checkpointed; a node further behind re-seeds (default 536870912)
        """

    static let cluster = """
        usage: roost cluster init --etcd URL[,URL...] --cluster NAME
                                        write the cluster's record in etcd (exit 0); exit 2 when it exists or etcd
                                        cannot be reached
        """

    static let wal = """
        usage: roost wal verify DIR     check every segment, snapshot and checkpoint and replay them as start-up
                                        does (exit 0 intact, 1 damage recovery repairs, e.g. a torn tail; 2 damage
                                        that stops start-up, or an error)
               roost wal dump DIR       one line per record, payloads cut to 16 bytes
        """

    static let backup = """
        usage: roost backup DIR OUT     copy the data directory DIR (a server may be running on it) into OUT, which
                                        must be missing or empty: the newest snapshot and the log after it, cut at a
                                        record boundary, verified; every write acknowledged before the command
                                        started is in it. Exit 0 done, 2 refused or failed (OUT is then incomplete).
        """

    static let restore = """
        usage: roost restore BACKUP DIR  verify a backup made by `roost backup`, then put it into DIR, which must be
                                        missing or empty (and not in use), or left by a restore that did not finish
                                        (DIR/restore.partial: it starts over). Exit 0 done, 2 refused or failed.
        """

    static let all = """
        usage: roost serve [flags]              serve the HTTP API (roost serve --help lists the flags)
               roost wal verify|dump DIR        check or list the log
               roost backup DIR OUT             consistent copy of a (running) data directory
               roost restore BACKUP DIR         put a backup back into an empty directory
               roost cluster init --etcd URL[,URL...] --cluster NAME
                                                create a cluster (spec §13) in etcd
               roost --version | --help         (every command also takes --help)

        """ + [serve, wal, backup, restore, cluster].joined(separator: "\n")
}
