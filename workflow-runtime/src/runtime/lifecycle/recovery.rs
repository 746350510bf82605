//! Recovery (ENG-25, ENG-26): runs again the instances a process left mid-run or never ran,
//! claimed page by page with their lease, and resumes the parents whose child finished
//! before a crash (ACT-24). The recovery sweep does this in the background.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;

use crate::base::{lock, now_micros};
use crate::engine::executor::Link;
use crate::runtime::document::{decode_document, load_state};
use crate::runtime::lease::LeaseGuard;
use crate::runtime::links::Links;
use crate::runtime::outcomes::RecoveryReport;
use crate::runtime::run_path::{RunOptions, RunPath};
use crate::store::{InstanceFilter, InstanceStatus, InstanceSubStatus, StoreError};

/// Recovery (see the module docs).
pub(crate) struct Recovery {
    run_path: Arc<RunPath>,
    links: Arc<Links>,
    /// Set when the runtime shuts down: a pass stops between instances.
    stop: watch::Receiver<bool>,
    /// Serializes recovery passes (the sweep and `Runtime::recover`).
    passes: tokio::sync::Mutex<()>,
    /// Never-run instances a recovery sweep left to their creator, with when it first saw
    /// each and the token of the lease the sweep handed back.
    fresh: Mutex<HashMap<String, (Instant, u64)>>,
    /// Never-run instances no creator runs (ST-37): a sweep runs them at once.
    unclaimed: Mutex<HashSet<String>>,
}

impl Recovery {
    pub(crate) fn new(
        run_path: Arc<RunPath>,
        links: Arc<Links>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Self {
            run_path,
            links,
            stop,
            passes: tokio::sync::Mutex::new(()),
            fresh: Mutex::new(HashMap::new()),
            unclaimed: Mutex::new(HashSet::new()),
        }
    }

    /// Runs again every runnable instance whose lease is free or expired, and resumes the
    /// orphaned parents: see `Runtime::recover`.
    pub(crate) async fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        self.pass(&mut report, false).await?;
        self.resume_orphaned_parents(&mut report).await?;
        Ok(report)
    }

    /// One recovery pass: claims the runnable instances page by page and runs each under
    /// the claimed lease. One that another run of this process holds is handed back at once
    /// (that run takes it). Passes of one runtime are serialized. `sweeping`: a pass of the
    /// background sweep, which leaves new instances to their creator.
    pub(crate) async fn pass(
        &self,
        report: &mut RecoveryReport,
        sweeping: bool,
    ) -> Result<(), StoreError> {
        const PAGE: usize = 16;
        let _pass = self.passes.lock().await;
        let run_path = &*self.run_path;
        let store = run_path.store();
        if sweeping && !self.any_runnable().await? {
            return Ok(());
        }
        let mut seen = HashSet::new();
        loop {
            let claimed = LeaseGuard::claim_runnable(
                store,
                run_path.owner(),
                run_path.lease_settings(),
                PAGE,
            )
            .await?;
            if claimed.is_empty() {
                break;
            }
            let mut any_new = false;
            for (guard, sub_status) in claimed {
                let id = guard.instance_id().to_owned();
                let new = seen.insert(id.clone());
                if *self.stop.borrow()
                    || !new
                    || (sweeping && self.left_to_creator(&guard, sub_status).await)
                {
                    guard.release().await;
                    continue;
                }
                let Some(turn) = run_path.try_turn(&id) else {
                    guard.release().await;
                    continue;
                };
                any_new = true;
                let definition = store
                    .load_instance_text(&id)
                    .await
                    .map(|r| r.definition_name)
                    .unwrap_or_default();
                let run =
                    RunOptions::to(crate::engine::executor::RunTarget::None).under(guard, &turn);
                match run_path.run(&id, run).await {
                    Ok(Some(started)) => {
                        // ENG-25, ENG-26: what an operator looks for after a crash.
                        tracing::info!(
                            definition = definition.as_str(),
                            instance = id.as_str(),
                            interrupted = sub_status == Some(InstanceSubStatus::Executing),
                            status = %started.status,
                            "instance recovered"
                        );
                        report.recovered.push(started);
                    }
                    Ok(None) => {}
                    Err(error) => report.failed.push(error),
                }
                drop(turn);
            }
            self.links.process().await;
            if !any_new {
                break;
            }
        }
        Ok(())
    }

    /// Whether a recovery sweep may find work (ENG-25): a `Running` instance whose lease is
    /// absent or expired. One read of the first page of `Running` instances, so that a sweep
    /// with nothing to recover writes nothing (claiming is a write, even of no rows); a full
    /// page, or a row that does not decode, is left to the claim to sort out.
    async fn any_runnable(&self) -> Result<bool, StoreError> {
        const PROBE: usize = 100;
        let page = self
            .run_path
            .store()
            .list_instances(InstanceFilter {
                status: Some(InstanceStatus::Running),
                limit: PROBE,
                ..InstanceFilter::default()
            })
            .await?;
        let now = now_micros();
        Ok(page.len() >= PROBE
            || page.iter().any(|listed| match &listed.summary {
                Ok(summary) => summary.lease.as_ref().is_none_or(|l| l.expires_at <= now),
                Err(_) => true,
            }))
    }

    /// Whether a sweep leaves this claimed instance to the process that created it: never
    /// leased by anyone but sweeps (the claim's token is the first, or follows the one this
    /// sweep handed back), never run (`Running/Pending` at version 1), and first seen so
    /// less than a lease TTL ago. The creator is about to run it (it waits for the lease the
    /// sweep hands back); if it died first, a sweep a lease TTL later runs it. An instance
    /// whose first run was interrupted had its lease taken by that run: it runs at once.
    async fn left_to_creator(
        &self,
        guard: &LeaseGuard<'_>,
        sub_status: Option<InstanceSubStatus>,
    ) -> bool {
        let id = guard.instance_id();
        if lock(&self.unclaimed).remove(id) {
            return false;
        }
        let ttl = self.run_path.lease_settings().ttl;
        let now = Instant::now();
        let seen_before = {
            let mut fresh = lock(&self.fresh);
            // Forget what was seen long ago (it ran, or it is recovered now).
            fresh.retain(|_, (seen, _)| now.duration_since(*seen) < ttl * 2);
            fresh.get(id).copied()
        };
        let only_sweeps =
            guard.token() == 1 || seen_before.is_some_and(|(_, token)| guard.token() == token + 1);
        if sub_status != Some(InstanceSubStatus::Pending) || !only_sweeps {
            lock(&self.fresh).remove(id);
            return false;
        }
        let never_run = self
            .run_path
            .store()
            .load_instance_text(id)
            .await
            .is_ok_and(|record| record.version == 1);
        let mut fresh = lock(&self.fresh);
        if !never_run {
            fresh.remove(id);
            return false;
        }
        let first_seen = seen_before.map_or(now, |(seen, _)| seen);
        fresh.insert(id.to_owned(), (first_seen, guard.token()));
        now.duration_since(first_seen) < ttl
    }

    /// ACT-24 after a crash: a child whose final commit was written but whose parent was not
    /// resumed yet (the resume follows the commit in process). Each suspended parent waiting on
    /// a `wf.sub_workflow` bookmark whose child is final is resumed with the child's result.
    async fn resume_orphaned_parents(&self, report: &mut RecoveryReport) -> Result<(), StoreError> {
        let store = self.run_path.store();
        // Only the bookmarks of parents waiting on a child (an indexed query), never every
        // suspended instance: start-up stays independent of how many are suspended.
        let mut after = None;
        let mut seen = HashSet::new();
        loop {
            let page = store.find_child_waits(after.clone(), 500).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.bookmark_id.clone());
            for row in page {
                if !seen.insert(row.instance_id.clone()) {
                    continue;
                }
                let Ok(record) = store.load_instance_text(&row.instance_id).await else {
                    continue;
                };
                if record.status != InstanceStatus::Suspended {
                    continue;
                }
                let Ok(parent) = decode_document(&record.instance_id, &record.state) else {
                    continue;
                };
                for bookmark in &parent.bookmarks {
                    if bookmark.name != crate::engine::names::Reserved::SubWorkflow.name() {
                        continue;
                    }
                    let Some(child) = bookmark
                        .payload
                        .get("child_instance_id")
                        .and_then(Value::as_str)
                    else {
                        continue;
                    };
                    let Ok(Some(child)) = load_state(store, child).await else {
                        continue;
                    };
                    if !child.status.is_final() {
                        continue;
                    }
                    self.run_path.outbox().push(Link::Resume {
                        instance_id: parent.instance_id.clone(),
                        bookmark_id: bookmark.id.clone(),
                        payload: serde_json::json!({
                            "child_instance_id": child.instance_id,
                            "status": child.status.to_string(),
                            "output": child.output,
                        }),
                    });
                    report.parents_resumed.push(parent.instance_id.clone());
                }
            }
        }
        self.links.process().await;
        Ok(())
    }
}

