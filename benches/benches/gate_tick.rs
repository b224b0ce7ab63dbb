//! One wave-judge tick over 10,000 servers (goal: under 10 ms).
//!
//! `cargo bench -p kura-benches --bench gate_tick`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use kura_gate::wave::steady_server;
use kura_gate::{Gate, GateConfig, HealthView, TickInput};

const SERVERS: usize = 10_000;
const WAVES: u32 = 10;

fn input(now: Timestamp, adjust: impl Fn(usize, &mut HealthView)) -> TickInput {
    let config = GateConfig::default();
    let captured = now - SignedDuration::from_secs(3_000);
    let servers = (0..SERVERS)
        .map(|i| {
            let mut baseline = HealthView::healthy(captured - SignedDuration::from_secs(5), 3);
            baseline.outbox_messages = Some(1_000);
            baseline.fd_timeout_count = Some(90);
            baseline.peer_connection_failures = Some(40);
            let wave = u32::try_from(i).unwrap_or(u32::MAX) % WAVES;
            let mut server = steady_server(
                &format!("acme-{i:05}/eu-west"),
                wave,
                baseline,
                captured,
                &config,
            );
            if let Some(health) = server.health.as_mut() {
                health.sampled_at = Some(now - SignedDuration::from_secs(20));
                adjust(i, health);
            }
            server
        })
        .collect();
    TickInput {
        now,
        wave: WAVES - 1,
        wave_started_at: now - SignedDuration::from_secs(120),
        attempt: 0,
        servers,
    }
}

fn bench(c: &mut Criterion) {
    let now: Timestamp = "2026-07-21T10:00:00Z".parse().expect("valid time");
    let mut group = c.benchmark_group("gate_tick_10k");

    let healthy = input(now, |_, _| {});
    let mut gate = Gate::new(GateConfig::default()).expect("default config is valid");
    group.bench_function("healthy_soaking", |b| {
        b.iter(|| gate.tick(black_box(&healthy)).expect("valid tick"))
    });

    // Every server reset its fd counter: 10,000 lowered baselines in state.
    let reset = input(now, |_, h| h.fd_timeout_count = Some(3));
    let mut gate = Gate::new(GateConfig::default()).expect("default config is valid");
    group.bench_function("all_counters_reset", |b| {
        b.iter(|| gate.tick(black_box(&reset)).expect("valid tick"))
    });

    // Every tenth server regressed: the wave holds with capped evidence.
    let sick = input(now, |i, h| {
        if i % 10 == 0 {
            h.outbox_messages = Some(5_000);
        }
    });
    let mut gate = Gate::new(GateConfig::default()).expect("default config is valid");
    group.bench_function("one_in_ten_regressed", |b| {
        b.iter(|| gate.tick(black_box(&sick)).expect("valid tick"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
