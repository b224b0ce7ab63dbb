//! Writes `tick-100.json` and `tick-1000.json` (see `kura_benches::gate_docs`)
//! into a directory, for the Go and Elixir binding benchmarks.
//!
//! `cargo run --release -p kura-benches --bin gate-tick-docs -- DIR`

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: gate-tick-docs DIR");
        return ExitCode::from(2);
    };
    let dir = std::path::PathBuf::from(dir);
    for servers in [100, 1000] {
        let path = dir.join(format!("tick-{servers}.json"));
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, kura_benches::gate_docs::tick_document(servers)));
        if let Err(e) = written {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
