//! The demo's orchestrator: schedules waves, captures baselines, upgrades
//! pods, injects the regression, ticks the wave judge and prints the
//! timeline.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_gate::{
    Baseline, Deployment, Gate, HealthView, ServerInput, ServerStatus, TickInput, Verdict,
    VerdictKind,
};
use kura_schemas::{AgentVerdict, Evidence, RolloutHealth, Signal};

use super::fleet::{DemoInstance, NEW_IMAGE, OLD_IMAGE, pod_target, wave_count};
use super::outcome::{DemoOutcome, InstanceOutcome, WaveOutcome};
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

fn verdict_word(kind: VerdictKind) -> &'static str {
    match kind {
        VerdictKind::Pass => "pass",
        VerdictKind::Soak => "soak",
        VerdictKind::HardStop => "hard_stop",
    }
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
                .filter(|i| i.wave == wave)
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
        let mut agent_seen: BTreeMap<String, (AgentVerdict, Option<Signal>)> = self
            .sink
            .all()
            .into_iter()
            .map(|(k, d)| (k.to_string(), (d.gate.verdict, d.gate.signal)))
            .collect();

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
                    .filter(|s| s.spec.wave == wave)
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

        let outcome = self.outcome(waves, &servers, planned);
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
            "  fleet:  {} instances ({} accounts × {} regions), {} pods serving /status/rollout on {where_}",
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
                .filter(|i| i.wave == wave)
                .map(DemoInstance::id)
                .collect();
            tl.plain(&format!("  {:<16} {}", wave_label(wave), ids.join(", ")))?;
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
            .filter(|s| s.spec.wave == wave)
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
        for s in servers.iter_mut().filter(|s| s.spec.wave == wave) {
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
            .filter(|s| s.spec.wave == wave)
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
            let target = pod_target(&pod, NEW_IMAGE);
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
        agent_seen: &mut BTreeMap<String, (AgentVerdict, Option<Signal>)>,
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
        for s in servers.iter_mut().filter(|s| s.spec.wave <= wave) {
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
                wave: s.spec.wave,
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

    fn outcome(&self, waves: Vec<WaveOutcome>, servers: &[Server], planned: u32) -> DemoOutcome {
        let all = self.sink.all();
        let instances = servers
            .iter()
            .map(|s| {
                let d = all.get(&s.key);
                InstanceOutcome {
                    id: s.id.clone(),
                    wave: s.spec.wave,
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
                verdict_word(v.verdict)
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
                    i.verdict.map_or("unpublished", agent_verdict_word),
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
                            agent_verdict_word(verdict),
                            signal_word(signal),
                            i.verdict.map_or("unpublished", agent_verdict_word),
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
    seen: &mut BTreeMap<String, (AgentVerdict, Option<Signal>)>,
    now: Timestamp,
) -> Result<(), DemoError> {
    for (key, desired) in all {
        let id = key.to_string();
        let current = (desired.gate.verdict, desired.gate.signal);
        if seen.get(&id) != Some(&current) {
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
                    agent_verdict_word(current.0),
                    signal_word(current.1)
                ),
            )?;
            seen.insert(id, current);
        }
    }
    Ok(())
}

fn agent_verdict_word(v: AgentVerdict) -> &'static str {
    match v {
        AgentVerdict::Healthy => "healthy",
        AgentVerdict::Unhealthy => "unhealthy",
        AgentVerdict::HardStop => "hard_stop",
        AgentVerdict::Suspended => "suspended",
    }
}