/// The recovery sweep (ENG-25, ENG-26): one pass at once, then one every `every`, each
/// running again the `Running` instances whose lease is free or expired (a process died
/// during their run, or before their first one): one indexed query, no other instance is
/// read. (A parent whose child finished before a crash is resumed by the queue: the child's
/// final commit queued its result, ACT-24.)
///
/// A store that notices a dead process (ST-36: PostgreSQL) hints `OwnerGone` once it
/// released what that process held: a pass runs at once, so its instances are taken over in
/// about a second rather than a lease TTL.
pub(crate) async fn recovery_sweep(
    weak: Weak<Recovery>,
    mut stop: watch::Receiver<bool>,
    mut hints: tokio::sync::broadcast::Receiver<crate::store::WakeUp>,
    every: Duration,
) {
    loop {
        {
            let Some(recovery) = weak.upgrade() else {
                return;
            };
            if *stop.borrow() {
                return;
            }
            let mut report = RecoveryReport::default();
            if let Err(error) = recovery.pass(&mut report, true).await {
                tracing::warn!(%error, "recovery sweep: claiming runnable instances failed");
            }
            log_report(&report);
        }
        let next = tokio::time::Instant::now() + every;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => break,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
                hint = hints.recv() => match hint {
                    Ok(crate::store::WakeUp::OwnerGone { owner }) => {
                        tracing::info!(%owner, "recovery sweep: a process was found dead; taking its instances over");
                        break;
                    }
                    // ST-37: created in an application's transaction, no creator runs it.
                    Ok(crate::store::WakeUp::InstanceUnclaimed { id }) => {
                        if let Some(recovery) = weak.upgrade() {
                            let mut unclaimed = lock(&recovery.unclaimed);
                            // Those another process ran are never claimed here: bounded.
                            if unclaimed.len() >= 4096 {
                                unclaimed.clear();
                            }
                            unclaimed.insert(id);
                        }
                        break;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep_until(next).await;
                        break;
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                },
            }
        }
    }
}

fn log_report(report: &RecoveryReport) {
    for error in &report.failed {
        tracing::warn!(%error, "recovery sweep: an interrupted instance could not run");
    }
    for parent in &report.parents_resumed {
        tracing::info!(instance = %parent, "recovery sweep: resumed a parent whose child had finished");
    }
}
