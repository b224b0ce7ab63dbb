//! The `kura-agent` subcommands; `main.rs` only dispatches to them.

pub mod aggregate;
pub mod run;
pub mod simulate;
