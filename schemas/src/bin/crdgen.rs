//! Writes the generated CRD and JSON Schemas into the repository, or with
//! `--check` fails when the committed copies differ from what the code
//! generates.
//!
//! Usage: `crdgen [--check] [--root DIR]` (root defaults to the workspace).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--root" => match args.next() {
                Some(r) => root = PathBuf::from(r),
                None => {
                    eprintln!("crdgen: --root needs a directory");
                    return ExitCode::from(2);
                }
            },
            "--stdout" => match kura_schemas::generated::crd_yaml() {
                Ok(y) => {
                    print!("{y}");
                    return ExitCode::SUCCESS;
                }
                Err(e) => {
                    eprintln!("crdgen: {e}");
                    return ExitCode::FAILURE;
                }
            },
            other => {
                eprintln!(
                    "crdgen: unknown argument {other:?}; usage: crdgen [--check] [--root DIR] [--stdout]"
                );
                return ExitCode::from(2);
            }
        }
    }
    let artifacts = match kura_schemas::generated::artifacts() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut drift = false;
    for (rel, content) in artifacts {
        let path = root.join(&rel);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(content.as_str()) {
            continue;
        }
        if check {
            eprintln!(
                "crdgen: {rel} differs from what the code generates; run `cargo run -p kura-schemas --bin crdgen`"
            );
            drift = true;
            continue;
        }
        if let Some(parent) = path.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            eprintln!("crdgen: cannot create {}: {e}", parent.display());
            return ExitCode::FAILURE;
        }
        if let Err(e) = std::fs::write(&path, content) {
            eprintln!("crdgen: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {rel}");
    }
    if drift {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
