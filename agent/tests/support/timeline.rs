//! An exported timeline replayed as `kura-gate replay --agent-view`
//! replays it (the gate's strict document reader, then
//! [`kura_gate::agent_view`]: the agent's own `judge_instance` with its
//! state carried from the document's baseline): what the timeline tests
//! compare with the verdicts the agent published.

use kura_gate::agent_view;
use kura_gate::document::parse_replay;
use kura_schemas::{AgentVerdict, InstanceTimeline, Signal};

/// The agent's view of an exported timeline: each tick's verdict and
/// signal for its one server. The document goes through its JSON text, so
/// what is compared is what `kura-gate` reads from the file.
pub fn reproduce(doc: &InstanceTimeline) -> Vec<(AgentVerdict, Option<Signal>)> {
    let text = serde_json::to_string(doc).expect("serialise the timeline");
    let input = parse_replay(&text).expect("an exported timeline is a replay document");
    let lines = agent_view(&input);
    assert_eq!(lines.len(), doc.ticks.len(), "one server per tick");
    lines.into_iter().map(|l| (l.verdict, l.signal)).collect()
}

/// Each tick's published verdict and signal.
pub fn published(doc: &InstanceTimeline) -> Vec<(AgentVerdict, Option<Signal>)> {
    doc.ticks
        .iter()
        .map(|t| {
            (
                t.servers[0].published.verdict,
                t.servers[0].published.signal,
            )
        })
        .collect()
}
