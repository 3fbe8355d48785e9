#!/usr/bin/env python3
"""The password-guessing bot: what a password guesser costs the instance's owner.

A bot guesses one wrong password at a time from one source for one compressed hour (SCALE 60:
the hour lasts 60 s, every duration in the relay's configuration is divided by 60: the
budgets' window and block 1 h -> 60 s, idle_pause_after 5 min -> 5 s; failed_wake_pause_after
10 s would be 0.17 s, below its 1 s minimum, so it is 1 s here, six times the scaled default).
Two bots:
- "every 4.8 s": a guess every 4.8 s (5 min / 60 less a little), whatever the instance does;
- "after each pause": a guess as soon as the instance is paused again, so every guess wakes.
Each runs against the defaults (failed_wakes_per_source = 3, failed_wake_pause_after) and
against the same build with both turned off (failed_wakes_per_source = 0,
failed_wake_pause_after = idle_pause_after: a wrong guess then buys a full idle period, as
before the fix). Reported: the share of the hour the compute ran (from the ledger: what the
owner is billed), wakes, and the codes the bot saw.

Usage: login-bot.py [SCALE]   Writes bench/results/login-bot.{txt,json}.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
HOUR = 3600.0 / SCALE


def secs(x):
    return "%gs" % max(1.0, round(x, 3))


def ledger_running(relay, t_start, t_end):
    """Seconds the compute was billed (resuming or running) between t_start and t_end."""
    events = h.ledger_events(relay)
    billed = 0.0
    for (t, state), (t_next, _) in zip(events, events[1:] + [(t_end, None)]):
        lo, hi = max(t, t_start), min(t_next, t_end)
        if hi > lo and state in ("resuming", "running"):
            billed += hi - lo
    return billed


def guess(relay):
    """One wrong password: the ERR code the bot ends with (1045 from the compute; the relay's
    1129 in place of the greeting or after the login)."""
    import re
    try:
        m.login("127.0.0.1", relay.port, h.USER, b"not-the-password", timeout=10)
        return "accepted?!"
    except m.LoginError as e:
        found = re.search(r"ERR (\d+)", str(e))
        if found:
            return found.group(1)
        found = re.search(r"refused the connection: b'\\xff(.)(.)", str(e))
        return "1129" if "blocked" in str(e) else (found and "pre-greeting ERR") or str(e)[:40]
    except OSError as e:
        return type(e).__name__


def run(bot, fixed):
    budgets = ("window = \"%s\"\nblock_for = \"%s\"\n" % (secs(HOUR), secs(HOUR)))
    extra = "" if fixed else "failed_wakes_per_source = 0\n"
    idle = 300.0 / SCALE
    relay = h.Relay("bot", idle_pause_after=secs(idle),
                    relay_toml="[relay.budgets]\n" + budgets + extra,
                    instance_toml='failed_wake_pause_after = "%s"\n'
                    % (secs(10.0 / SCALE) if fixed else secs(idle)))
    codes = {}
    t0 = time.time()
    try:
        while time.time() - t0 < HOUR:
            c = guess(relay)
            codes[c] = codes.get(c, 0) + 1
            if bot == "every 4.8 s":
                time.sleep(max(0.0, 288.0 / SCALE - 0.01))
            else:
                deadline = time.time() + HOUR
                while relay.state() != "paused" and time.time() < deadline:
                    time.sleep(0.02)
                time.sleep(0.05)
        t1 = time.time()
        billed = ledger_running(relay, t0, t1)
        wakes = relay.metric('relay_wakes_total{instance="demo",outcome="ok"}')
    finally:
        relay.stop()
    return {"bot": bot, "fixed": fixed, "billed_share": billed / (t1 - t0),
            "billed_s": billed, "hour_s": t1 - t0, "wakes": wakes, "codes": codes}


def main():
    rows = [run(bot, fixed) for bot in ("every 4.8 s", "after each pause")
            for fixed in (False, True)]
    lines = ["# password-guessing bot, one compressed hour (SCALE %g: %g s)" % (SCALE, HOUR),
             "machine: %s" % h.machine(), "",
             "%-18s %-28s %8s %7s  %s" % ("bot", "relay", "billed", "wakes", "codes seen")]
    for r in rows:
        relay = ("defaults" if r["fixed"] else
                 "failed-wake knobs off")
        lines.append("%-18s %-28s %7.1f%% %7d  %s" % (
            r["bot"], relay, 100 * r["billed_share"], r["wakes"],
            ", ".join("%s x %d" % kv for kv in sorted(r["codes"].items()))))
    text = "\n".join(lines) + "\n"
    print(text)
    h.save("login-bot", text, rows)


if __name__ == "__main__":
    main()
