//! `kura-gate replay` documents (and exported timelines), and so the gate
//! over arbitrary tick sequences: no panic; every verdict but `pass` names
//! a signal; the agent view judges every server of every tick, and every
//! verdict but `healthy` names a signal.
#![no_main]

use kura_gate::wave::VerdictKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(input) = kura_gate::parse_replay(text) else {
        return;
    };
    if let Ok(lines) = kura_gate::run_replay(&input) {
        assert_eq!(lines.len(), input.ticks.len());
        for line in lines {
            if line.verdict.verdict != VerdictKind::Pass {
                assert!(
                    line.verdict.signal.is_some(),
                    "tick {}: a {:?} verdict without a signal",
                    line.tick,
                    line.verdict.verdict
                );
            }
        }
    }
    let servers: usize = input.ticks.iter().map(|t| t.servers.len()).sum();
    let agent = kura_gate::agent_view(&input);
    assert_eq!(agent.len(), servers);
    for line in agent {
        assert_eq!(
            line.signal.is_none(),
            line.verdict == kura_schemas::AgentVerdict::Healthy,
            "tick {} server {}: {:?} with signal {:?}",
            line.tick,
            line.server_id,
            line.verdict,
            line.signal
        );
    }
});
