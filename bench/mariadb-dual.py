#!/usr/bin/env python3
"""Scenario 6, MariaDB 10.11 with the perceptron_dual plugin.

Cold contenders, alternated run by run (each on its own data directory):
  cold-dual    relay (auth = "dual"), instance paused: greet, classify, spawn mariadbd with the
               plugin (process driver), answer the plugin's challenge with the relayed-auth
               payload, OK.
  cold-switch  relay (auth = "switch") in front of a plain mariadbd: the same, with the client
               switched once to the server's own challenge.
  mariadbd     mariadbd with the plugin alone on the dual data directory (while paused):
               fork/exec → its port greets.
Warm contenders, alternated, straight to the running dual compute (no relay):
  warm-plugin  login of an account IDENTIFIED VIA perceptron_dual (one extra round trip: the
               plugin's challenge).
  warm-native  login of a mysql_native_password account on the same server.

Usage: mariadb-dual.py [N_COLD] [N_WARM]   (default 20 and 300; 2 warm-up rounds each)
Writes bench/results/mariadb-dual.{txt,json}.
"""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N_COLD = int(sys.argv[1]) if len(sys.argv) > 1 else 20
N_WARM = int(sys.argv[2]) if len(sys.argv) > 2 else 300
WARMUP = 2
USER, PASSWORD = b"bench", b"bench-pw"


def install(tmp, name):
    datadir = os.path.join(tmp, name)
    subprocess.run(["mariadb-install-db", "--no-defaults", "--datadir=" + datadir, "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True)
    return datadir


def mariadbd_cmd(datadir, port, plugin_dir=None, key=None):
    cmd = ["/usr/sbin/mariadbd", "--no-defaults", "--user=root", "--datadir=" + datadir,
           "--socket=" + os.path.join(datadir, "mysqld.sock"), "--port=%d" % port,
           "--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin",
           "--innodb-buffer-pool-size=32M"]
    if plugin_dir:
        cmd += ["--plugin-dir=" + plugin_dir, "--plugin-load-add=perceptron_dual.so",
                "--loose-perceptron-dual-key-file=" + key]
    return cmd


def driver(cmd):
    return ('[instance.driver]\nkind = "process"\ncommand = [%s]\nstop_grace = "30s"\n'
            % ", ".join(json.dumps(a) for a in cmd))


def resume(relay):
    relay.admin("POST", "/v1/instances/demo/resume")
    relay.wait_state("running")


def main():
    tmp = h.tmpdir("maria-dual")
    plugins = os.path.join(tmp, "plugins")
    os.makedirs(plugins)
    shutil.copy(os.path.join(h.BIN, "libperceptron_dual.so"),
                os.path.join(plugins, "perceptron_dual.so"))
    dual_data, switch_data = install(tmp, "dual"), install(tmp, "switch")
    dual_port, switch_port = h.free_port(), h.free_port()
    dual = h.Relay("maria-dual-relay", compute_port=dual_port, auth="dual",
                   driver=driver(mariadbd_cmd(dual_data, dual_port, plugins,
                                              "{DIR}/perceptron.key")))
    switch = h.Relay("maria-switch-relay", compute_port=switch_port, auth="switch",
                     driver=driver(mariadbd_cmd(switch_data, switch_port)))
    cold = {"cold-dual": [], "cold-switch": [], "mariadbd": []}
    warm = {"warm-plugin": [], "warm-native": []}
    try:
        # root (native, empty password) sets up on the direct route.
        for relay, via in ((dual, "perceptron_dual"), (switch, "mysql_native_password")):
            resume(relay)
            _, c = m.login("127.0.0.1", relay.port, b"root", b"")
            c.query(("CREATE USER bench@'%%' IDENTIFIED VIA %s USING PASSWORD('%s')"
                     % (via, PASSWORD.decode())).encode())
            c.query(b"CREATE USER nat@'%' IDENTIFIED VIA mysql_native_password "
                    b"USING PASSWORD('bench-pw')")
            c.close()
        for i in range(N_COLD + WARMUP):
            order = ["cold-dual", "cold-switch", "mariadbd"]
            order = order[i % 3:] + order[:i % 3]
            for contender in order:
                if contender == "mariadbd":
                    dual.pause()
                    port = h.free_port()
                    t0 = time.perf_counter()
                    p = h.start(mariadbd_cmd(dual_data, port, plugins, dual.key),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    dt = m.wait_greeting("127.0.0.1", port, time.perf_counter() + 60) - t0
                    h.stop(p, grace=30)
                else:
                    relay = dual if contender == "cold-dual" else switch
                    relay.pause()
                    dt, c = m.login("127.0.0.1", relay.port, USER, PASSWORD)
                    c.close()
                if i >= WARMUP:
                    cold[contender].append(dt * 1000)
        resume(dual)
        for i in range(N_WARM + WARMUP):
            for contender in (["warm-plugin", "warm-native"] if i % 2 else
                              ["warm-native", "warm-plugin"]):
                user = USER if contender == "warm-plugin" else b"nat"
                dt, c = m.login("127.0.0.1", dual_port, user, PASSWORD)
                c.close()
                if i >= WARMUP:
                    warm[contender].append(dt * 1000)
    finally:
        dual.stop()
        switch.stop()
        h.stop_all()
    version = subprocess.run(["/usr/sbin/mariadbd", "--version"], capture_output=True,
                             text=True).stdout.split()[2]
    lines = ["MariaDB %s with perceptron_dual (cold n=%d each, warm n=%d each; ms)"
             % (version, N_COLD, N_WARM), "machine: %s" % h.machine(), ""]
    for k, xs in list(cold.items()) + list(warm.items()):
        lines.append("%-12s %s" % (k, h.fmt(h.summary(xs), digits=3)))
    med = {k: h.summary(xs)["median"] for k, xs in list(cold.items()) + list(warm.items())}
    lines += ["",
              "cold-dual / cold-switch median ratio: %.2fx" % (med["cold-dual"] / med["cold-switch"]),
              "cold-dual / mariadbd start-up median ratio: %.2fx (the relay's share: %.1f ms)"
              % (med["cold-dual"] / med["mariadbd"], med["cold-dual"] - med["mariadbd"]),
              "warm-plugin / warm-native median ratio: %.2fx (+%.3f ms)"
              % (med["warm-plugin"] / med["warm-native"], med["warm-plugin"] - med["warm-native"])]
    text = "\n".join(lines)
    print(text)
    h.save("mariadb-dual", text, {**cold, **warm})


if __name__ == "__main__":
    main()
