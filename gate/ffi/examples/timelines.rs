//! Writes property-generated replay documents for the bindings' identity
//! tests: random fleets and timelines (waves, attempts, clock steps, every
//! kind of sick, stale, reset or failed server). Deterministic for a seed.
//!
//! `cargo run -p kura-gate-ffi --example timelines -- DIR COUNT SEED`
//!
//! The bindings' tests run each document through `kura-gate replay` and
//! through the binding, tick by tick, and compare the verdicts.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

/// splitmix64: small, deterministic, good enough to pick cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const EPOCH: i64 = 1_784_628_000;

fn time(seconds: i64) -> String {
    jiff::Timestamp::from_second(EPOCH + seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A healthy aggregate sampled at `sampled`, with the given counters.
fn healthy(sampled: i64, outbox: u64, fd: u64, peers: u64) -> Value {
    json!({
        "sampledAt": time(sampled), "expectedPods": 3, "sampledPods": 3,
        "ready": true, "serving": true, "ringConsistent": true,
        "bootstrapInflightPeers": 0, "backfillDegraded": false,
        "backfillBudgetExhaustedPeers": 0, "outboxMessages": outbox,
        "replicationLagEntries": outbox,
        "fdTimeoutCount": fd, "peerConnectionFailures": peers,
        "memoryPressureState": 0
    })
}

/// One server's aggregate this tick: mostly healthy, sometimes one of the
/// ways a server can fail a check.
fn look(rng: &mut Rng, now: i64, base: (u64, u64, u64)) -> Value {
    let (outbox, fd, peers) = base;
    let mut h = healthy(now - 5 - rng.below(30) as i64, outbox, fd, peers);
    let Value::Object(map) = &mut h else {
        return h;
    };
    match rng.below(40) {
        0 => return Value::Null,
        1 => {
            map.remove("sampledAt");
        }
        2 => {
            map.insert(
                "sampledAt".into(),
                time(now - 170 - rng.below(40) as i64).into(),
            );
        }
        3 => {
            map.insert(
                "sampledAt".into(),
                time(now + 50 + rng.below(30) as i64).into(),
            );
        }
        4 => {
            map.insert("sampledPods".into(), 2.into());
        }
        5 => {
            map.insert("ready".into(), false.into());
        }
        6 => {
            map.insert("serving".into(), false.into());
        }
        7 => {
            map.insert("ringConsistent".into(), false.into());
        }
        8 => {
            map.insert("bootstrapInflightPeers".into(), (1 + rng.below(3)).into());
        }
        9 => {
            map.insert("backfillDegraded".into(), true.into());
        }
        10 => {
            map.insert("backfillBudgetExhaustedPeers".into(), 1.into());
        }
        11 => {
            map.insert(
                "outboxMessages".into(),
                (outbox + 40 + rng.below(40)).into(),
            );
        }
        12 => {
            map.insert("fdTimeoutCount".into(), (fd + rng.below(3)).into());
        }
        13 => {
            map.insert(
                "fdTimeoutCount".into(),
                fd.saturating_sub(1 + rng.below(5)).into(),
            );
        }
        14 => {
            map.insert(
                "peerConnectionFailures".into(),
                (peers + 20 + rng.below(20)).into(),
            );
        }
        15 => {
            map.insert(
                "peerConnectionFailures".into(),
                peers.saturating_sub(5).into(),
            );
        }
        16 => {
            map.insert("memoryPressureState".into(), 2.into());
        }
        17 => {
            map.insert("memoryPressureState".into(), 1.into());
        }
        18 => {
            map.insert("outboxMessages".into(), Value::Null);
        }
        19 => {
            map.insert("ready".into(), Value::Null);
        }
        20 => {
            map.insert("backfillInitialCycle".into(), "pending".into());
        }
        21 => {
            map.insert("backfillInitialCycle".into(), "complete".into());
        }
        22 => {
            map.insert("backfillInitialCycle".into(), "not-a-cycle".into());
        }
        23 => {
            map.insert("backfillInitialCycle".into(), "degraded".into());
        }
        24 => {
            map.insert(
                "replicationLagEntries".into(),
                (outbox + 40 + rng.below(40)).into(),
            );
        }
        25 => {
            map.insert("replicationLagEntries".into(), Value::Null);
        }
        26 | 27 => {
            let phases = [
                "Fencing",
                "Serving",
                "Quiescing",
                "Revoking",
                "Preparing",
                "Rebalancing",
            ];
            let phase = phases[rng.below(phases.len() as u64) as usize];
            let writers = rng.below(2);
            map.insert(
                "servingAuthority".into(),
                json!({"enabledPods": 3, "validWriters": writers, "phase": phase,
                       "epoch": writers * (1 + rng.below(5))}),
            );
            if rng.chance(20) {
                map.insert("memoryPressureState".into(), 2.into());
            }
        }
        _ => {}
    }
    h
}

fn timeline(rng: &mut Rng) -> Value {
    let soaks = [json!([60, 30]), json!([0]), json!([120]), json!([900, 300])];
    let deadline = [300, 600, 3600][rng.below(3) as usize];
    let config = json!({
        "soakSeconds": soaks[rng.below(4) as usize].clone(),
        "waveDeadlineSeconds": deadline,
        "fdTimeoutBand": rng.below(3),
    });
    let servers = 1 + rng.below(8);
    let fleet: Vec<(String, u32, (u64, u64, u64))> = (0..servers)
        .map(|i| {
            (
                format!("srv-{i}"),
                rng.below(4) as u32,
                (100 + rng.below(900), 10 + rng.below(90), rng.below(300)),
            )
        })
        .collect();
    let mut now = 0i64;
    let mut wave = 0u32;
    let mut wave_started = 0i64;
    let mut attempt = rng.below(3) as u32;
    let mut converged_at: Vec<Option<i64>> = fleet.iter().map(|_| None).collect();
    let mut ticks = Vec::new();
    for _ in 0..(3 + rng.below(28)) {
        now += 5 + rng.below(240) as i64;
        if rng.chance(12) && wave < 4 {
            wave += 1;
            wave_started = now;
        }
        if rng.chance(6) {
            attempt += 1;
        }
        if rng.chance(3) {
            // Repeat the start time change without a wave change.
            wave_started = now;
        }
        let mut list = Vec::new();
        for (i, (id, server_wave, base)) in fleet.iter().enumerate() {
            if *server_wave <= wave && converged_at[i].is_none() && rng.chance(50) {
                converged_at[i] = Some(now);
            }
            let converged = converged_at[i].is_some() && !rng.chance(3);
            let deployment = match rng.below(60) {
                0 => Value::Null,
                1 => "failed".into(),
                2 => "cancelled".into(),
                3 => "pending".into(),
                _ if converged => "succeeded".into(),
                _ => "running".into(),
            };
            let status = match rng.below(80) {
                0 => "failed",
                1 => "destroyed",
                _ => "active",
            };
            let baseline = match rng.below(10) {
                0 => Value::Null,
                1 => json!({"capturedAt": time(-10), "health": Value::Null}),
                2 => {
                    let mut sick = healthy(-20, base.0, base.1, base.2);
                    sick["ready"] = false.into();
                    json!({"capturedAt": time(-10), "health": sick})
                }
                _ => {
                    json!({"capturedAt": time(-10), "health": healthy(-20, base.0, base.1, base.2)})
                }
            };
            list.push(json!({
                "id": id, "wave": server_wave, "converged": converged,
                "deployment": deployment, "status": status, "baseline": baseline,
                "health": look(rng, now, *base),
            }));
        }
        if rng.chance(50) {
            // Input order matters for evidence: shuffle it sometimes.
            let n = list.len();
            for i in (1..n).rev() {
                list.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        ticks.push(json!({
            "now": time(now), "wave": wave, "waveStartedAt": time(wave_started),
            "attempt": attempt, "servers": list,
        }));
    }
    json!({"config": config, "ticks": ticks})
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, count, seed] = args.as_slice() else {
        eprintln!("usage: timelines DIR COUNT SEED");
        return ExitCode::from(2);
    };
    let (Ok(count), Ok(seed)) = (count.parse::<usize>(), seed.parse::<u64>()) else {
        eprintln!("COUNT and SEED must be non-negative integers");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    let mut rng = Rng(seed);
    for i in 0..count {
        let doc = timeline(&mut rng);
        let path = dir.join(format!("timeline-{i:04}.json"));
        if let Err(e) = std::fs::write(&path, doc.to_string()) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    println!("{count} timelines in {} (seed {seed})", dir.display());
    ExitCode::SUCCESS
}
