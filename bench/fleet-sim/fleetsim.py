#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fleet simulation (docs/FLEET.md "The fleet simulation").

Runs a fleet on this machine: one network namespace per region (loopback
only), keylessd key servers and egress routers in them, one etcd (data on
/dev/shm) in the namespace of ETCD_REGION, and a faultproxy per (region,
server of another region) that listens in the first namespace on the
server's advertised port and forwards to the server's namespace with half
the region pair's round trip each way. Every server advertises
127.0.0.1:<its port>, and each region reaches it at its own distance.

Then it replays the incidents under load (keyless-bench in each region,
local and remote keys): steady state, joins, lease expiry after SIGKILL, a
data centre's servers replaced, a hot zone pinned to a far region, a
region lost. It reports per scenario the convergence time after each
membership change (the driver's own etcd watch in etcd's namespace gives
the moment of the change; each router's /remotes endpoint, polled, gives
when its table holds or no longer holds the server), failed requests,
latencies, connections and descriptors per server, and etcd's writes.

Standard library only. Root (network namespaces). Writes the results as
JSON (--out) and a Markdown summary on stdout.
"""

import argparse
import base64
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

REGIONS = ["mel", "sin", "sfo", "iad", "fra"]
# Round trips in ms between regions (public figures, rounded): Melbourne,
# Singapore, San Francisco, Virginia, Frankfurt.
RTT = {
    ("mel", "sin"): 92,
    ("mel", "sfo"): 175,
    ("mel", "iad"): 200,
    ("mel", "fra"): 260,
    ("sin", "sfo"): 170,
    ("sin", "iad"): 215,
    ("sin", "fra"): 160,
    ("sfo", "iad"): 65,
    ("sfo", "fra"): 145,
    ("iad", "fra"): 90,
}
# Each region's key set is also served by servers 0 and 1 of this region,
# so a region lost leaves an eligible remote for its keys.
BACKUP = {"mel": "sin", "sin": "mel", "sfo": "iad", "iad": "sfo", "fra": "iad"}
ETCD_REGION = "iad"
HOT_REGION = "mel"  # the hot zone's keys live only here
HOT_CLIENTS = "sfo"  # and its traffic comes from here
HOT_SERVERS = 4  # servers 0..3 of HOT_REGION hold the hot set
ETCD_PORT = 2379
PREFIX = "/keyless/"

libc = ctypes.CDLL("libc.so.6", use_errno=True)
CLONE_NEWNET = 0x40000000


def rtt(a, b):
    if a == b:
        return 0
    return RTT.get((a, b)) or RTT[(b, a)]


def ns_name(region):
    return "kls-" + region


def now():
    return time.monotonic()


def log(*a):
    print("[%7.1f] " % (now() - T_START), *a, file=sys.stderr, flush=True)


T_START = time.monotonic()


# ---- network namespaces -------------------------------------------------

_home_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
_ns_fds = {}


def ns_socket(region):
    """A TCP socket made in region's namespace (setns is per thread, and
    a socket keeps the namespace it was made in)."""
    fd = _ns_fds.get(region)
    if fd is None:
        fd = os.open("/run/netns/" + ns_name(region), os.O_RDONLY)
        _ns_fds[region] = fd
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns " + region)
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    finally:
        if libc.setns(_home_ns, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns home")
    return s


class NsHTTP(http.client.HTTPConnection):
    """HTTP/1.1 to 127.0.0.1:port in a region's namespace."""

    def __init__(self, region, port, timeout=2.0):
        super().__init__("127.0.0.1", port, timeout=timeout)
        self.region = region

    def connect(self):
        s = ns_socket(self.region)
        s.settimeout(self.timeout)
        s.connect(("127.0.0.1", self.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s


def http_get(region, port, path, timeout=2.0):
    c = NsHTTP(region, port, timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


# ---- processes ----------------------------------------------------------


def _child_setup():
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive us


class Sim:
    def __init__(self, a):
        self.a = a
        self.build = os.path.abspath(a.build)
        self.work = a.work
        self.procs = []  # every process started, for cleanup
        self.servers = {}  # name -> dict (key servers and egress)
        self.next_index = 0
        self.lock = threading.Lock()
        self.watch_events = []  # (t, name, "put"|"delete")
        self.router_events = []  # (t, router, name, "+"|"-")
        self.stop = threading.Event()
        self.fast = threading.Event()  # poll at --poll-ms (else 250 ms)

    # -- plumbing --

    def spawn(self, argv, logname, region=None):
        """Starts argv (in region's namespace when given); stdout+stderr to
        work/logs/logname. Main thread only (the death signal is tied to
        the thread that started the child)."""
        assert threading.current_thread() is threading.main_thread()
        if region:
            argv = ["ip", "netns", "exec", ns_name(region)] + argv
        f = open(os.path.join(self.work, "logs", logname), "ab")
        p = subprocess.Popen(
            argv,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_child_setup,
        )
        f.close()
        self.procs.append(p)
        return p

    def run(self, argv, region=None, check=True):
        if region:
            argv = ["ip", "netns", "exec", ns_name(region)] + argv
        r = subprocess.run(argv, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("%s: %s%s" % (" ".join(argv), r.stdout, r.stderr))
        return r.stdout

    def cleanup(self):
        self.stop.set()
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for r in REGIONS:
            subprocess.run(["ip", "netns", "del", ns_name(r)], capture_output=True)

    # -- setup --

    def setup(self):
        a = self.a
        shutil.rmtree(self.work, ignore_errors=True)
        for d in ("logs", "keys", "servers", "bench"):
            os.makedirs(os.path.join(self.work, d))
        for r in REGIONS:
            subprocess.run(["ip", "netns", "del", ns_name(r)], capture_output=True)
            self.run(["ip", "netns", "add", ns_name(r)])
            self.run(["ip", "link", "set", "lo", "up"], region=r)
        self.pki = os.path.join(self.work, "pki")
        self.run(["bash", os.path.join(a.src, "scripts/dev-pki.sh"), self.pki])
        # key sets: web.<region> and hot
        self.sets = {}
        for s in ["web." + r for r in REGIONS] + ["hot"]:
            d = os.path.join(self.work, "keys", s)
            os.makedirs(d)
            skis = []
            for i in range(a.keys_per_set):
                f = os.path.join(d, "%s-%d.key" % (s, i))
                self.run(
                    [
                        "openssl",
                        "genpkey",
                        "-algorithm",
                        "EC",
                        "-pkeyopt",
                        "ec_paramgen_curve:P-256",
                        "-out",
                        f,
                    ]
                )
                os.chmod(f, 0o600)
                out = self.run([self.build + "/keyless-cli", "ski", f])
                skis.append(out.split()[0])
            self.sets[s] = {"dir": d, "skis": skis}
            with open(os.path.join(self.work, "keys", s + ".skis"), "w") as fh:
                fh.write("\n".join(skis) + "\n")
        # etcd, in its region; the other regions reach it through proxies
        etcd_data = "/dev/shm/kls-fleet-sim-etcd"
        shutil.rmtree(etcd_data, ignore_errors=True)
        self.etcd_data = etcd_data
        self.etcd = self.spawn(
            [
                "etcd",
                "--data-dir",
                etcd_data,
                "--listen-client-urls",
                "http://127.0.0.1:%d" % ETCD_PORT,
                "--advertise-client-urls",
                "http://127.0.0.1:%d" % ETCD_PORT,
                "--listen-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-cluster",
                "default=http://127.0.0.1:2380",
                "--log-level",
                "warn",
            ],
            "etcd.log",
            region=ETCD_REGION,
        )
        for r in REGIONS:
            if r != ETCD_REGION:
                self.proxy(r, ETCD_REGION, ETCD_PORT, "etcd")
        self.wait_for(
            lambda: self.etcd_get("/health")[0] == 200, 20, "etcd answering"
        )
        endpoint = "http://127.0.0.1:%d" % ETCD_PORT
        for s, v in self.sets.items():
            self.run(
                [
                    self.build + "/keyless-cli",
                    "fleet",
                    "publish-set",
                    s,
                    "--etcd",
                    endpoint,
                    "--skis",
                    os.path.join(self.work, "keys", s + ".skis"),
                ],
                region=ETCD_REGION,
            )
        self.empty_keys = os.path.join(self.work, "keys", "none")
        os.makedirs(self.empty_keys, mode=0o700)
        # the watch that times the changes
        threading.Thread(target=self.watch_loop, daemon=True).start()

    def proxy(self, listen_region, target_region, port, what):
        lat = rtt(listen_region, target_region) // 2
        return self.spawn(
            [
                self.build + "/faultproxy",
                "--target",
                "127.0.0.1:%d" % port,
                "--listen",
                str(port),
                "--listen-netns",
                "/run/netns/" + ns_name(listen_region),
                "--target-netns",
                "/run/netns/" + ns_name(target_region),
                "--latency",
                str(lat),
            ],
            "proxy-%s-%s.log" % (listen_region, what),
        )

    def sets_for(self, region, i):
        sets = ["web." + region]
        if i < 2:
            sets += ["web." + r for r in REGIONS if BACKUP[r] == region]
        if region == HOT_REGION and i < HOT_SERVERS:
            sets.append("hot")
        return sets

    def start_server(self, name, region, role, sets):
        """A keylessd (role keys or egress) with 1 shard and 1 worker."""
        a = self.a
        idx = self.next_index
        self.next_index += 1
        port = 20000 + idx
        mport = 24000 + idx
        sdir = os.path.join(self.work, "servers", name)
        kdir = os.path.join(sdir, "keys")
        os.makedirs(kdir, mode=0o700)
        for s in sets:
            for f in os.listdir(self.sets[s]["dir"]):
                shutil.copy(os.path.join(self.sets[s]["dir"], f), kdir)
                os.chmod(os.path.join(kdir, f), 0o600)
        if role == "keys":
            # every other region reaches this server through a proxy
            for r in REGIONS:
                if r != region:
                    self.proxy(r, region, port, name)
        argv = [
            self.build + "/keylessd",
            "--listen-address=127.0.0.1",
            "--port=%d" % port,
            "--metrics-port=%d" % mport,
            "--shards=1",
            "--workers=1",
            "--max-connections=%d" % a.max_connections,
            "--loglevel=1",
            "--auth-cert=%s/server.crt" % self.pki,
            "--auth-key=%s/server.key" % self.pki,
            "--cloudflare-ca-cert=%s/ca.crt" % self.pki,
            "--private-key-dirs=%s" % kdir,
            "--fleet-etcd-endpoints=http://127.0.0.1:%d" % ETCD_PORT,
            "--fleet-prefix=" + PREFIX,
            "--fleet-name=" + name,
            "--fleet-region=" + region,
            "--fleet-attributes=dc=%s-1" % region,
            "--fleet-role=" + role,
            "--fleet-lease-ttl=%d" % a.ttl,
        ]
        if sets:
            argv.append("--fleet-key-sets=" + ",".join(sets))
        if role != "keys":
            argv += [
                "--router-cert=%s/client.crt" % self.pki,
                "--router-key=%s/client.key" % self.pki,
            ] + a.egress_flags.split()
        p = self.spawn(argv, name + ".log", region=region)
        srv = {
            "name": name,
            "region": region,
            "role": role,
            "sets": sets,
            "port": port,
            "mport": mport,
            "proc": p,
            "alive": True,
            "started": now(),
        }
        with self.lock:
            self.servers[name] = srv
        return srv

    def key_servers(self, alive=True):
        return [
            s
            for n, s in self.servers.items()
            if s["role"] == "keys" and (s["alive"] or not alive)
        ]

    def routers(self, alive=True):
        return [
            s
            for n, s in self.servers.items()
            if s["role"] == "egress" and (s["alive"] or not alive)
        ]

    def kill(self, srv, sig=signal.SIGKILL):
        srv["proc"].send_signal(sig)
        srv["alive"] = False
        srv["killed"] = now()
        srv["proc"].wait()

    def wait_for(self, cond, secs, what):
        end = now() + secs
        while now() < end:
            try:
                if cond():
                    return True
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        raise RuntimeError("timed out waiting for " + what)

    # -- etcd --

    def etcd_get(self, path):
        return http_get(ETCD_REGION, ETCD_PORT, path)

    def etcd_post(self, path, obj):
        c = NsHTTP(ETCD_REGION, ETCD_PORT, timeout=5)
        try:
            c.request("POST", path, body=json.dumps(obj),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return json.loads(r.read().decode())
        finally:
            c.close()

    def mark_draining(self, name):
        """Rewrites name's record with health "draining" on its own lease,
        as keylessd does at SIGTERM, without stopping it."""
        key = base64.b64encode((PREFIX + "dir/servers/" + name).encode()).decode()
        kv = self.etcd_post("/v3/kv/range", {"key": key})["kvs"][0]
        rec = json.loads(base64.b64decode(kv["value"]))
        rec["health"] = "draining"
        self.etcd_post("/v3/kv/put", {
            "key": key,
            "value": base64.b64encode(json.dumps(rec).encode()).decode(),
            "lease": kv["lease"]})

    def etcd_metrics(self):
        st, body = self.etcd_get("/metrics")
        want = {
            "etcd_server_proposals_committed_total": "proposals",
            "etcd_mvcc_put_total": "puts",
            "etcd_mvcc_delete_total": "deletes",
            "etcd_mvcc_txn_total": "txns",
            "etcd_mvcc_range_total": "ranges",
            "etcd_debugging_lease_granted_total": "leases_granted",
            "etcd_debugging_lease_revoked_total": "leases_revoked",
            "etcd_debugging_lease_renewed_total": "leases_renewed",
        }
        out = {v: 0.0 for v in want.values()}
        out["keepalive_msgs"] = 0.0
        out["grpc_calls"] = 0.0
        for line in body.splitlines():
            if line.startswith("#") or not line:
                continue
            name = line.split("{")[0].split(" ")[0]
            val = float(line.rsplit(" ", 1)[1])
            if name in want:
                out[want[name]] += val
            elif name == "grpc_server_msg_received_total":
                if 'grpc_method="LeaseKeepAlive"' in line:
                    out["keepalive_msgs"] += val
                out["grpc_calls"] += val
        return out

    def watch_loop(self):
        """Times every put and delete under dir/servers/ as etcd's own
        namespace sees it (the moment of each membership change)."""
        key = (PREFIX + "dir/servers/").encode()
        end = key[:-1] + bytes([key[-1] + 1])
        body = json.dumps(
            {
                "create_request": {
                    "key": base64.b64encode(key).decode(),
                    "range_end": base64.b64encode(end).decode(),
                }
            }
        )
        while not self.stop.is_set():
            try:
                c = NsHTTP(ETCD_REGION, ETCD_PORT, timeout=None)
                c.request(
                    "POST",
                    "/v3/watch",
                    body=body,
                    headers={"Content-Type": "application/json"},
                )
                r = c.getresponse()
                dec = json.JSONDecoder()
                buf = ""
                while not self.stop.is_set():
                    chunk = r.read1(65536)
                    if not chunk:
                        break
                    t = now()
                    buf += chunk.decode()
                    while True:
                        buf = buf.lstrip()
                        if not buf:
                            break
                        try:
                            obj, n = dec.raw_decode(buf)
                        except ValueError:
                            break
                        buf = buf[n:]
                        for ev in obj.get("result", {}).get("events", []) or []:
                            k = base64.b64decode(ev["kv"]["key"]).decode()
                            name = k.rsplit("/", 1)[-1]
                            typ = "delete" if ev.get("type") == "DELETE" else "put"
                            with self.lock:
                                self.watch_events.append((t, name, typ))
            except (OSError, http.client.HTTPException, ValueError) as e:
                log("etcd watch: %s; again" % e)
                time.sleep(0.2)

    # -- routers' views --

    def poll_loop(self, router):
        """Polls router's /remotes; records when a server enters or leaves
        its table (the time the answer arrived: an upper bound, within one
        poll interval)."""
        held = None
        conn = None
        iv = self.a.poll_ms / 1000.0
        while not self.stop.is_set() and router["alive"]:
            try:
                if conn is None:
                    conn = NsHTTP(router["region"], router["mport"], timeout=2)
                conn.request("GET", "/remotes")
                resp = conn.getresponse()
                body = resp.read().decode()
                t = now()
            except (OSError, http.client.HTTPException):
                if conn:
                    conn.close()
                conn = None
                time.sleep(iv)
                continue
            names = set()
            for line in body.splitlines()[1:]:
                f = line.split()
                if len(f) >= 3:  # name region up|down [latency]
                    names.add(f[0])
            if held is not None:
                with self.lock:
                    for n in names - held:
                        self.router_events.append((t, router["name"], n, "+"))
                    for n in held - names:
                        self.router_events.append((t, router["name"], n, "-"))
            held = names
            router["held"] = names
            time.sleep(iv if self.fast.is_set() else 0.25)
        if conn:
            conn.close()

    def start_pollers(self):
        for r in self.routers():
            threading.Thread(target=self.poll_loop, args=(r,), daemon=True).start()

    def all_routers_hold(self, names, present=True):
        for r in self.routers():
            h = r.get("held")
            if h is None:
                return False
            for n in names:
                if (n in h) != present:
                    return False
        return True

    def convergence(self, names, kind, since, t_limit=15.0):
        """Per change (name's first put/delete after since), each live
        router's delay from the etcd event to its table holding (kind
        "put") or dropping ("delete") the server."""
        samples, per_change, missing, etcd_t = [], [], 0, {}
        by_region = {}
        with self.lock:
            wev = list(self.watch_events)
            rev = list(self.router_events)
        for n in names:
            t0 = next(
                (t for t, nm, ty in wev if nm == n and ty == kind and t >= since),
                None,
            )
            if t0 is None:
                missing += 1
                continue
            etcd_t[n] = t0
            sign = "+" if kind == "put" else "-"
            worst = 0.0
            for r in self.routers():
                t1 = next(
                    (
                        t
                        for t, rt, nm, sg in rev
                        if rt == r["name"]
                        and nm == n
                        and sg == sign
                        and t >= t0 - 0.5
                        and t <= t0 + t_limit
                    ),
                    None,
                )
                if t1 is None:
                    missing += 1
                    continue
                d = max(0.0, t1 - t0)
                samples.append(d)
                by_region.setdefault(r["region"], []).append(d)
                worst = max(worst, d)
            per_change.append(worst)
        return {
            "samples": len(samples),
            "p50_ms": pct(samples, 50),
            "p99_ms": pct(samples, 99),
            "max_ms": max(samples) * 1000 if samples else None,
            "all_routers_p50_ms": pct(per_change, 50),
            "all_routers_max_ms": max(per_change) * 1000 if per_change else None,
            "missing": missing,
            "by_router_region_p50_ms": {k: pct(v, 50) for k, v in by_region.items()},
            "etcd_t": etcd_t,
        }

    # -- load --

    def start_bench(self, tag, router, set_names, rate, secs):
        skis = []
        for s in set_names:
            skis += self.sets[s]["skis"]
        f = os.path.join(self.work, "bench", tag + ".skis")
        with open(f, "w") as fh:
            fh.write("\n".join(skis) + "\n")
        out = os.path.join(self.work, "bench", tag + ".json")
        argv = [
            "ip",
            "netns",
            "exec",
            ns_name(router["region"]),
            self.build + "/keyless-bench",
            "-server",
            "127.0.0.1:%d" % router["port"],
            "-ski-file",
            f,
            "-rate",
            str(rate),
            "-connections",
            "2",
            "-duration",
            "%ds" % secs,
            "-timeout",
            "5s",
            "-json",
            "-cert",
            self.pki + "/client.crt",
            "-key",
            self.pki + "/client.key",
            "-ca",
            self.pki + "/ca.crt",
        ]
        fh = open(out, "wb")
        errf = open(os.path.join(self.work, "logs", "bench-" + tag + ".log"), "ab")
        p = subprocess.Popen(
            argv, stdout=fh, stderr=errf, stdin=subprocess.DEVNULL,
            preexec_fn=_child_setup,
        )
        fh.close()
        errf.close()
        self.procs.append(p)
        return {"tag": tag, "proc": p, "out": out, "router": router["name"]}

    def workload(self, secs, hot_rate=0):
        """Per region: local keys through its first egress, keys of the
        other regions through its second (or the first)."""
        b = []
        for r in REGIONS:
            rs = [x for x in self.routers() if x["region"] == r]
            if not rs:
                continue
            b.append(self.start_bench("%s-local" % r, rs[0], ["web." + r],
                                      self.a.local_rate, secs))
            others = ["web." + o for o in REGIONS if o != r]
            b.append(self.start_bench("%s-remote" % r, rs[-1], others,
                                      self.a.remote_rate, secs))
        if hot_rate:
            rs = [x for x in self.routers() if x["region"] == HOT_CLIENTS]
            b.append(self.start_bench("hot", rs[0], ["hot"], hot_rate, secs))
        return b

    def finish(self, benches):
        res = {}
        for b in benches:
            b["proc"].wait()
            try:
                with open(b["out"]) as fh:
                    j = json.load(fh)
                res[b["tag"]] = {
                    "ok": j.get("operations", 0),
                    "errors": j.get("errors", 0),
                    "detail": j.get("error_detail"),
                    "p50_ms": j["latency_us"]["p50"] / 1000.0,
                    "p99_ms": j["latency_us"]["p99"] / 1000.0,
                    "max_ms": j["latency_us"]["max"] / 1000.0,
                }
            except (OSError, ValueError, KeyError) as e:
                res[b["tag"]] = {"ok": 0, "errors": None, "failed": str(e),
                                 "rc": b["proc"].returncode}
        return res

    # -- per process --

    def proc_stats(self, srv):
        pid = srv["proc"].pid
        fds = 0
        inodes = set()
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                fds += 1
                try:
                    t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if t.startswith("socket:["):
                    inodes.add(t[8:-1])
            rss = 0
            with open("/proc/%d/status" % pid) as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
            with open("/proc/%d/stat" % pid) as fh:
                f = fh.read().rsplit(")", 1)[1].split()
                cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
            est_in = est_out = 0
            with open("/proc/%d/net/tcp" % pid) as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if f[3] != "01" or f[9] not in inodes:
                        continue
                    lport = int(f[1].split(":")[1], 16)
                    if lport == srv["port"]:
                        est_in += 1
                    else:
                        est_out += 1
        except OSError:
            return None
        return {"fds": fds, "conns_in": est_in, "conns_out": est_out,
                "rss_kb": rss, "cpu_s": cpu}

    def cpu(self):
        """(CPU seconds of the simulation's processes and the driver,
        CPU seconds of the whole machine, wall time)."""
        hz = os.sysconf("SC_CLK_TCK")
        mine = sum(os.times()[:2])
        by = {"driver": mine}
        roles = {s["proc"].pid: s["role"] for s in self.servers.values()}
        for p in self.procs:
            try:
                with open("/proc/%d/stat" % p.pid) as fh:
                    f = fh.read().rsplit(")", 1)[1].split()
                c = (int(f[11]) + int(f[12])) / hz
            except (OSError, IndexError):
                continue
            mine += c
            argv = p.args[4:] if p.args[0] == "ip" else p.args
            k = os.path.basename(argv[0])
            if p.pid in roles:
                k += "-" + roles[p.pid]
            by[k] = by.get(k, 0.0) + c
        self.cpu_by = by
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
        busy = (sum(f[:8]) - f[3] - f[4]) / hz
        return mine, busy, now()

    def fleet_stats(self):
        out = {}
        for kind, lst in (("keys", self.key_servers()), ("egress", self.routers())):
            st = [x for x in (self.proc_stats(s) for s in lst) if x]
            if not st:
                continue
            d = {}
            for k in ("fds", "conns_in", "conns_out", "rss_kb"):
                v = sorted(x[k] for x in st)
                d[k] = {"median": statistics.median(v), "max": v[-1]}
            d["n"] = len(st)
            d["cpu_s"] = sum(x["cpu_s"] for x in st)
            out[kind] = d
        return out


def pct(v, p):
    if not v:
        return None
    v = sorted(v)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k] * 1000.0


# ---- scenarios ------------------------------------------------------------


def sc_steady(sim, secs):
    log("steady state: %d s under load" % secs)
    b = sim.workload(secs)
    start = now()
    time.sleep(3)
    m0, t0 = sim.etcd_metrics(), now()
    time.sleep(max(0, (secs - 6) / 2))
    fs = sim.fleet_stats()
    time.sleep(max(0, start + secs - 2 - now()))
    m1, t1 = sim.etcd_metrics(), now()
    res = sim.finish(b)
    n = len(sim.key_servers()) + len(sim.routers())
    rates = {k: (m1[k] - m0[k]) / (t1 - t0) for k in m0}
    return {
        "bench": res,
        "fleet": fs,
        "etcd_per_s": rates,
        "etcd_per_server_per_s": {k: v / n for k, v in rates.items()},
        "servers": n,
        "window_s": t1 - t0,
    }


def sc_joins(sim, n, gap):
    log("joins: %d servers, one every %.1f s" % (n, gap))
    secs = int(n * gap + 8)
    b = sim.workload(secs)
    time.sleep(2)
    since = now()
    names = []
    for i in range(n):
        r = REGIONS[i % len(REGIONS)]
        name = "%s-j%d" % (r, i)
        sim.start_server(name, r, "keys", ["web." + r])
        names.append(name)
        time.sleep(gap)
    sim.wait_for(lambda: sim.all_routers_hold(names), 20, "joins in every table")
    res = sim.finish(b)
    return {"bench": res, "convergence": sim.convergence(names, "put", since),
            "joined": names}


def sc_expiry(sim, names, gap):
    log("lease expiry: SIGKILL %d servers, one every %.1f s" % (len(names), gap))
    secs = int(len(names) * gap + sim.a.ttl + 8)
    b = sim.workload(secs)
    time.sleep(2)
    since = now()
    kills = {}
    for n in names:
        sim.kill(sim.servers[n])
        kills[n] = now()
        time.sleep(gap)
    sim.wait_for(lambda: sim.all_routers_hold(names, False), sim.a.ttl + 20,
                 "expired servers out of every table")
    res = sim.finish(b)
    conv = sim.convergence(names, "delete", since, t_limit=sim.a.ttl + 10)
    expiry = [conv["etcd_t"][n] - kills[n] for n in names if n in conv["etcd_t"]]
    return {"bench": res, "convergence": conv,
            "kill_to_delete_s": {"min": min(expiry) if expiry else None,
                                 "max": max(expiry) if expiry else None,
                                 "each": expiry}}


def sc_dc_replace(sim, region, sig=signal.SIGKILL, tag="r", drain_first=0.0):
    olds = [s for s in sim.key_servers() if s["region"] == region]
    log("DC replaced under load: %d servers of %s, the old ones by %s" % (
        len(olds), region, signal.Signals(sig).name))
    secs = int(sim.a.ttl + 25)
    b = sim.workload(secs)
    time.sleep(2)
    since = now()
    news = []
    for i, o in enumerate(olds):
        news.append(sim.start_server("%s-%s%d" % (region, tag, i), region,
                                     "keys", o["sets"])["name"])
    sim.wait_for(lambda: sim.all_routers_hold(news), 20, "new DC in every table")
    if drain_first:
        # what a drain that waits for the routers would do: the records say
        # draining first, the servers go drain_first seconds later
        for o in olds:
            sim.mark_draining(o["name"])
        time.sleep(drain_first)
    t_kill = now()
    for o in olds:
        o["proc"].send_signal(sig)
    for o in olds:
        try:
            o["proc"].wait(timeout=30)
        except subprocess.TimeoutExpired:
            log("%s: no exit 30 s after %s; SIGKILL" % (o["name"], sig))
            o["proc"].kill()
            o["proc"].wait()
        o["alive"] = False
    oldn = [o["name"] for o in olds]
    sim.wait_for(lambda: sim.all_routers_hold(oldn, False), sim.a.ttl + 20,
                 "old DC out of every table")
    res = sim.finish(b)
    return {
        "bench": res,
        "join_convergence": sim.convergence(news, "put", since),
        "expiry_convergence": sim.convergence(oldn, "delete", t_kill,
                                              t_limit=sim.a.ttl + 10),
    }


def sc_hot(sim, secs, rate):
    log("hot zone pinned to %s, %d/s from %s, %d s" % (HOT_REGION, rate,
                                                    HOT_CLIENTS, secs))
    b = sim.workload(secs, hot_rate=rate)
    time.sleep(secs * 0.6)
    hot = [s for s in sim.key_servers() if "hot" in s["sets"]]
    hs = [sim.proc_stats(s) for s in hot]
    fs = sim.fleet_stats()
    res = sim.finish(b)
    return {"bench": res, "hot_servers": hs, "fleet": fs}


def sc_region_lost(sim, region):
    victims = [s for s in sim.key_servers() if s["region"] == region]
    log("region lost: SIGKILL all %d key servers of %s" % (len(victims), region))
    secs = int(sim.a.ttl + 20)
    b = sim.workload(secs)
    time.sleep(3)
    t_kill = now()
    for v in victims:
        v["proc"].kill()
    for v in victims:
        v["proc"].wait()
        v["alive"] = False
    names = [v["name"] for v in victims]
    sim.wait_for(lambda: sim.all_routers_hold(names, False), sim.a.ttl + 20,
                 "lost region out of every table")
    res = sim.finish(b)
    return {"bench": res,
            "convergence": sim.convergence(names, "delete", t_kill,
                                           t_limit=sim.a.ttl + 10)}


# ---- report ---------------------------------------------------------------


def fmt(v, d=0):
    if v is None:
        return "-"
    return ("%." + str(d) + "f") % v


def bench_line(res):
    ok = sum(v.get("ok", 0) or 0 for v in res.values())
    err = sum(v.get("errors") or 0 for v in res.values())
    remote = [v["p99_ms"] for k, v in res.items() if k.endswith("-remote") and "p99_ms" in v]
    local = [v["p99_ms"] for k, v in res.items() if k.endswith("-local") and "p99_ms" in v]
    return ok, err, (max(remote) if remote else None), (max(local) if local else None)


def report(r):
    out = []
    out.append("| scenario | requests | failed | local p99 (worst region) ms | "
               "remote p99 (worst region) ms | convergence p50 / p99 / max ms "
               "(samples) | CPU: simulation / machine (cores) |")
    out.append("|---|---|---|---|---|---|---|")
    for name, s in r["scenarios"].items():
        ok, err, rp, lp = bench_line(s["bench"])
        convs = [(k, v) for k, v in s.items() if k.endswith("convergence")]
        cs = "; ".join(
            "%s%s / %s / %s (%d)" % (
                (k.replace("_convergence", "") + ": ") if k != "convergence" else "",
                fmt(v["p50_ms"]), fmt(v["p99_ms"]), fmt(v["max_ms"]), v["samples"])
            + (" missing %d" % v["missing"] if v["missing"] else "")
            for k, v in convs) or "-"
        c = s.get("cpu", {})
        out.append("| %s | %d | %d | %s | %s | %s | %s / %s |" % (
            name, ok + err, err, fmt(lp, 1), fmt(rp, 1), cs,
            fmt(c.get("sim_cores"), 2), fmt(c.get("machine_busy_cores"), 2)))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--src", default=".")
    ap.add_argument("--work", default="/dev/shm/kls-fleet-sim")
    ap.add_argument("--out", default=None, help="results JSON")
    ap.add_argument("--keys-per-region", type=int, default=8)
    ap.add_argument("--egress-per-region", type=int, default=2)
    ap.add_argument("--keys-per-set", type=int, default=4)
    ap.add_argument("--ttl", type=int, default=10, help="fleet_lease_ttl")
    ap.add_argument("--max-connections", type=int, default=1000)
    ap.add_argument("--local-rate", type=int, default=60)
    ap.add_argument("--remote-rate", type=int, default=30)
    ap.add_argument("--hot-rate", type=int, default=300)
    ap.add_argument("--steady", type=int, default=30, help="seconds")
    ap.add_argument("--joins", type=int, default=10)
    ap.add_argument("--join-gap", type=float, default=1.5)
    ap.add_argument("--kill-gap", type=float, default=1.0)
    ap.add_argument("--poll-ms", type=int, default=20)
    ap.add_argument("--only",
                    default="steady,joins,expiry,dc,dcterm,dcdrain,hot,region")
    ap.add_argument("--egress-flags", default="",
                    help="more keylessd flags for the egress, space-separated")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fleetsim: needs root (network namespaces)")
    sim = Sim(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    results = {"config": vars(a), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                         time.gmtime()),
               "scenarios": {}}
    try:
        sim.setup()
        log("starting %d key servers and %d egress in %d regions" % (
            a.keys_per_region * len(REGIONS), a.egress_per_region * len(REGIONS),
            len(REGIONS)))
        t0 = now()
        for r in REGIONS:
            for i in range(a.keys_per_region):
                sim.start_server("%s-k%d" % (r, i), r, "keys", sim.sets_for(r, i))
        for r in REGIONS:
            for i in range(a.egress_per_region):
                sim.start_server("%s-eg%d" % (r, i), r, "egress", [])
        sim.start_pollers()
        names = [s["name"] for s in sim.key_servers()]
        sim.wait_for(lambda: sim.all_routers_hold(names), 120,
                     "every key server in every router's table")
        results["start_s"] = now() - t0
        log("fleet up in %.1f s: %d keylessd, %d processes" % (
            results["start_s"], len(sim.key_servers()) + len(sim.routers()),
            len(sim.procs)))
        time.sleep(3)  # connections opened and probed
        only = a.only.split(",")
        sc = results["scenarios"]

        def run(name, fast, fn, *args):
            # the CPU the simulation used, and the machine's (shared with
            # other builds), while the scenario ran
            if fast:
                sim.fast.set()
                time.sleep(0.3)
            c0 = sim.cpu()
            by0 = dict(sim.cpu_by)
            sc[name] = fn(sim, *args)
            c1 = sim.cpu()
            by1 = sim.cpu_by
            sim.fast.clear()
            wall = c1[2] - c0[2]
            sc[name]["cpu"] = {
                "sim_cores": (c1[0] - c0[0]) / wall,
                "machine_busy_cores": (c1[1] - c0[1]) / wall,
                "loadavg": open("/proc/loadavg").read().split()[:3],
                "by_process_cores": {
                    k: round((v - by0.get(k, 0.0)) / wall, 3)
                    for k, v in by1.items()},
            }
            log("%s: the simulation used %.2f cores, the machine %.2f" % (
                name, sc[name]["cpu"]["sim_cores"],
                sc[name]["cpu"]["machine_busy_cores"]))

        if "steady" in only:
            run("steady", False, sc_steady, a.steady)
        joined = []
        if "joins" in only:
            run("joins", True, sc_joins, a.joins, a.join_gap)
            joined = sc["joins"]["joined"]
        if "expiry" in only and joined:
            run("expiry", True, sc_expiry, joined, a.kill_gap)
        if "dc" in only:
            run("dc_replaced", True, sc_dc_replace, "sfo")
        if "dcterm" in only:
            run("dc_replaced_sigterm", True, sc_dc_replace, "fra",
                signal.SIGTERM, "t")
        if "dcdrain" in only:
            run("dc_replaced_drain_first", True, sc_dc_replace, "sin",
                signal.SIGTERM, "d", 1.0)
        if "hot" in only:
            run("hot_zone", False, sc_hot, 20, a.hot_rate)
        if "region" in only:
            run("region_lost", True, sc_region_lost, HOT_REGION)
    finally:
        sim.cleanup()
    for s in results["scenarios"].values():
        for k, v in list(s.items()):
            if isinstance(v, dict) and "etcd_t" in v:
                del v["etcd_t"]
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    print(report(results))
    st = results["scenarios"].get("steady")
    if st:
        e = st["etcd_per_server_per_s"]
        print("\nsteady state, per server per second: %.3f raft proposals "
              "(writes), %.3f puts, %.3f keepalive messages (not writes), "
              "%.3f ranges" % (e["proposals"], e["puts"], e["keepalive_msgs"],
                               e["ranges"]))
        for kind, d in st["fleet"].items():
            print("%s (%d): fds median %s max %s; connections in median %s "
                  "max %s, out median %s max %s; RSS median %d KB" % (
                      kind, d["n"], d["fds"]["median"], d["fds"]["max"],
                      d["conns_in"]["median"], d["conns_in"]["max"],
                      d["conns_out"]["median"], d["conns_out"]["max"],
                      d["rss_kb"]["median"]))


if __name__ == "__main__":
    main()
