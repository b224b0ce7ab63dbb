//! The gate's cost at 100 and 1,000 servers, split the way the bindings'
//! figures are (benches/PERFORMANCE.md, "The gate from Go and Elixir"):
//! native `Gate::tick` on a parsed input, the JSON work alone (reading the
//! tick document, writing the verdict) and the whole C ABI core call
//! (`GateHandle::tick` plus the verdict's JSON, what `kura_gate_tick` does
//! short of crossing the boundary).
//!
//! `cargo bench -p kura-benches --bench gate_ffi`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kura_benches::gate_docs::tick_document;
use kura_gate::{Gate, GateConfig, parse_tick_json};
use kura_gate_ffi::GateHandle;

fn bench(c: &mut Criterion) {
    for servers in [100, 1000] {
        let doc = tick_document(servers);
        let config = GateConfig::default();
        let input = parse_tick_json(&doc, &config).expect("valid tick");
        let mut group = c.benchmark_group(format!("gate_ffi_{servers}"));

        let mut gate = Gate::new(config.clone()).expect("valid config");
        group.bench_function("native_tick", |b| {
            b.iter(|| gate.tick(black_box(&input)).expect("valid tick"))
        });
        let verdict = gate.tick(&input).expect("valid tick");
        group.bench_function("json_read_tick", |b| {
            b.iter(|| parse_tick_json(black_box(&doc), &config).expect("valid tick"))
        });
        group.bench_function("json_write_verdict", |b| {
            b.iter(|| serde_json::to_vec(black_box(&verdict)).expect("serializable"))
        });
        let handle = GateHandle::new(b"{}").expect("valid config");
        group.bench_function("abi_core_tick", |b| {
            b.iter(|| {
                let verdict = handle.tick(black_box(doc.as_bytes())).expect("valid tick");
                serde_json::to_vec(&verdict).expect("serializable")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
