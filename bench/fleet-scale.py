"""bench/fleet-scale: see the shell wrapper. One etcd, started and stopped here by its pid."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELAY = os.path.join(os.environ.get("PERCEPTRON_BIN", os.path.join(ROOT, "target/release")), "relay")
RESULTS = os.path.join(ROOT, "bench/results")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcdctl(endpoint, *args):
    out = subprocess.run(["etcdctl", f"--endpoints={endpoint}", *args], env={**os.environ, "ETCDCTL_API": "3"},
                         capture_output=True, text=True, timeout=20)
    return out.stdout if out.returncode == 0 else None


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def db_mib(endpoint):
    out = etcdctl(endpoint, "endpoint", "status", "-w", "json")
    try:
        return json.loads(out)[0]["Status"]["dbSize"] / 1048576
    except (TypeError, ValueError, KeyError, IndexError):
        return None


def run_one(endpoint, etcd_pid, relays, instances, paused_for, seconds):
    before = rss_mib(etcd_pid)
    prefix = f"/perceptron-simulation-{instances}-{os.getpid()}"
    sim = subprocess.Popen([RELAY, "fleet-simulation", "--endpoints", endpoint, "--relays", str(relays),
                            "--instances", str(instances), "--paused-for", f"{paused_for}s", "--duration", f"{seconds}s",
                            "--prefix", prefix, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_rss, cpu0 = before, etcd_cpu(etcd_pid)
    started = time.time()
    while sim.poll() is None:
        peak_rss = max(peak_rss, rss_mib(etcd_pid))
        time.sleep(0.5)
    out, err = sim.communicate()
    if sim.returncode != 0:
        raise SystemExit(f"fleet-simulation failed: {err.strip()}")
    report = json.loads(out)
    report["paused_for_s"] = paused_for
    report["etcd_rss_mib_peak"] = round(peak_rss, 1)
    report["etcd_cpu_seconds"] = round(etcd_cpu(etcd_pid) - cpu0, 1)
    report["etcd_cpu_share"] = round(report["etcd_cpu_seconds"] / (time.time() - started), 2)
    report["etcd_db_mib"] = db_mib(endpoint)
    return report


def etcd_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    # INSTANCES[:PAUSED_FOR_S]; by default 1,000 and 10,000 instances at the same fleet-wide
    # churn (each instance paused 20 s, resp. 200 s on average between wakes), then 10,000 at
    # ten times that churn.
    cases = [(int(a.split(":")[0]), int(a.split(":")[1]) if ":" in a else 20) for a in sys.argv[2:]] \
        or [(1000, 20), (10000, 200), (10000, 20)]
    relays = int(os.environ.get("FLEET_RELAYS", "3"))
    data = tempfile.mkdtemp(prefix="fleet-scale-")
    client, peer = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{client}"
    log = open(os.path.join(data, "etcd.log"), "w")
    etcd = subprocess.Popen(["etcd", "--name", "bench", "--data-dir", os.path.join(data, "etcd"),
                             "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"bench=http://127.0.0.1:{peer}", "--log-level", "error"],
                            stdout=subprocess.DEVNULL, stderr=log)
    results = []
    try:
        deadline = time.time() + 20
        while etcdctl(endpoint, "endpoint", "health") is None:
            if time.time() > deadline or etcd.poll() is not None:
                raise SystemExit("etcd did not become healthy")
            time.sleep(0.2)
        for n, paused_for in cases:
            r = run_one(endpoint, etcd.pid, relays, n, paused_for, seconds)
            results.append(r)
            print(json.dumps(r), flush=True)
    finally:
        etcd.terminate()
        try:
            etcd.wait(10)
        except subprocess.TimeoutExpired:
            etcd.kill()
            etcd.wait()
        shutil.rmtree(data, ignore_errors=True)
    lines = [f"fleet-scale: {relays} relays, {seconds} s of churn per size, etcd {etcd_version()} on loopback",
             "instances  paused s  wakes/s  pauses/s  requests/s  wake p50/p99 ms  pause p50/p99 ms  seen-by-others p50/p99 ms  etcd CPU  etcd RSS MiB  db MiB  errors"]
    for r in results:
        s = r["seconds"]
        lines.append(f"{r['instances']:>9}  {r['paused_for_s']:>8}  {r['wake_cycles'] / s:>7.1f}  {r['pauses'] / s:>8.1f}  {r['requests_per_second']:>10.0f}"
                     f"  {r['wake_ms'][0]:>7.1f}/{r['wake_ms'][1]:<7.1f}  {r['pause_ms'][0]:>7.1f}/{r['pause_ms'][1]:<8.1f}"
                     f"  {r['propagation_ms'][0]:>12.0f}/{r['propagation_ms'][1]:<12.0f}  {r['etcd_cpu_share']:>7.2f}"
                     f"  {r['etcd_rss_mib_peak']:>12.0f}  {r['etcd_db_mib'] or 0:>6.1f}  {r['errors']:>6}"
                     f"  starts {r['wakes_started']} for {r['wake_cycles']} wakes")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(RESULTS, "fleet-scale.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "fleet-scale.json"), "w") as f:
        json.dump(results, f, indent=1)


def etcd_version():
    out = subprocess.run(["etcd", "--version"], capture_output=True, text=True).stdout
    return out.split("\n")[0].split()[-1] if out else "?"


if __name__ == "__main__":
    main()
