//! The `kura-agent` subcommands; `main.rs` only dispatches to them.

pub mod aggregate;
pub mod check;
pub mod demo;
pub mod run;
pub mod simulate;
