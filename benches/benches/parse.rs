//! Report parsing per generation: `parse_report_limited` (what the poller
//! runs on every body) over the recorded fixtures of testdata/reports, one
//! per report generation, plus the largest G4 form (with
//! `serving_authority`). Throughput is reported in bytes per second; the
//! time per iteration is the cost of one report.
//!
//! `cargo bench -p kura-benches --bench parse`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kura_schemas::parse_report_limited;
use kura_schemas::report::DEFAULT_BODY_LIMIT;
use std::hint::black_box;
use std::path::PathBuf;

/// (label, fixture file) per report generation.
const FIXTURES: &[(&str, &str)] = &[
    ("g1", "g1-bootstrap.json"),
    ("g2", "g2-backfill-flag.json"),
    ("g3", "g3-fingerprint.json"),
    ("g4", "g4-pull-sync.json"),
    ("g4_authority", "g4-serving-authority.json"),
];

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/reports")
        .join(name);
    match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => panic!("fixture {}: {e}", path.display()),
    }
}

fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_report");
    for (label, file) in FIXTURES {
        let body = fixture(file);
        if let Err(e) = parse_report_limited(&body, DEFAULT_BODY_LIMIT) {
            panic!("fixture {file} does not parse: {e}");
        }
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(label), &body, |b, body| {
            b.iter(|| parse_report_limited(black_box(body), DEFAULT_BODY_LIMIT))
        });
    }
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
