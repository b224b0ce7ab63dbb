#!/usr/bin/env python3
"""Writes the exported-timeline fixtures of `kura-gate replay --agent-view`.

Each `published` verdict here is written by hand from contract/gate.md's
per-instance rules (absolute checks always, counter checks only for a
soak-eligible baseline, a fresh sample below the effective baseline lowers
it), not computed by the gate: the tests check that the gate's agent view
reproduces them. Run from this directory: python3 generate.py
"""
import json

NS, NAME = "kura", "acme"
ID = f"{NS}/{NAME}"


def t(minute, second=0):
    return f"2026-07-21T10:{minute:02d}:{second:02d}Z"


def health(minute, outbox=0, fd=90, peers=0, pressure=0, ready=True):
    return {
        "sampledAt": t(minute) if minute >= 0 else "2026-07-21T09:59:00Z",
        "expectedPods": 3, "sampledPods": 3, "ready": ready, "serving": True,
        "ringConsistent": True, "bootstrapInflightPeers": 0,
        "backfillDegraded": False, "backfillBudgetExhaustedPeers": 0,
        "outboxMessages": outbox, "fdTimeoutCount": fd,
        "peerConnectionFailures": peers, "memoryPressureState": pressure,
    }


BASELINE = {
    "capturedAt": "2026-07-21T09:59:30Z",
    "counters": {"outboxMessages": 100, "replicationLagEntries": None,
                 "fdTimeoutCount": 90, "peerConnectionFailures": 0},
    "soakEligible": True,
}


def timeline(samples, published, soak=300, baseline=BASELINE):
    ticks = []
    for i, (h, p) in enumerate(zip(samples, published)):
        verdict, signal = p
        ticks.append({
            "now": t(i), "wave": 0, "waveStartedAt": t(0), "attempt": 0,
            "servers": [{
                "id": ID, "wave": 0, "converged": True,
                "deployment": "succeeded", "status": "active",
                "baseline": baseline, "health": h,
                "published": {"verdict": verdict, "signal": signal},
            }],
        })
    return {
        # The drain window at 0: these timelines judge the outbox by its
        # band alone (the drain rule has fixtures of its own, testdata/gate).
        "config": {"soakSeconds": [soak], "backlogDrainWindowSeconds": 0},
        "instance": {"namespace": NS, "name": NAME,
                     "targetImage": "ghcr.io/tuist/kura:2",
                     "baselineImage": "ghcr.io/tuist/kura:1"},
        "window": {"from": "2026-07-21T09:59:30Z", "to": t(len(ticks) - 1),
                   "droppedTicks": 0, "complete": True},
        "ticks": ticks,
    }


HEALTHY = ("healthy", None)


def write(name, doc):
    with open(f"{name}.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


# Healthy from the first tick; the wave passes after 300 s (tick 5).
write("soaks", timeline([health(i) for i in range(7)], [HEALTHY] * 7))

# The outbox grows past its band (baseline 100: top max(110, 150) = 150)
# at ticks 2 and 3, then drains: held, then healthy again.
outbox = [100, 120, 400, 300, 140, 100, 100]
write("holds", timeline(
    [health(i, outbox=o) for i, o in enumerate(outbox)],
    [HEALTHY if o <= 150 else ("unhealthy", "outbox_regressed") for o in outbox]))

# Memory pressure reaches 2 at tick 2: a hard stop; at tick 3 it is back
# to 0 (the agent does not latch; the wave judge does).
pressure = [0, 0, 2, 0]
write("hard-stops", timeline(
    [health(i, pressure=p) for i, p in enumerate(pressure)],
    [HEALTHY if p < 2 else ("hard_stop", "memory_pressure_critical") for p in pressure]))

# fd timeouts: baseline 90, the process restarts at tick 1 (a fresh 3 is a
# reset: the effective baseline drops to 3), tick 2 sees 3 (healthy),
# tick 3 sees 4 (band 0 above the effective 3: regressed), tick 4 sees 80:
# still regressed though below the captured 90.
fds = [90, 3, 3, 4, 80]
write("reset-in-window", timeline(
    [health(i, fd=f) for i, f in enumerate(fds)],
    [HEALTHY, HEALTHY, HEALTHY, ("unhealthy", "fd_timeouts_regressed"),
     ("unhealthy", "fd_timeouts_regressed")]))

# "holds" with tick 2's published verdict edited to healthy: the agent
# never published that, and the agent view must say so (exit 1).
doc = timeline(
    [health(i, outbox=o) for i, o in enumerate(outbox)],
    [HEALTHY if o <= 150 else ("unhealthy", "outbox_regressed") for o in outbox])
doc["ticks"][2]["servers"][0]["published"] = {"verdict": "healthy", "signal": None}
write("tampered", doc)
