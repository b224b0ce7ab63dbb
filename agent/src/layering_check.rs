//! The layering held against the code: every path to another top-level
//! module in the product code (the sources without their unit tests and
//! comments) names a module its module may import, by the table below
//! (docs/architecture.md draws the same layers). A path is `crate::…`, or
//! `super::…` climbing to the crate root (`super::model` in a top-level
//! module's file, `super::super::model` one level down). An import outside
//! the table fails, and so would a table with a cycle; so does a path into
//! another module's submodule that module does not export (`pub mod`).

use std::collections::{BTreeMap, BTreeSet};

use crate::source_files::product_sources;

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

/// The module path of a source file under `src/`: `debug/routes.rs` is
/// `debug::routes`, `debug/mod.rs` and `debug.rs` are `debug`, `lib.rs`
/// the crate root.
fn module_path(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split(['/', '\\'])
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Whether the character before `at` in `code` continues an identifier or
/// a path (`kura_crate::`, `self::super::`): then no path starts at `at`.
fn inside_a_path(code: &str, at: usize) -> bool {
    code[..at]
        .chars()
        .last()
        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
}

/// Every path from the crate root that `code` (a file at `depth`, the
/// length of its module path) names, as its first two segments: through
/// `crate::`, and through `super::` repeated `depth` times (the crate
/// root). `use` lines, `{a, b::c}` groups (one level into a group after
/// the first segment too) and paths in place.
fn crate_paths(code: &str, depth: usize) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let start = if rest.starts_with("crate::") && !inside_a_path(code, at) {
            Some("crate::".len())
        } else if rest.starts_with("super::") && !inside_a_path(code, at) {
            let mut climbed = 0;
            let mut len = 0;
            while rest[len..].starts_with("super::") {
                climbed += 1;
                len += "super::".len();
            }
            // Fewer climbs stay inside the file's own top-level module.
            (depth > 0 && climbed >= depth).then_some(len)
        } else {
            None
        };
        match start {
            Some(len) => {
                rooted_paths(&rest[len..], &mut out);
                at += len;
            }
            None => at += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// The top-level modules that `code` names through `crate::` (in `use`
/// lines, `use crate::{a, b::c}` groups and paths in place), in a
/// top-level module's file.
fn crate_imports(code: &str) -> BTreeSet<String> {
    crate_paths(code, 1)
        .into_iter()
        .map(|(top, _)| top)
        .collect()
}

/// The items of a `{…}` group (its text after the `{`), split at its
/// top-level commas.
fn group_items(group: &str) -> Vec<String> {
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
    items
}

fn ident(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The paths of `rest` (the text right after a path's root), as their
/// first two segments.
fn rooted_paths(rest: &str, out: &mut Vec<(String, Option<String>)>) {
    let items = match rest.strip_prefix('{') {
        Some(group) => group_items(group),
        None => vec![rest.to_owned()],
    };
    for item in items {
        let item = item.trim_start();
        let top = ident(item);
        if top.is_empty() {
            continue;
        }
        let after = item[top.len()..].trim_start();
        match after.strip_prefix("::") {
            Some(next) => match next.trim_start().strip_prefix('{') {
                Some(group) => {
                    for sub in group_items(group) {
                        let sub = ident(&sub);
                        out.push((top.clone(), (!sub.is_empty()).then_some(sub)));
                    }
                }
                None => {
                    let sub = ident(next);
                    out.push((top.clone(), (!sub.is_empty()).then_some(sub)));
                }
            },
            None => out.push((top, None)),
        }
    }
}

/// The submodules each top-level module declares in its root file, and
/// whether it exports them (`pub mod`; `mod`, `pub(crate) mod` … do not).
fn declared_submodules(sources: &[(String, String)]) -> BTreeMap<String, BTreeMap<String, bool>> {
    let mut out: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    for (file, code) in sources {
        let path = module_path(file);
        if path.len() != 1 {
            continue;
        }
        let declared = out.entry(path[0].clone()).or_default();
        for line in code.lines() {
            let line = line.trim();
            let Some((visibility, name)) =
                line.strip_suffix(';').and_then(|l| l.split_once("mod "))
            else {
                continue;
            };
            let visibility = visibility.trim();
            let exported = visibility == "pub";
            if (exported || visibility.is_empty() || visibility.starts_with("pub("))
                && !name.is_empty()
                && name.chars().all(|c| c.is_alphanumeric() || c == '_')
            {
                declared.insert(name.to_owned(), exported);
            }
        }
    }
    out
}

/// Where `code` of top-level module `module` (a file at `depth`) names
/// another top-level module's submodule that module does not export.
fn internal_reaches(
    module: &str,
    code: &str,
    depth: usize,
    declared: &BTreeMap<String, BTreeMap<String, bool>>,
) -> BTreeSet<String> {
    crate_paths(code, depth)
        .into_iter()
        .filter(|(top, _)| top != module)
        .filter_map(|(top, sub)| {
            let sub = sub?;
            let exported = *declared.get(&top)?.get(&sub)?;
            (!exported).then(|| format!("{top}::{sub}"))
        })
        .collect()
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
        let depth = module_path(&file).len();
        for (target, _) in crate_paths(&code, depth) {
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

#[test]
fn super_paths_that_climb_to_the_crate_root_are_imports() {
    // `super::` in a top-level module's file is the crate root.
    assert_eq!(
        crate_paths("use super::{model::A, telemetry};", 1),
        [
            ("model".to_owned(), Some("A".to_owned())),
            ("telemetry".to_owned(), None)
        ]
    );
    // One level down it takes two; one climb stays in the module.
    let code =
        "use super::super::view::FleetView;\nuse super::html;\nlet x = super::super::poll::f();";
    let tops: BTreeSet<String> = crate_paths(code, 2).into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        tops,
        ["poll", "view"].into_iter().map(str::to_owned).collect()
    );
    assert!(crate_paths("use super::html;", 2).is_empty());
    assert!(crate_paths("use self::super::x;", 1).is_empty());
}

#[test]
fn the_module_path_of_a_file() {
    assert_eq!(module_path("debug/routes.rs"), ["debug", "routes"]);
    assert_eq!(module_path("debug/mod.rs"), ["debug"]);
    assert_eq!(module_path("view.rs"), ["view"]);
    assert_eq!(module_path("cli/run/args.rs"), ["cli", "run", "args"]);
    assert!(module_path("lib.rs").is_empty());
}

#[test]
fn a_path_into_a_siblings_unexported_submodule_is_found() {
    let sources = [(
        "write/mod.rs".to_owned(),
        "pub mod conditions;\nmod queue;\npub(crate) mod apply;\npub use queue::Slot;".to_owned(),
    )];
    let declared = declared_submodules(&sources);
    let code = "use crate::write::{conditions::ConditionSet, Slot};\n\
                let a = crate::write::apply::f();\n\
                use super::super::write::queue::Slot;";
    assert_eq!(
        internal_reaches("runner", code, 2, &declared),
        ["write::apply", "write::queue"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    );
    // Its own submodules are the module's business.
    assert!(internal_reaches("write", code, 2, &declared).is_empty());
}

#[test]
fn no_module_reaches_into_a_siblings_internals() {
    let sources = product_sources();
    let declared = declared_submodules(&sources);
    let mut wrong = Vec::new();
    for (file, code) in &sources {
        let path = module_path(file);
        let Some(module) = path.first() else {
            continue;
        };
        for reach in internal_reaches(module, code, path.len(), &declared) {
            wrong.push(format!(
                "{file} reaches into {reach}, which is not exported"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "paths into another module's internals:\n{}",
        wrong.join("\n")
    );
}
