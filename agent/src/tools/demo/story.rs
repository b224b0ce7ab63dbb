//! The demo's orchestrator: schedules waves, captures baselines, upgrades
//! pods, injects the regression, plays the operators' part (a suspension,
//! an update held by hand), ticks the wave judge and prints the timeline.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_gate::{
    Baseline, Deployment, Gate, HealthView, ServerInput, ServerStatus, TickInput, Verdict,
    VerdictKind,
};
use kura_schemas::{AgentVerdict, Evidence, RolloutHealth, Signal, UpdatePaused};

use super::fleet::{
    DemoInstance, NEW_IMAGE, OLD_IMAGE, OperatorAction, pod_target, unroutable_ip, wave_count,
};
use super::outcome::{DemoOutcome, InstanceOutcome, VerdictChange, WaveOutcome};
use super::{Demo, DemoError};
use crate::model::{Clock, DesiredStatus, InstanceKey};
use crate::tools::count;
use kura_sim::SimPodHandle;

/// How long to wait for the first aggregates of every instance.
const SETTLE: SignedDuration = SignedDuration::from_secs(120);
/// Extra simulated time past a wave's deadline before the run gives up.
const STALL_MARGIN: SignedDuration = SignedDuration::from_secs(300);

/// One server (instance) of the rollout, as the orchestrator tracks it.
struct Server {
    spec: DemoInstance,
    id: String,
    key: InstanceKey,
    pods: Vec<SimPodHandle>,
    deployment: Option<Deployment>,
    baseline: Option<Baseline>,
    /// Pod indices still to restart, in order.
    to_roll: Vec<usize>,
    next_roll_at: Option<Timestamp>,
    /// The pod whose fd timeouts grow, and when it next grows.
    fault: Option<(usize, Timestamp)>,
    converged_announced: bool,
    /// Its operator suspended it.
    suspended: bool,
    /// Where its operator's update by hand is.
    by_hand: ByHand,
}

/// An update by hand ([`OperatorAction::UpdateByHand`]) as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ByHand {
    /// Not yet (or never: no such action).
    NotYet,
    /// `spec.image` moved, these pods (indices) held on the old image; the
    /// next one is deleted at `next`.
    Holding { held: Vec<usize>, next: Timestamp },
    /// Every pod on the new image, the hold lifted.
    Done,
}

/// The agent's own verdicts as the timeline last told them, and every
/// change, per instance key.
#[derive(Debug, Default)]
struct AgentSeen {
    last: BTreeMap<String, (AgentVerdict, Option<Signal>)>,
    changes: BTreeMap<String, Vec<VerdictChange>>,
}

/// Writes timeline lines stamped with simulated time since the start.
struct Timeline<'w, W: Write> {
    out: &'w mut W,
    start: Timestamp,
}

impl<W: Write> Timeline<'_, W> {
    fn at(&mut self, now: Timestamp, text: &str) -> Result<(), DemoError> {
        writeln!(
            self.out,
            "[{}] {text}",
            stamp(now.duration_since(self.start))
        )?;
        self.out.flush()?;
        Ok(())
    }

    fn plain(&mut self, text: &str) -> Result<(), DemoError> {
        writeln!(self.out, "{text}")?;
        Ok(())
    }
}

