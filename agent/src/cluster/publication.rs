//! `auto`'s look at the cluster at start (rollout-health.md, "Choosing"):
//! the installed `KuraInstance` CRD (does it declare `status.rolloutGate`?)
//! and, when it does, the instances' `managedFields` (does another manager
//! write `status.rolloutHealth`?). The decision itself is
//! [`choose_target`], pure.
//!
//! The instances are read as metadata only (their `managedFields` are
//! there, their spec and status are not). A replica that watches only its
//! own units reads one page ([`Scan::FirstPage`]): a replica joining a set
//! lists only the units it gains, not the fleet, and Kura's controller
//! publishes on every instance it reconciles, so a page of them shows it;
//! a later one is the contest watch's to see (`StatusContested`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::model::{
    CrdFinding, TargetChoice, TargetRequest, choose_target, crd_declares_rollout_gate,
};

use super::discovery::api_in;
use super::instances::key_of_meta;
use super::wire::{InstanceObject, other_rollout_health_manager_in};

/// The `KuraInstance` CRD's name.
pub const KURA_INSTANCE_CRD: &str = "kurainstances.kura.tuist.dev";

/// Instances per page while looking for another manager.
const PAGE: u32 = 500;

/// How much of the fleet `auto` reads for another manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Every instance (an agent that lists every instance anyway).
    Everything,
    /// The first page of each namespace scope ([`PAGE`] instances): a
    /// replica watching only its own units.
    FirstPage,
}

/// Chooses the publication target: `request` when it names one; else
/// from the installed CRD and, when that is this project's, one list of
/// the instances in `namespaces` (all when empty) read for another manager
/// of `status.rolloutHealth`. A failed list counts as no other manager
/// seen (the contest watch catches one later).
pub async fn choose(
    client: &Client,
    namespaces: &[String],
    selector: Option<&str>,
    request: TargetRequest,
    scan: Scan,
) -> TargetChoice {
    if matches!(request, TargetRequest::Fixed(_)) {
        return choose_target(request, &CrdFinding::DeclaresRolloutGate, None);
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let finding = match crds.get(KURA_INSTANCE_CRD).await {
        Ok(crd) => match serde_json::to_value(&crd) {
            Ok(v) if crd_declares_rollout_gate(&v) => CrdFinding::DeclaresRolloutGate,
            Ok(_) => CrdFinding::LacksRolloutGate,
            Err(e) => CrdFinding::Unreadable(e.to_string()),
        },
        Err(kube::Error::Api(s)) => {
            CrdFinding::Unreadable(format!("{} {}: {}", s.code, s.reason, s.message))
        }
        Err(e) => CrdFinding::Unreadable(e.to_string()),
    };
    if finding != CrdFinding::DeclaresRolloutGate {
        return choose_target(request, &finding, None);
    }
    let contested = match other_manager(client, namespaces, selector, scan).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "listing the instances for another manager of status.rolloutHealth failed; the contest watch will see one later");
            None
        }
    };
    let contested_ref = contested.as_ref().map(|(k, m)| (k.as_str(), m.as_str()));
    choose_target(request, &finding, contested_ref)
}

/// The first instance (`namespace/name`) whose `managedFields` show another
/// manager on `status.rolloutHealth`, and that manager.
async fn other_manager(
    client: &Client,
    namespaces: &[String],
    selector: Option<&str>,
    scan: Scan,
) -> Result<Option<(String, String)>, kube::Error> {
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|ns| Some(ns.as_str())).collect()
    };
    let apis = scopes
        .into_iter()
        .map(|scope| api_in::<InstanceObject>(client, scope));
    for api in apis {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(sel) = selector {
            params = params.labels(sel);
        }
        loop {
            let page = api.list_metadata(&params).await?;
            for obj in &page.items {
                if let (Some(manager), Some(key)) = (
                    other_rollout_health_manager_in(&obj.metadata),
                    key_of_meta(&obj.metadata),
                ) {
                    return Ok(Some((key.to_string(), manager.to_owned())));
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) if scan == Scan::Everything => {
                    params = params.continue_token(&token);
                }
                _ => break,
            }
        }
    }
    Ok(None)
}
