//! The crate's own sources as the checks read them (`layering_check`,
//! `telemetry_check`): the product code, without unit tests and comments.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {dir:?}: {e}"));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every source file of the crate but the checks', without its unit
/// tests and comments: the code that runs, by path under `src/`.
pub(crate) fn product_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|p| {
            ![
                "telemetry_check.rs",
                "layering_check.rs",
                "signal_check.rs",
                "source_files.rs",
            ]
            .iter()
            .any(|check| p.ends_with(check))
        })
        // A file of unit tests only (declared `#[cfg(test)] mod …_tests;`).
        .filter(|p| !p.to_string_lossy().ends_with("_tests.rs"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("source");
            let code = without_unit_tests(&text)
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let name = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
            (name, code)
        })
        .collect()
}

/// `text` up to its unit tests: a `mod tests` right after a `#[cfg(…)]`
/// line that names `test` (`#[cfg(test)]`, `#[cfg(all(test, feature =
/// "tools"))]`).
fn without_unit_tests(text: &str) -> &str {
    let mut line_start = 0;
    let mut previous: Option<(usize, &str)> = None;
    for line in text.split_inclusive('\n') {
        if line.starts_with("mod tests")
            && let Some((at, cfg)) = previous
            && cfg.starts_with("#[cfg(")
            && cfg.contains("test")
        {
            return &text[..at];
        }
        previous = Some((line_start, line));
        line_start += line.len();
    }
    text
}
