//! `kura-gate`.

fn main() {}
