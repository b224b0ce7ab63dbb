//! The tools: every subcommand but `run`, behind the `tools` cargo feature
//! (on by default; the container image builds without it, so the product
//! binary carries only the composition root of [`crate::cli`]). They
//! import the product's modules and `cli`'s shared set-up; nothing of the
//! product imports them.
//!
//! - [`check`]: the gate for plain node URLs (standalone chart), with the
//!   baseline document it judges against (`check::baseline_document`);
//! - [`baseline`]: one poll of plain node URLs written down before an
//!   upgrade, for `check --baseline` after it (`baseline::store`: into a
//!   ConfigMap; `baseline::out_file`: `--out FILE`, which keeps what it is);
//! - [`demo`]: a rollout on a simulated fleet (`kura-sim`);
//! - [`aggregate`]: the aggregation over recorded reports;
//! - [`simulate`]: serve a simulated fleet (`kura-sim`);
//! - [`timelines`]: fetch every instance's timeline from a running agent;
//! - [`fleet_load_side`] (hidden; its own feature `fleet-load-side`, which
//!   `tools` includes): the agent's side of the `fleet-load` harness, so a
//!   built binary can be measured.

#[cfg(feature = "tools")]
pub mod aggregate;
#[cfg(feature = "tools")]
pub mod baseline;
#[cfg(feature = "tools")]
pub mod check;
#[cfg(feature = "tools")]
pub mod demo;
#[cfg(feature = "fleet-load-side")]
pub mod fleet_load_side;
#[cfg(feature = "tools")]
pub mod simulate;
#[cfg(feature = "tools")]
pub mod timelines;

/// An optional count as `check` and `demo` print it: `null` when absent
/// (absent is never 0). A failing check's evidence is the gate's own
/// words (`kura_schemas::Evidence::summary` and `figures`).
pub fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_owned(), |v| v.to_string())
}

#[cfg(all(test, feature = "tools"))]
mod tests {
    #[test]
    fn an_absent_count_is_null_never_zero() {
        assert_eq!(super::count(None), "null");
        assert_eq!(super::count(Some(0)), "0");
    }
}
