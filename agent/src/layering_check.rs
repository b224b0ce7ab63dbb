//! The layering held against the code: every `crate::` path in the product
//! code (the sources without their unit tests and comments) names a module
//! its module may import, by the table below (docs/architecture.md draws
//! the same layers). An import outside the table fails, and so would a
//! table with a cycle.

use std::collections::{BTreeMap, BTreeSet};

use crate::telemetry_check::product_sources;

/// Which top-level modules each top-level module may import, layer by
/// layer (a module imports only from the layers above its own).
const ALLOWED: &[(&str, &[&str])] = &[
    // vocabulary
    ("model", &[]),
    ("telemetry", &[]),
    ("gate_text", &[]),
    // core, no IO: the fold, the judge, the fleet view they feed
    ("aggregate", &["model"]),
    ("engine", &["model", "aggregate", "gate_text"]),
    ("view", &["model"]),
    // adapters (IO); the loop owns the poller, the others meet it through
    // model's ports
    ("poll", &["model", "telemetry"]),
    ("cluster", &["model", "telemetry"]),
    ("shard", &["model", "telemetry"]),
    ("write", &["model", "telemetry"]),
    ("events", &["model", "telemetry"]),
    // loop
    ("runner", &["model", "telemetry", "engine", "view", "poll"]),
    // presentation
    ("debug", &["model", "telemetry", "view"]),
    // the composition root (`run`)
    (
        "cli",
        &[
            "model",
            "telemetry",
            "gate_text",
            "aggregate",
            "engine",
            "view",
            "poll",
            "cluster",
            "shard",
            "write",
            "events",
            "runner",
            "debug",
        ],
    ),
    // the tools (feature `tools`): the product's parts and cli's shared
    // set-up; never `cluster`, `shard`, `write` or `events`, the product's
    // adapters to the API server
    (
        "tools",
        &[
            "model",
            "telemetry",
            "aggregate",
            "engine",
            "view",
            "poll",
            "runner",
            "debug",
            "cli",
        ],
    ),
];

/// The top-level modules that `code` names through `crate::` (in `use`
/// lines, `use crate::{a, b::c}` groups and paths in place).
fn crate_imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue; // `kura_crate::`, not ours
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            items.push(item);
            for item in items {
                let first = item.trim().split("::").next().unwrap_or_default().trim();
                if !first.is_empty() {
                    out.insert(first.to_owned());
                }
            }
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(ident);
        }
    }
    out
}

/// The module -> modules edges of the product code, by top-level module.
fn edges() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (file, code) in product_sources() {
        let module = file
            .split(['/', '\\'])
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_owned();
        if matches!(module.as_str(), "lib" | "main" | "layering_check") {
            continue;
        }
        for target in crate_imports(&code) {
            if target != module {
                out.entry(module.clone())
                    .or_default()
                    .entry(target)
                    .or_default()
                    .insert(file.clone());
            }
        }
    }
    out
}

#[test]
fn every_import_is_an_allowed_edge() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut wrong = Vec::new();
    for (module, targets) in edges() {
        let Some(may) = allowed.get(module.as_str()) else {
            wrong.push(format!("module {module} is not in the layering table"));
            continue;
        };
        for (target, files) in targets {
            if !may.contains(&target.as_str()) {
                wrong.push(format!(
                    "{module} imports {target} ({}), which it may not",
                    files.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

/// The table itself is in layer order: a module only imports modules
/// listed before it, so the import graph has no cycle.
#[test]
fn the_layering_table_points_one_way() {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (module, may) in ALLOWED {
        for target in *may {
            assert!(
                seen.contains(target),
                "{module} may import {target}, which is not above it"
            );
        }
        seen.insert(module);
    }
}

#[test]
fn grouped_and_in_place_imports_are_seen() {
    let code = "use crate::{model::{A, B}, telemetry};\nlet x = crate::view::f();";
    assert_eq!(
        crate_imports(code),
        ["model", "telemetry", "view"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    );
}
