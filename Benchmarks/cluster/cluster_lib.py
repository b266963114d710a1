"""What the cluster benchmarks share: etcd and roost nodes on loopback,
each process started and stopped by this code, by PID."""
import http.client, json, os, signal, socket, subprocess, threading, time

ADMIN = "failover-bench-admin-key-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, key=None, body=None, timeout=2.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": "Bearer " + key} if key else {}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


class Node:
    def __init__(self, binary, directory, index, etcd_url):
        self.binary, self.directory, self.index, self.etcd_url = binary, directory, index, etcd_url
        self.process, self.port = None, None

    def start(self, extra=(), deadline=None):
        """Starts the node and waits for its `listening on` line; with `deadline`
        (seconds), fails (SystemExit) when it has not printed it by then."""
        log = open(os.path.join(self.directory, f"n{self.index}.log"), "ab")
        cluster = [] if self.etcd_url is None else [
            "--cluster", "bench", "--node-id", f"n{self.index}", "--etcd", self.etcd_url, "--lease-ttl-s", "1"]
        self.process = subprocess.Popen(
            [self.binary, "serve", "--listen", "127.0.0.1:0", "--data", os.path.join(self.directory, f"n{self.index}"),
             "--fsync", "always", *cluster, *extra],
            stdout=subprocess.PIPE, stderr=log, env=dict(os.environ, ROOST_ADMIN_KEY=ADMIN))
        if deadline is None:
            line = self.process.stdout.readline().decode()
        else:
            read = []
            reader = threading.Thread(target=lambda: read.append(self.process.stdout.readline().decode()), daemon=True)
            reader.start()
            reader.join(deadline)
            if not read:
                raise SystemExit(f"node {self.index} did not serve within {deadline} s (pid {self.process.pid})")
            line = read[0]
        if not line.startswith("listening on "):
            raise SystemExit(f"node {self.index} did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def alive(self):
        return self.process is not None and self.process.poll() is None


def leader_of(nodes, excluded=None, deadline=10.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for node in nodes:
            if node is excluded or not node.alive():
                continue
            try:
                if request(node.port, "GET", "/readyz", timeout=0.5)[0] == 200:
                    return node
            except OSError:
                pass
    raise SystemExit("no leader within %.0f s" % deadline)



def start_etcd(directory, extra=()):
    """One etcd member (heartbeat 50 ms, election 500 ms), with `extra` flags;
    returns (process, client URL)."""
    client, peer = free_port(), free_port()
    etcd = subprocess.Popen(
        ["/usr/bin/etcd", "--name", "bench", "--data-dir", os.path.join(directory, "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"bench=http://127.0.0.1:{peer}", "--heartbeat-interval", "50",
         "--election-timeout", "500", *extra], stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(directory, "etcd.log"), "wb"))
    return etcd, f"http://127.0.0.1:{client}"


def init_cluster(binary, etcd_url):
    for _ in range(100):
        if subprocess.run([binary, "cluster", "init", "--etcd", etcd_url, "--cluster", "bench"],
                          capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise SystemExit("roost cluster init failed")


def app_key(port):
    """An app (max_devices_per_person 1000) and a secret key with devices:write and devices:read."""
    request(port, "POST", "/v1/apps", ADMIN, json.dumps({"name": "bench", "settings": {"max_devices_per_person": 1000}}))
    _, made = request(port, "POST", "/v1/apps/1/keys", ADMIN,
                      json.dumps({"kind": "secret", "capabilities": ["devices:write", "devices:read"]}))
    return json.loads(made)["key"]


def stop_all(nodes, etcd):
    for node in nodes:
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signal.SIGCONT)
            node.process.kill()
            node.process.wait()
    if etcd is not None:
        etcd.terminate()
        etcd.wait()


def start_cluster(binary, directory, nodes_count=3, extra=()):
    """One etcd member, the cluster's record, and `nodes_count` nodes; returns
    (etcd process, etcd URL, nodes, leader). The caller stops them (`stop_all`)."""
    etcd, etcd_url = start_etcd(directory)
    nodes = []
    try:
        init_cluster(binary, etcd_url)
        nodes = [Node(binary, directory, index, etcd_url) for index in range(1, nodes_count + 1)]
        for node in nodes:
            node.start(extra)
        return etcd, etcd_url, nodes, leader_of(nodes)
    except BaseException:
        stop_all(nodes, etcd)
        raise