/// `+mm:ss` of simulated time.
fn stamp(d: SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    format!("+{:02}:{:02}", secs / 60, secs % 60)
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// `+mm:ss` of a duration since the start.
fn stamp_of(d: Duration) -> String {
    stamp(signed(d))
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

fn short_image(image: &str) -> &str {
    image.rsplit(':').next().unwrap_or(image)
}

fn wave_label(wave: u32) -> String {
    if wave == 0 {
        "wave 0 (canary)".to_owned()
    } else {
        format!("wave {wave}")
    }
}

fn signal_word(signal: Option<Signal>) -> &'static str {
    signal.map_or("none", Signal::as_str)
}

/// Whether the instance's latest aggregate shows every pod on the new image.
fn converged(health: Option<&RolloutHealth>, replicas: u32) -> bool {
    health.is_some_and(|h| {
        h.pods.len() >= usize::try_from(replicas).unwrap_or(usize::MAX)
            && h.pods.iter().all(|p| p.image.as_deref() == Some(NEW_IMAGE))
    })
}

impl Demo {
    /// The simulated time the story should take with this configuration.
    fn estimated_story(&self) -> Duration {
        let c = &self.config;
        let waves = wave_count(&c.fleet);
        let mut total = c.sweep_interval * 2;
        for wave in 0..waves {
            let replicas = c
                .fleet
                .iter()
                .filter(|i| i.wave == Some(wave))
                .map(|i| i.replicas)
                .max()
                .unwrap_or(0);
            let roll = c.pod_roll_interval * replicas + c.sweep_interval + c.tick;
            total += if wave + 1 == waves {
                Duration::from_secs(c.gate.wave_deadline_seconds)
            } else {
                roll + Duration::from_secs(c.gate.soak_for(wave))
            };
        }
        total
    }

    async fn sleep(&self, d: Duration) {
        tokio::time::sleep(self.clock.to_real(d)).await;
    }

    /// Plays the story to its end, writing the timeline to `out`, and
    /// returns the outcome. The fleet, agent and debug endpoint run on
    /// until the [`Demo`] is dropped (`--keep-serving` keeps them up).
    pub async fn play<W: Write>(&self, out: &mut W) -> Result<DemoOutcome, DemoError> {
        let mut tl = Timeline {
            out,
            start: self.virtual_start,
        };
        self.header(&mut tl)?;
        let mut servers = self.servers();

        // First aggregates of every instance.
        let settle_until = self.virtual_start + SETTLE;
        loop {
            self.sleep(self.config.tick).await;
            let all = self.sink.all();
            let sampled = servers
                .iter()
                .filter(|s| {
                    all.get(&s.key)
                        .is_some_and(|d| d.health.sampled_pods >= d.health.expected_pods)
                })
                .count();
            if sampled == servers.len() || self.clock.now() >= settle_until {
                let pods: u32 = all.values().map(|d| d.health.sampled_pods).sum();
                let expected: u32 = servers.iter().map(|s| s.spec.replicas).sum();
                let healthy = all
                    .values()
                    .filter(|d| d.gate.verdict == AgentVerdict::Healthy)
                    .count();
                tl.at(
                    self.clock.now(),
                    &format!(
                        "fleet sampled: {sampled}/{} instances, {pods}/{expected} pods on {}; \
                         agent verdicts: {healthy} healthy",
                        servers.len(),
                        short_image(OLD_IMAGE)
                    ),
                )?;
                break;
            }
        }
        let mut agent_seen = AgentSeen::default();
        for (key, d) in self.sink.all() {
            let id = key.to_string();
            agent_seen
                .last
                .insert(id.clone(), (d.gate.verdict, d.gate.signal));
            agent_seen
                .changes
                .entry(id)
                .or_default()
                .push(VerdictChange {
                    at: self.clock.now(),
                    verdict: d.gate.verdict,
                    signal: d.gate.signal,
                    evidence: d.gate.evidence.clone(),
                });
        }

        let mut gate = Gate::new(self.config.gate.clone())?;
        let planned = wave_count(&self.config.fleet);
        let mut waves: Vec<WaveOutcome> = Vec::new();
        for wave in 0..planned {
            let started_at = self.clock.now();
            self.schedule(&mut tl, &mut servers, wave, started_at)?;
            let final_verdict = self
                .run_wave(
                    &mut tl,
                    &mut gate,
                    &mut servers,
                    &mut agent_seen,
                    wave,
                    started_at,
                )
                .await?;
            let stop = final_verdict.verdict == VerdictKind::HardStop;
            waves.push(WaveOutcome {
                wave,
                servers: servers
                    .iter()
                    .filter(|s| s.spec.wave == Some(wave))
                    .map(|s| s.id.clone())
                    .collect(),
                started_at,
                ended_at: self.clock.now(),
                verdict: final_verdict,
            });
            if stop {
                break;
            }
        }

        let outcome = self.outcome(waves, &servers, agent_seen, planned);
        tl.plain("")?;
        for line in self.summary(&outcome) {
            tl.plain(&line)?;
        }
        Ok(outcome)
    }

    fn header<W: Write>(&self, tl: &mut Timeline<'_, W>) -> Result<(), DemoError> {
        let c = &self.config;
        let pods = self.sim.pods();
        let accounts: std::collections::BTreeSet<&str> =
            c.fleet.iter().map(|i| i.account.as_str()).collect();
        let regions: std::collections::BTreeSet<&str> =
            c.fleet.iter().map(|i| i.region.as_str()).collect();
        let where_ = match (pods.first(), pods.last()) {
            (Some(first), Some(last)) => format!("{} … {}", first.addr(), last.addr()),
            _ => "nowhere".to_owned(),
        };
        let story = self.estimated_story();
        let url = self.debug_url();
        tl.plain(&format!(
            "kura-agent demo: open the fleet page at {url} (each instance at {url}instances/{}/<name>)",
            super::fleet::NAMESPACE
        ))?;
        if let Some(note) = &self.listen_note {
            tl.plain(&format!(
                "          ({note}; listening on an ephemeral port)"
            ))?;
        }
        tl.plain(&format!(
            "kura-agent demo: rolling {OLD_IMAGE} → {} across a simulated fleet",
            short_image(NEW_IMAGE)
        ))?;
        tl.plain(&format!(
            "  fleet:  {} instances ({} accounts in {} regions), {} pods serving /status/rollout on {where_}",
            c.fleet.len(),
            accounts.len(),
            regions.len(),
            pods.len()
        ))?;
        tl.plain(&format!(
            "  agent:  the real poller, aggregation and per-instance gate, sweeping every {} s \
             (static targets instead of the pod watch, status kept in memory)",
            secs(c.sweep_interval)
        ))?;
        tl.plain(&format!(
            "  gate:   soak {} s for the canary, {} s for later waves; samples older than {} s are stale; \
             wave deadline {} s (shortened for the demo; the default is 3600 s)",
            c.gate.soak_for(0),
            c.gate.soak_for(1),
            c.gate.max_sample_age_seconds,
            c.gate.wave_deadline_seconds
        ))?;
        tl.plain(&format!(
            "  time:   {}× faster than real time (--time-scale): about {} simulated minutes in {:.0} real seconds",
            self.clock.scale(),
            story.as_secs().div_ceil(60),
            story.as_secs_f64() / self.clock.scale()
        ))?;
        tl.plain(&format!(
            "  debug:  {url}  (JSON: {url}debug/instances, metrics: {url}metrics)"
        ))?;
        for wave in 0..wave_count(&c.fleet) {
            let ids: Vec<String> = c
                .fleet
                .iter()
                .filter(|i| i.wave == Some(wave))
                .map(|i| {
                    if i.node_local {
                        format!("{} (node-local)", i.id())
                    } else {
                        i.id()
                    }
                })
                .collect();
            tl.plain(&format!("  {:<16} {}", wave_label(wave), ids.join(", ")))?;
        }
        let pinned: Vec<String> = c
            .fleet
            .iter()
            .filter(|i| i.wave.is_none())
            .map(DemoInstance::id)
            .collect();
        if !pinned.is_empty() {
            tl.plain(&format!(
                "  {:<16} {} (pinned: updated by its operator, never by the rollout)",
                "outside",
                pinned.join(", ")
            ))?;
        }
        for i in c.fleet.iter().filter(|i| i.node_local) {
            let ips: Vec<String> = self
                .sim
                .pods()
                .iter()
                .filter(|p| i.pod_names().iter().any(|n| n == p.name()))
                .map(|p| unroutable_ip(p).to_string())
                .collect();
            tl.plain(&format!(
                "  node-local: {}: its pod IPs ({}) lead nowhere; the agent reaches its pods through \
                 a port-forward by their (simulated) kubelet, never by pod IP",
                i.id(),
                ips.join(", ")
            ))?;
        }
        for i in &c.fleet {
            match i.operator {
                Some(OperatorAction::Suspend { after }) => tl.plain(&format!(
                    "  operator: suspends {} {} s into its upgrade (spec.suspended: Kura scales it to zero)",
                    i.id(),
                    secs(after)
                ))?,
                Some(OperatorAction::UpdateByHand { at, delete_every }) => tl.plain(&format!(
                    "  operator: moves {} to {} by hand at {} with updateStrategy OnDelete (its pods held), \
                     then deletes a held pod every {} s",
                    i.id(),
                    short_image(NEW_IMAGE),
                    stamp_of(at),
                    secs(delete_every)
                ))?,
                None => {}
            }
        }
        tl.plain("")?;
        Ok(())
    }

    fn servers(&self) -> Vec<Server> {
        self.config
            .fleet
            .iter()
            .map(|spec| {
                let names = spec.pod_names();
                let pods: Vec<SimPodHandle> = names
                    .iter()
                    .filter_map(|n| self.sim.pod(n).cloned())
                    .collect();
                Server {
                    id: spec.id(),
                    key: InstanceKey::new(super::fleet::NAMESPACE, spec.name()),
                    spec: spec.clone(),
                    pods,
                    deployment: None,
                    baseline: None,
                    to_roll: Vec::new(),
                    next_roll_at: None,
                    fault: None,
                    converged_announced: false,
                    suspended: false,
                    by_hand: ByHand::NotYet,
                }
            })
            .collect()
    }

    /// Captures the wave's baselines from the status store, points its
    /// instances at the new image and plans their pod restarts.
    fn schedule<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        servers: &mut [Server],
        wave: u32,
        now: Timestamp,
    ) -> Result<(), DemoError> {
        let ids: Vec<&str> = servers
            .iter()
            .filter(|s| s.spec.wave == Some(wave))
            .map(|s| s.id.as_str())
            .collect();
        tl.at(
            now,
            &format!(
                "{} scheduled: {} → {}",
                wave_label(wave),
                ids.join(", "),
                short_image(NEW_IMAGE)
            ),
        )?;
        let all = self.sink.all();
        for s in servers.iter_mut().filter(|s| s.spec.wave == Some(wave)) {
            let view = all.get(&s.key).map(|d| HealthView::from(&*d.health));
            let baseline = Baseline::capture(view.as_ref(), now, &self.config.gate);
            tl.at(
                now,
                &format!(
                    "  baseline {}: fdTimeoutCount {}, peerConnectionFailures {}, outboxMessages {}; {}",
                    s.id,
                    count(baseline.counters.fd_timeout_count),
                    count(baseline.counters.peer_connection_failures),
                    count(baseline.counters.outbox_messages),
                    if baseline.soak_eligible {
                        "soak-eligible"
                    } else {
                        "not soak-eligible (sick before its upgrade)"
                    }
                ),
            )?;
            s.baseline = Some(baseline);
            s.deployment = Some(Deployment::Running);
            s.to_roll = (0..s.pods.len()).rev().collect();
            s.next_roll_at = Some(now + signed(self.config.pod_roll_interval));
        }
        let keys: Vec<InstanceKey> = servers
            .iter()
            .filter(|s| s.spec.wave == Some(wave))
            .map(|s| s.key.clone())
            .collect();
        self.targets.update(|targets| {
            for t in targets.iter_mut().filter(|t| keys.contains(&t.key())) {
                t.spec_image = NEW_IMAGE.to_owned();
            }
        });
        Ok(())
    }

    /// Restarts the pods that are due, one at a time per instance; a pod
    /// restarts first (counters to 0, new incarnation), then discovery
    /// (the static targets) sees its new restart count and image.
    fn roll_due<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        servers: &mut [Server],
        now: Timestamp,
    ) -> Result<(), DemoError> {
        for s in servers.iter_mut() {
            let Some(due) = s.next_roll_at else { continue };
            if now < due || s.to_roll.is_empty() {
                continue;
            }
            let index = s.to_roll.remove(0);
            let Some(pod) = s.pods.get(index).cloned() else {
                continue;
            };
            pod.restart();
            self.replace_pod(s, &pod, NEW_IMAGE);
            if s.spec.regresses && s.fault.is_none() {
                s.fault = Some((index, now + signed(self.config.regression_every)));
                tl.at(
                    now,
                    &format!(
                        "  (scripted fault: after its restart on {}, {} times out waiting for file \
                         descriptors: +1 fd timeout every {} s)",
                        short_image(NEW_IMAGE),
                        pod.name(),
                        secs(self.config.regression_every)
                    ),
                )?;
            }
            if s.to_roll.is_empty() {
                s.next_roll_at = None;
                s.deployment = Some(Deployment::Succeeded);
                tl.at(
                    now,
                    &format!(
                        "  {}: {}/{} pods restarted on {} (deployment succeeded)",
                        s.id,
                        s.pods.len(),
                        s.spec.replicas,
                        short_image(NEW_IMAGE)
                    ),
                )?;
            } else {
                s.next_roll_at = Some(now + signed(self.config.pod_roll_interval));
            }
        }
        Ok(())
    }

    /// Discovery sees `pod` (just restarted) run `image`: its target is
    /// replaced (new restart count and image; a node-local pod keeps its
    /// unroutable IP).
    fn replace_pod(&self, s: &Server, pod: &SimPodHandle, image: &str) {
        let target = pod_target(pod, image, s.spec.node_local);
        let key = s.key.clone();
        self.targets.update(|targets| {
            for t in targets.iter_mut().filter(|t| t.key() == key) {
                for p in t.pods.iter_mut() {
                    if p.identity.name == target.identity.name {
                        *p = target.clone();
                    }
                }
            }
        });
    }

    /// The operators' part, when it is due: a suspension in the middle of
    /// an upgrade, an update by hand held by `OnDelete`.
    async fn operate<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        servers: &mut [Server],
        wave: u32,
        wave_started_at: Timestamp,
        now: Timestamp,
    ) -> Result<(), DemoError> {
        for s in servers.iter_mut() {
            match s.spec.operator {
                Some(OperatorAction::Suspend { after })
                    if s.spec.wave == Some(wave)
                        && !s.suspended
                        && now >= wave_started_at + signed(after) =>
                {
                    self.suspend(tl, s, wave, now).await?;
                }
                Some(OperatorAction::UpdateByHand { at, delete_every }) => {
                    self.update_by_hand(tl, s, at, delete_every, now)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `spec.suspended: true`: Kura scales the instance to zero (its
    /// simulated pods stop, discovery lists none) and no pod is restarted
    /// any more. The agent's next sweep publishes the suspended aggregate;
    /// from then on the wave judge leaves the server out of the wave.
    async fn suspend<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        s: &mut Server,
        wave: u32,
        now: Timestamp,
    ) -> Result<(), DemoError> {
        let upgraded = s.pods.len() - s.to_roll.len();
        s.suspended = true;
        s.to_roll.clear();
        s.next_roll_at = None;
        let key = s.key.clone();
        self.targets.update(|targets| {
            for t in targets.iter_mut().filter(|t| t.key() == key) {
                t.traits.suspended = true;
                t.pods.clear();
            }
        });
        for pod in &s.pods {
            pod.suspend().await;
        }
        tl.at(
            now,
            &format!(
                "  operator: suspends {} (spec.suspended: true) in the middle of its upgrade, {upgraded}/{} \
                 pods on {}: Kura scales it to zero; a suspended server is out of {}'s scope",
                s.id,
                s.spec.replicas,
                short_image(NEW_IMAGE),
                wave_label(wave)
            ),
        )?;
        Ok(())
    }

    /// An update by hand: at `at` `spec.image` moves with `OnDelete`, so
    /// Kura's controller holds every pod on the old image and reports it
    /// (`status.updatePaused`); every `delete_every` the operator deletes
    /// a held pod, which comes back on the new image; with none left the
    /// controller lifts the hold.
    fn update_by_hand<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        s: &mut Server,
        at: Duration,
        delete_every: Duration,
        now: Timestamp,
    ) -> Result<(), DemoError> {
        match &mut s.by_hand {
            ByHand::NotYet if now >= self.virtual_start + signed(at) => {
                let held: Vec<usize> = (0..s.pods.len()).rev().collect();
                let paused = self.held_update(s, &held);
                let names = paused.held_pods.join(", ");
                let key = s.key.clone();
                self.targets.update(|targets| {
                    for t in targets.iter_mut().filter(|t| t.key() == key) {
                        t.spec_image = NEW_IMAGE.to_owned();
                        t.traits.update_paused = Some(Box::new(paused.clone()));
                    }
                });
                s.by_hand = ByHand::Holding {
                    held,
                    next: now + signed(delete_every),
                };
                tl.at(
                    now,
                    &format!(
                        "  operator: moves {} (outside the waves) to {} by hand with updateStrategy OnDelete: \
                         Kura's controller holds {names} on {} (status.updatePaused)",
                        s.id,
                        short_image(NEW_IMAGE),
                        short_image(OLD_IMAGE)
                    ),
                )?;
            }
            ByHand::Holding { held, next } if now >= *next => {
                let index = held.remove(0);
                let remaining = held.clone();
                *next = now + signed(delete_every);
                let Some(pod) = s.pods.get(index).cloned() else {
                    return Ok(());
                };
                pod.restart();
                self.replace_pod(s, &pod, NEW_IMAGE);
                let paused = (!remaining.is_empty()).then(|| self.held_update(s, &remaining));
                let key = s.key.clone();
                let still = paused.as_ref().map(|p| p.held_pods.join(", "));
                self.targets.update(|targets| {
                    for t in targets.iter_mut().filter(|t| t.key() == key) {
                        t.traits.update_paused = paused.clone().map(Box::new);
                    }
                });
                let after = match still {
                    Some(names) => format!("still held: {names}"),
                    None => {
                        s.by_hand = ByHand::Done;
                        "none left to hold: Kura's controller lifts the hold (status.updatePaused cleared)"
                            .to_owned()
                    }
                };
                tl.at(
                    now,
                    &format!(
                        "  operator: deletes held pod {} of {}: it comes back on {}; {after}",
                        pod.name(),
                        s.id,
                        short_image(NEW_IMAGE)
                    ),
                )?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Kura's controller's `status.updatePaused` for an `OnDelete` hold of
    /// the pods at `held` (indices).
    fn held_update(&self, s: &Server, held: &[usize]) -> UpdatePaused {
        UpdatePaused {
            strategy: "OnDelete".to_owned(),
            partition: None,
            template_image: Some(NEW_IMAGE.to_owned()),
            held_pods: held
                .iter()
                .filter_map(|&i| s.pods.get(i))
                .map(|p| p.name().to_owned())
                .collect(),
        }
    }

    fn inject_faults(&self, servers: &mut [Server], now: Timestamp) {
        for s in servers.iter_mut() {
            if let Some((index, next)) = s.fault.as_mut()
                && now >= *next
                && let Some(pod) = s.pods.get(*index)
            {
                pod.update(|n| n.fd_timeout_count += 1);
                *next = now + signed(self.config.regression_every);
            }
        }
    }

    /// Ticks the wave judge until the wave passes or stops: each tick
    /// rolls the pods that are due, grows the scripted fault, tells the
    /// agent's changed verdicts, builds the wave's inputs, judges them and
    /// tells the verdict.
    async fn run_wave<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        gate: &mut Gate,
        servers: &mut [Server],
        agent_seen: &mut AgentSeen,
        wave: u32,
        started_at: Timestamp,
    ) -> Result<Verdict, DemoError> {
        let mut told = Told {
            last: None,
            at: started_at,
        };
        loop {
            self.sleep(self.config.tick).await;
            let now = self.clock.now();
            self.operate(tl, servers, wave, started_at, now).await?;
            self.roll_due(tl, servers, now)?;
            self.inject_faults(servers, now);
            let all = self.sink.all();
            tell_agent_verdicts(tl, &all, agent_seen, now)?;
            let servers = self.wave_inputs(tl, servers, &all, wave, now)?;
            let verdict = gate.tick(&TickInput {
                now,
                wave,
                wave_started_at: started_at,
                attempt: 0,
                servers,
            })?;
            if self.tell_verdict(tl, &verdict, wave, started_at, now, &mut told)? {
                return Ok(verdict);
            }
            let elapsed = now.duration_since(started_at);
            if elapsed > self.wave_deadline() + STALL_MARGIN {
                return Err(DemoError::Stalled(format!(
                    "wave {wave} ran {} s, past its deadline, without a hard stop",
                    elapsed.as_secs()
                )));
            }
        }
    }

    fn wave_deadline(&self) -> SignedDuration {
        SignedDuration::from_secs(
            i64::try_from(self.config.gate.wave_deadline_seconds).unwrap_or(i64::MAX),
        )
    }

    /// The wave judge's input for every server of this wave and the ones
    /// before it, announcing each server's convergence once.
    fn wave_inputs<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        servers: &mut [Server],
        all: &BTreeMap<InstanceKey, DesiredStatus>,
        wave: u32,
        now: Timestamp,
    ) -> Result<Vec<ServerInput>, DemoError> {
        let mut inputs = Vec::new();
        for s in servers.iter_mut() {
            // Servers of later waves and those outside the rollout are not
            // the wave judge's; a suspended one is passed as it is (its
            // aggregate says so, and the judge leaves it out of scope).
            let Some(server_wave) = s.spec.wave.filter(|w| *w <= wave) else {
                continue;
            };
            let health = all.get(&s.key).map(|d| &*d.health);
            let is_converged =
                s.deployment == Some(Deployment::Succeeded) && converged(health, s.spec.replicas);
            if is_converged
                && !s.converged_announced
                && let Some(h) = health
            {
                s.converged_announced = true;
                let raw: u64 = h.pods.iter().filter_map(|p| p.fd_timeout_count_raw).sum();
                let base = s
                    .baseline
                    .as_ref()
                    .and_then(|b| b.counters.fd_timeout_count);
                tl.at(
                    now,
                    &format!(
                        "  {} converged on {}: fdTimeoutCount {} (baseline {}); the restarted pods' raw \
                         counters sum to {raw}, counter resets absorbed: {}",
                        s.id,
                        short_image(NEW_IMAGE),
                        h.fd_timeout_count,
                        count(base),
                        h.counter_resets
                    ),
                )?;
            }
            inputs.push(ServerInput {
                id: s.id.clone(),
                wave: server_wave,
                converged: is_converged,
                deployment: s.deployment,
                status: ServerStatus::Active,
                baseline: s.baseline.clone(),
                health: health.map(HealthView::from),
            });
        }
        Ok(inputs)
    }

    /// Tells the wave judge's verdict: always a pass or a hard stop (with
    /// its evidence), a soak when it changed or every `progress_every`.
    /// Whether the wave is over.
    fn tell_verdict<W: Write>(
        &self,
        tl: &mut Timeline<'_, W>,
        verdict: &Verdict,
        wave: u32,
        started_at: Timestamp,
        now: Timestamp,
        told: &mut Told,
    ) -> Result<bool, DemoError> {
        let key = (verdict.verdict, verdict.signal, verdict.server_id.clone());
        let changed = told.last.as_ref() != Some(&key);
        let due = now.duration_since(told.at) >= signed(self.config.progress_every);
        told.last = Some(key);
        match verdict.verdict {
            VerdictKind::Pass => {
                let since = verdict
                    .healthy_since
                    .map(|t| stamp(t.duration_since(self.virtual_start)))
                    .unwrap_or_default();
                tl.at(
                    now,
                    &format!(
                        "{}: pass: converged and healthy for {} s without a break (since {since})",
                        wave_label(wave),
                        self.config.gate.soak_for(wave)
                    ),
                )?;
                Ok(true)
            }
            VerdictKind::HardStop => {
                tl.at(
                    now,
                    &format!(
                        "{}: hard_stop ({}) held by {}",
                        wave_label(wave),
                        signal_word(verdict.signal),
                        verdict.server_id.as_deref().unwrap_or("-")
                    ),
                )?;
                for e in &verdict.evidence {
                    tl.at(now, &format!("  evidence: {}", e.summary()))?;
                }
                Ok(true)
            }
            VerdictKind::Soak if changed || due => {
                let deadline_in = (self.wave_deadline() - now.duration_since(started_at))
                    .as_secs()
                    .max(0);
                tl.at(now, &self.soak_line(verdict, wave, deadline_in))?;
                told.at = now;
                Ok(false)
            }
            VerdictKind::Soak => Ok(false),
        }
    }

    /// A soak verdict in words.
    fn soak_line(&self, verdict: &Verdict, wave: u32, deadline_in: i64) -> String {
        match verdict.signal {
            Some(Signal::Soaking) => format!(
                "{}: soak (soaking): converged and healthy, {} s of {} s soak remaining",
                wave_label(wave),
                verdict.remaining_seconds.unwrap_or(0),
                self.config.gate.soak_for(wave)
            ),
            Some(Signal::NotConverged) => {
                let waiting = verdict
                    .evidence
                    .iter()
                    .filter(|e| e.signal == Signal::NotConverged)
                    .count();
                format!(
                    "{}: soak (not_converged): {waiting} server(s) still upgrading; deadline in {deadline_in} s",
                    wave_label(wave)
                )
            }
            other => format!(
                "{}: soak ({}): {}; deadline in {deadline_in} s",
                wave_label(wave),
                signal_word(other),
                verdict
                    .evidence
                    .first()
                    .map(Evidence::summary)
                    .unwrap_or_default()
            ),
        }
    }

    fn outcome(
        &self,
        waves: Vec<WaveOutcome>,
        servers: &[Server],
        mut seen: AgentSeen,
        planned: u32,
    ) -> DemoOutcome {
        let all = self.sink.all();
        let instances = servers
            .iter()
            .map(|s| {
                let d = all.get(&s.key);
                InstanceOutcome {
                    id: s.id.clone(),
                    wave: s.spec.wave,
                    replicas: s.spec.replicas,
                    node_local: s.spec.node_local,
                    operator: s.spec.operator,
                    verdicts: seen.changes.remove(&s.id).unwrap_or_default(),
                    sampled_pods: d.map(|d| d.health.sampled_pods),
                    pod_ips: d
                        .map(|d| {
                            d.health
                                .pods
                                .iter()
                                .filter_map(|p| p.ip.as_deref().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default(),
                    spec_image: d.map(|d| d.gate.target_image.clone()).unwrap_or_default(),
                    verdict: d.map(|d| d.gate.verdict),
                    signal: d.and_then(|d| d.gate.signal),
                    fd_timeout_count: d.map(|d| d.health.fd_timeout_count),
                    baseline_fd_timeout_count: d.and_then(|d| d.gate.baseline.fd_timeout_count),
                    counter_resets: d.map(|d| d.health.counter_resets),
                    shadow: self
                        .view
                        .instance(&s.key)
                        .and_then(|v| v.shadow)
                        .map(|sh| (sh.gate.verdict, sh.gate.signal)),
                }
            })
            .collect();
        DemoOutcome {
            waves,
            planned_waves: planned,
            regressing_server: servers
                .iter()
                .find(|s| s.spec.regresses)
                .map(|s| s.id.clone())
                .unwrap_or_default(),
            instances,
            real_duration: self.real_start.elapsed(),
            virtual_duration: self.clock.now().duration_since(self.virtual_start),
            debug_url: self.debug_url(),
            port_forwards: self.kubelet.forwards(),
        }
    }

    fn summary(&self, outcome: &DemoOutcome) -> Vec<String> {
        let mut lines = vec![format!(
            "summary ({:.1} s real, {} simulated):",
            outcome.real_duration.as_secs_f64(),
            stamp(outcome.virtual_duration)
        )];
        for w in &outcome.waves {
            let v = &w.verdict;
            let why = match v.verdict {
                VerdictKind::Pass => format!(
                    "after {} s of soak: {}",
                    self.config.gate.soak_for(w.wave),
                    w.servers.join(", ")
                ),
                _ => {
                    let cause = v
                        .evidence
                        .iter()
                        .find(|e| e.signal != Signal::WaveDeadlineExceeded)
                        .map(Evidence::summary)
                        .unwrap_or_default();
                    format!("{}: {cause}", signal_word(v.signal))
                }
            };
            lines.push(format!(
                "  {:<16} {:<10} {why}",
                wave_label(w.wave),
                v.verdict.as_str()
            ));
        }
        let played = outcome.waves.len();
        for wave in u32::try_from(played).unwrap_or(u32::MAX)..outcome.planned_waves {
            lines.push(format!("  {:<16} not started", wave_label(wave)));
        }
        let healthy = outcome
            .instances
            .iter()
            .filter(|i| i.verdict == Some(AgentVerdict::Healthy))
            .count();
        let others: Vec<String> = outcome
            .instances
            .iter()
            .filter(|i| i.verdict != Some(AgentVerdict::Healthy))
            .map(|i| {
                format!(
                    "{} {} ({})",
                    i.id,
                    i.verdict.map_or("unpublished", AgentVerdict::as_str),
                    signal_word(i.signal)
                )
            })
            .collect();
        lines.push(format!(
            "  agent verdicts (status.rolloutGate): {healthy} healthy{}",
            if others.is_empty() {
                String::new()
            } else {
                format!("; {}", others.join("; "))
            }
        ));
        for i in &outcome.instances {
            lines.extend(self.part_line(i, outcome.port_forwards));
        }
        if self.config.shadow_gate.is_some() {
            let disagreeing: Vec<String> = outcome
                .instances
                .iter()
                .filter_map(|i| {
                    let (verdict, signal) = i.shadow?;
                    (Some(verdict) != i.verdict || signal != i.signal).then(|| {
                        format!(
                            "{} {} ({}) where the live verdict is {} ({})",
                            i.id,
                            verdict.as_str(),
                            signal_word(signal),
                            i.verdict.map_or("unpublished", AgentVerdict::as_str),
                            signal_word(i.signal)
                        )
                    })
                })
                .collect();
            lines.push(format!(
                "  shadow verdicts (--shadow-gate-config, never published): {}",
                if disagreeing.is_empty() {
                    "every instance as the live verdict".to_owned()
                } else {
                    format!("{} disagree: {}", disagreeing.len(), disagreeing.join("; "))
                }
            ));
        }
        lines.push(if outcome.played_as_designed() {
            "the story played as designed: the canary passed and the regression was stopped"
                .to_owned()
        } else {
            "the story did NOT play as designed (see the timeline above)".to_owned()
        });
        lines
    }
}

impl Demo {
    /// The summary's line on an instance apart from the usual case: how
    /// its node-local pods were reached, its suspension, its held update.
    fn part_line(&self, i: &InstanceOutcome, port_forwards: u64) -> Option<String> {
        let since = |t: Timestamp| stamp(t.duration_since(self.virtual_start));
        match i.operator {
            Some(OperatorAction::Suspend { .. }) => Some(format!(
                "  suspended {}: {} ({}); out of {}'s scope since its suspension",
                i.id,
                i.verdict.map_or("unpublished", AgentVerdict::as_str),
                signal_word(i.signal),
                i.wave.map_or_else(|| "any wave".to_owned(), wave_label)
            )),
            Some(OperatorAction::UpdateByHand { .. }) => {
                let held = |c: &VerdictChange| {
                    c.verdict == AgentVerdict::HardStop && c.signal == Some(Signal::UpdatePaused)
                };
                let from = i.verdicts.iter().position(held)?;
                let until = i.verdicts[from..]
                    .iter()
                    .find(|c| !held(c))
                    .map_or_else(|| "the end".to_owned(), |c| since(c.at));
                Some(format!(
                    "  held update {}: hard_stop (update_paused) from {} to {until}, now {} ({}); \
                     outside the waves, the wave judge never saw it",
                    i.id,
                    since(i.verdicts[from].at),
                    i.verdict.map_or("unpublished", AgentVerdict::as_str),
                    signal_word(i.signal)
                ))
            }
            None if i.node_local => Some(format!(
                "  node-local {}: {}/{} pods sampled through the simulated kubelet's port-forwards \
                 ({port_forwards} opened), never by pod IP ({})",
                i.id,
                i.sampled_pods.unwrap_or(0),
                i.replicas,
                i.pod_ips.join(", ")
            )),
            None => None,
        }
    }
}

/// What the wave's timeline last told: the verdict, and when a soak line
/// was last printed.
struct Told {
    last: Option<(VerdictKind, Option<Signal>, Option<String>)>,
    at: Timestamp,
}

/// Tells every instance whose own verdict (`status.rolloutGate`, the
/// agent's) changed since `seen`.
fn tell_agent_verdicts<W: Write>(
    tl: &mut Timeline<'_, W>,
    all: &BTreeMap<InstanceKey, DesiredStatus>,
    seen: &mut AgentSeen,
    now: Timestamp,
) -> Result<(), DemoError> {
    for (key, desired) in all {
        let id = key.to_string();
        let current = (desired.gate.verdict, desired.gate.signal);
        if seen.last.get(&id) != Some(&current) {
            let why = desired
                .gate
                .evidence
                .first()
                .map(|e| format!(": {}", e.summary()))
                .unwrap_or_default();
            tl.at(
                now,
                &format!(
                    "  agent: {id} status.rolloutGate {} ({}){why}",
                    current.0.as_str(),
                    signal_word(current.1)
                ),
            )?;
            seen.changes
                .entry(id.clone())
                .or_default()
                .push(VerdictChange {
                    at: now,
                    verdict: current.0,
                    signal: current.1,
                    evidence: desired.gate.evidence.clone(),
                });
            seen.last.insert(id, current);
        }
    }
    Ok(())
}
