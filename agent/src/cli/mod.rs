//! The binary's subcommands.

pub mod simulate;
