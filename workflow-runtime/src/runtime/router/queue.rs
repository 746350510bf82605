//! The bookmark queue and its worker (RT-25 to RT-31).
//!
//! `Runtime::start_workers` indexes the triggers (RT-9) and spawns one tokio task that
//! delivers queued stimuli (RT-25 to RT-29). It is woken by a doorbell of capacity one (a
//! [`tokio::sync::Notify`]: many rings before a pass cost one pass, RT-26), rung by every
//! enqueue of this process and by the store's `QueueChanged` hints (a commit that added
//! bookmarks, here or in another process), and by a periodic sweep
//! (`RuntimeBuilder::inbox_sweep`, default 10 s). It
//! stops on `Runtime::shutdown`, and is aborted when the last clone of the runtime is
//! dropped (it holds only a weak reference between passes). Without `start_workers`, queued
//! stimuli stay in the store until `Runtime::deliver_inbox` is called.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::Router;
use super::delivery::Origin;
use crate::base::now_micros;
use crate::engine::executor::{RunError, RunTarget};
use crate::routing::{BOOKMARK_PAGE, Rejection, Stimulus, Targets};
use crate::runtime::run_path::RunOptions;
use crate::store::{BookmarkQuery, DeadLetterReason, QueueItem, StoreError, WakeUp};
use crate::trace::TraceParent;

/// Queue items claimed per page (RT-27).
const QUEUE_PAGE: usize = 50;

/// What one queue pass did.
#[derive(Debug, Default)]
pub(crate) struct QueuePass {
    /// Items delivered (and deleted).
    pub(crate) delivered: usize,
    /// Items put back in the queue (released, or a failed attempt recorded): each such write
    /// is a `QueueChanged` hint of the store that this pass, not a new bookmark, caused.
    pub(crate) put_back: usize,
    /// The earliest `expires_at` of the items this pass left in the queue that are not held
    /// (RT-28): when they are to be dead-lettered, whatever happens meanwhile.
    pub(crate) expires_at: Option<crate::store::Micros>,
    /// An item was left for a reason that may pass without a change anyone is told of (a
    /// transient failure, a failed attempt, an instance busy in a run that may yet fail): the
    /// next sweep looks again.
    pub(crate) retry: bool,
}

impl QueuePass {
    /// Notes an item this pass left in the queue.
    fn left(&mut self, item: &QueueItem) {
        if !item.held {
            self.expires_at = Some(
                self.expires_at
                    .map_or(item.expires_at, |at| at.min(item.expires_at)),
            );
        }
    }
}

/// How an item a pass could not deliver is put back when the pass ends (RT-27).
#[derive(Debug, Clone, Copy)]
enum PutBack {
    /// Released with a `QueueChanged` wake-up: another process may deliver it.
    Announced,
    /// Released without one: put back again by a process that cannot deliver it.
    Silently,
}

/// Why a queued item could not be delivered this time: recorded as a failed attempt (RT-28).
#[derive(Debug, thiserror::Error)]
enum DeliveryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Run(RunError),
}

/// RT-22: whether a store failure is one the next pass may not meet (the store unavailable
/// for a moment, the instance busy, a commit refused because another run moved it on or took
/// its lease). Such a failure puts the item back without counting an attempt: only the
/// queue TTL (RT-28) bounds how long a transient trouble may last, so a store that fails three
/// passes in a row does not dead-letter a stimulus its send already acknowledged.
fn transient(error: &StoreError) -> bool {
    error.is_transient() || error.is_conflict() || matches!(error, StoreError::Fenced { .. })
}

impl DeliveryError {
    fn is_transient(&self) -> bool {
        match self {
            Self::Store(error) | Self::Run(RunError::Store { error, .. }) => transient(error),
            Self::Run(_) => false,
        }
    }
}

impl Router {
    /// One pass of the bookmark queue (RT-27, RT-28): expired items become dead letters
    /// `Expired`; every other item is offered, oldest first, to the bookmarks its look-back
    /// admits (RT-31: sent at or after the instance's `origin_at`, `SinceOrigin`), and deleted
    /// once delivered. Each pending item is visited at most once per pass. Returns how many
    /// items were delivered. The worker calls it; tests and tools may too.
    pub(crate) async fn deliver_inbox(&self) -> Result<usize, StoreError> {
        Ok(self.queue_pass().await?.delivered)
    }

    /// [`Router::deliver_inbox`], with what the worker needs to know (RT-29). Items are
    /// claimed a page at a time, as the pass comes to them, for an instance lease TTL; the
    /// claim of the item being delivered is renewed as a lease is, and an item's claim is
    /// renewed (or taken back, if it lapsed and nobody took it) before its delivery begins,
    /// so no other process delivers an item this pass still delivers. When one delivery
    /// takes longer than a lease renewal period, the rest of its page is put back, so other
    /// processes need not wait for this one. Items this pass could not deliver are put back
    /// at its end, so each item is visited at most once per pass. A shutdown stops the pass
    /// between items; the items left are put back. The passes of one runtime are serialized.
    pub(crate) async fn queue_pass(&self) -> Result<QueuePass, StoreError> {
        let mut parked = self.queue_passes.lock().await;
        let store = &self.store;
        let now = now_micros();
        loop {
            let expired = store.expire_queue(now, 500).await?;
            if expired > 0 {
                self.run_path
                    .metrics()
                    .dead_lettered(DeadLetterReason::Expired, expired);
                // RT-28: nothing waited for them within their time to live.
                tracing::warn!(
                    count = expired,
                    reason = "expired",
                    "stimuli dead-lettered: no instance took them within their time to live"
                );
            }
            if expired < 500 {
                break;
            }
        }
        let mut pass = QueuePass::default();
        let mut seen = std::collections::HashSet::new();
        let mut later = Vec::new();
        let result = self
            .claim_and_deliver(&mut parked, &mut seen, &mut pass, &mut later)
            .await;
        // Put back what this pass holds and did not deliver, also after a failure.
        let owner = self.run_path.owner();
        for (item_id, settle) in later {
            match settle {
                PutBack::Announced => {
                    store.release_queue_item(&item_id, owner).await?;
                    pass.put_back += 1;
                }
                PutBack::Silently => store.park_queue_item(&item_id, owner).await?,
            }
        }
        result?;
        // Every item seen this pass was claimed by it: an item parked before and not seen now
        // was settled, or is claimed elsewhere (then it is announced again once, which is
        // harmless).
        parked.retain(|id| seen.contains(id));
        if pass.delivered > 0 {
            self.links.process().await;
        }
        Ok(pass)
    }

    /// The pages of one pass (see [`Router::queue_pass`]); `later` collects the items to put
    /// back when it ends.
    async fn claim_and_deliver(
        &self,
        parked: &mut std::collections::HashSet<String>,
        seen: &mut std::collections::HashSet<String>,
        pass: &mut QueuePass,
        later: &mut Vec<(String, PutBack)>,
    ) -> Result<(), StoreError> {
        let store = &self.store;
        let owner = self.run_path.owner();
        let claim_ttl = self.run_path.lease_settings().ttl_micros();
        loop {
            let page = store
                .claim_queue_page(owner, now_micros(), claim_ttl, QUEUE_PAGE)
                .await?;
            let claimed_at = tokio::time::Instant::now();
            let renew_every = self.run_path.lease_settings().renew_every;
            let done = page.len() < QUEUE_PAGE;
            let mut fresh = 0usize;
            // Whether the rest of this page was put back during a long delivery.
            let mut rest_released = false;
            for (index, item) in page.iter().enumerate() {
                if !seen.insert(item.item_id.clone()) {
                    // Claimed again this pass (put back after a failed attempt, or its
                    // claim lapsed during a long delivery): it waits for the next pass.
                    later.push((item.item_id.clone(), PutBack::Silently));
                    continue;
                }
                fresh += 1;
                if self.stopping() {
                    later.push((item.item_id.clone(), PutBack::Announced));
                    continue;
                }
                // RT-29: once the page's claims are a renewal period old (or were put back
                // during a long delivery), an item's claim is renewed before its delivery
                // begins: an item another process claimed (or delivered) meanwhile is its.
                let at = now_micros();
                if (rest_released || claimed_at.elapsed() >= renew_every)
                    && !store
                        .renew_queue_claim(&item.item_id, owner, at, at.saturating_add(claim_ttl))
                        .await?
                {
                    continue;
                }
                let rest = if rest_released {
                    &[][..]
                } else {
                    page.get(index + 1..).unwrap_or_default()
                };
                let (handled, released) = self
                    .holding(item, rest, self.deliver_one(item, parked, pass, later))
                    .await;
                if released.is_some() {
                    rest_released = true;
                }
                pass.put_back += released.unwrap_or(0);
                handled?;
            }
            if done || fresh == 0 || self.stopping() {
                return Ok(());
            }
        }
    }

    /// Runs `work` on `item` while keeping its claim (RT-29): renewed every lease renewal
    /// period; at the first renewal the claims on `rest` (the page's items not begun) are
    /// released, so another process may deliver them while this delivery lasts. Returns
    /// what `work` returned and, if `rest` was released, how many items were.
    async fn holding<T>(
        &self,
        item: &QueueItem,
        rest: &[QueueItem],
        work: impl Future<Output = T>,
    ) -> (T, Option<usize>) {
        let owner = self.run_path.owner();
        let settings = self.run_path.lease_settings();
        let claim_ttl = settings.ttl_micros();
        let mut work = std::pin::pin!(work);
        let mut released = None;
        loop {
            tokio::select! {
                out = &mut work => return (out, released),
                () = tokio::time::sleep(settings.renew_every) => {
                    let at = now_micros();
                    match self
                        .store
                        .renew_queue_claim(&item.item_id, owner, at, at.saturating_add(claim_ttl))
                        .await
                    {
                        Ok(true) => {}
                        Ok(false) => tracing::debug!(item = %item.item_id, "queue: the claim of an item being delivered is gone (delivered by its commit, or taken over)"),
                        Err(error) => tracing::warn!(item = %item.item_id, %error, "queue: renewing the claim of an item being delivered failed"),
                    }
                    if released.is_none() {
                        let mut count = 0;
                        for other in rest {
                            match self.store.release_queue_item(&other.item_id, owner).await {
                                Ok(()) => count += 1,
                                Err(error) => tracing::warn!(item = %other.item_id, %error, "queue: putting back an item during a long delivery failed; its claim lapses"),
                            }
                        }
                        released = Some(count);
                    }
                }
            }
        }
    }

    /// Delivers, routes, rejects or defers one claimed item.
    async fn deliver_one(
        &self,
        item: &QueueItem,
        parked: &mut std::collections::HashSet<String>,
        pass: &mut QueuePass,
        later: &mut Vec<(String, PutBack)>,
    ) -> Result<(), StoreError> {
        let store = &self.store;
        let now = now_micros();
        let targets: Targets = serde_json::from_value(item.targets.clone()).unwrap_or_default();
        if targets.route {
            // RT-23: route it as an inline send; unmatched, it is queued anew (same
            // stimulus id) and this item deleted.
            let stimulus = Stimulus {
                name: item.name.clone(),
                key: targets.key,
                instance_id: targets.instance_id,
                payload: item.payload.clone(),
                correlation_id: item.correlation_id.clone(),
                bookmark_id: targets.bookmark_id,
                idempotency_key: None,
                ttl: Some(Duration::from_micros(
                    u64::try_from(item.expires_at.saturating_sub(item.sent_at)).unwrap_or(0),
                )),
                inbox: true,
                via_inbox: false,
                debounce: None,
                traceparent: TraceParent::from_stored(targets.traceparent.as_deref()),
                invalid: None,
            };
            match self
                .route(
                    &stimulus,
                    &item.hash,
                    &item.stimulus_id,
                    item.sent_at,
                    Origin::Stable,
                    None,
                )
                .await
            {
                Ok(report) => {
                    store.ack_queue_item(&item.item_id).await?;
                    pass.delivered += 1;
                    // Routed: the instances it started or resumed (unmatched, it was
                    // queued anew and is counted when that item is delivered).
                    self.run_path
                        .metrics()
                        .delivered(report.started.len() + report.resumed.len());
                }
                Err(error) => {
                    let transient = match &error {
                        crate::routing::SendError::Store(error)
                        | crate::routing::SendError::Run(RunError::Store { error, .. }) => {
                            transient(error)
                        }
                        _ => false,
                    };
                    pass.retry = true;
                    if transient {
                        tracing::warn!(item = %item.item_id, %error, "queue: routing an enqueued stimulus failed for a transient reason; the item waits for the next pass");
                        pass.left(item);
                        later.push((item.item_id.clone(), PutBack::Announced));
                    } else {
                        tracing::warn!(item = %item.item_id, %error, "queue: routing an enqueued stimulus failed");
                        store
                            .record_queue_failure(&item.item_id, &error.to_string(), now, 3)
                            .await
                            .map(|failure| {
                                failed_for_good(
                                    self.run_path.metrics(),
                                    item,
                                    &failure,
                                    &error.to_string(),
                                );
                            })?;
                        pass.put_back += 1;
                    }
                }
            }
            return Ok(());
        }
        // A targeted item whose instance ended or vanished can never be delivered (a
        // held one would otherwise stay for ever): it becomes a dead letter, unless the
        // instance consumed it already (RT-19: a delivery whose acknowledgement was lost).
        if let Some(instance) = &targets.instance_id {
            let gone = match store.load_instance_text(instance).await {
                Ok(record) => record.status.is_final(),
                Err(StoreError::NotFound { .. }) => true,
                Err(_) => false,
            };
            if gone && store.has_receipt(instance, &item.stimulus_id).await? {
                store.ack_queue_item(&item.item_id).await?;
                return Ok(());
            }
            if gone {
                tracing::warn!(
                    instance = instance.as_str(),
                    event = item.name.as_str(),
                    item = item.item_id.as_str(),
                    reason = "rejected",
                    "stimulus dead-lettered: the instance it was held for is final or gone"
                );
                let moved = store
                    .dead_letter(
                        &item.item_id,
                        DeadLetterReason::Rejected,
                        Some(&format!("instance `{instance}` is final or gone")),
                        now,
                    )
                    .await?;
                if moved {
                    self.run_path
                        .metrics()
                        .dead_lettered(DeadLetterReason::Rejected, 1);
                }
                return Ok(());
            }
        }
        let first = !parked.contains(&item.item_id);
        match self.deliver_item(item, first, &mut pass.retry).await {
            Ok(true) => {
                parked.remove(&item.item_id);
                store.ack_queue_item(&item.item_id).await?;
                pass.delivered += 1;
                self.run_path.metrics().delivered(1);
            }
            // RT-27: nothing took it (no eligible bookmark yet, its instance busy, paused
            // or pinned to a version this process does not run). Put back the first time,
            // it is announced, so another process that may deliver it looks again; put
            // back again, it is not, or two processes that both cannot deliver it would
            // pass it back and forth for ever. What may make it deliverable announces
            // itself (a commit adding bookmarks, a resume, a registration), and the
            // periodic sweep finds it anyway.
            Ok(false) if first => {
                pass.left(item);
                parked.insert(item.item_id.clone());
                later.push((item.item_id.clone(), PutBack::Announced));
            }
            Ok(false) => {
                pass.left(item);
                later.push((item.item_id.clone(), PutBack::Silently));
            }
            Err(error) if error.is_transient() => {
                tracing::warn!(item = %item.item_id, %error, "queue: delivery failed for a transient reason; the item waits for the next pass");
                pass.left(item);
                pass.retry = true;
                later.push((item.item_id.clone(), PutBack::Announced));
            }
            Err(error) => {
                pass.retry = true;
                tracing::warn!(item = %item.item_id, %error, "queue: delivery failed; the attempt is counted");
                store
                    .record_queue_failure(&item.item_id, &error.to_string(), now, 3)
                    .await
                    .map(|failure| {
                        failed_for_good(
                            self.run_path.metrics(),
                            item,
                            &failure,
                            &error.to_string(),
                        );
                    })?;
                pass.put_back += 1;
            }
        }
        Ok(())
    }

    /// Delivers one queued item to its eligible bookmarks (RT-31); whether any was resumed.
    ///
    /// A busy instance (its lease held), a faulted one (RT-18) and one pinned to a version
    /// this process does not run (ENG-46) keep the item for later; a transient store failure
    /// puts it back without counting an attempt; another run error counts a failed attempt
    /// (RT-28), unless another instance took the item.
    ///
    /// `busy` is set when an instance was busy (its lease held by a run that may yet fail).
    async fn deliver_item(
        &self,
        item: &QueueItem,
        first: bool,
        busy: &mut bool,
    ) -> Result<bool, DeliveryError> {
        let store = &self.store;
        let targets: Targets = serde_json::from_value(item.targets.clone()).unwrap_or_default();
        let mut query = BookmarkQuery::by_hash(item.hash.clone(), BOOKMARK_PAGE);
        query.instance_id.clone_from(&targets.instance_id);
        query.bookmark_id.clone_from(&targets.bookmark_id);
        query.correlation_id.clone_from(&item.correlation_id);
        let mut any = false;
        let mut failure = None;
        let targeted = if targets.child_result {
            // ACT-24: the parent's bookmark by id; gone (consumed by the in-process resume,
            // or the parent cancelled), the item is done with.
            let (Some(parent), Some(bookmark)) = (&targets.instance_id, &targets.bookmark_id)
            else {
                return Ok(true);
            };
            let rows: Vec<_> = store
                .list_bookmarks(parent)
                .await?
                .into_iter()
                .filter(|row| row.bookmark_id == *bookmark)
                .collect();
            if rows.is_empty() {
                return Ok(true);
            }
            vec![(parent.clone(), rows)]
        } else {
            self.matching_rows(query).await?
        };
        for (instance, rows) in targeted {
            if store.has_receipt(&instance, &item.stimulus_id).await? {
                // RT-19: consumed already (by a delivery whose acknowledgement was lost): an
                // item for this instance alone is done with.
                any |= targets.instance_id.is_some();
                continue;
            }
            let record = match store.load_instance_text(&instance).await {
                Ok(record) => record,
                Err(StoreError::NotFound { .. }) => continue,
                Err(error) => return Err(error.into()),
            };
            // RT-30, RT-31: each bookmark's look-back admits the item's send time; without
            // an instant (`SinceOrigin`), the instance's origin.
            let ids: Vec<String> = rows
                .into_iter()
                .filter(|row| item.sent_at >= row.look_back.unwrap_or(record.origin_at))
                .map(|row| row.bookmark_id)
                .collect();
            if ids.is_empty() {
                continue;
            }
            // RT-24, ENG-46: pinned to a version this process does not run, the instance is
            // not claimed here at all; the item waits for a process that runs it.
            if !self
                .definitions()
                .runs(&record.definition_name, &record.definition_version)
            {
                let registered = self.definitions().get(&record.definition_name);
                let error = RunError::VersionNotRegistered {
                    instance: instance.clone(),
                    name: record.definition_name.clone(),
                    version: record.definition_version.clone(),
                    registered: registered.map(|w| w.version().to_owned()),
                };
                if first {
                    tracing::warn!(%instance, %error, "queue: the instance's version is not registered here; the item waits for a process that runs it");
                } else {
                    tracing::debug!(%instance, %error, "queue: the instance's version is not registered here; the item still waits");
                }
                continue;
            }
            let first_bookmark = ids.first().cloned().unwrap_or_default();
            let target = RunTarget::Bookmarks {
                ids,
                payload: item.payload.clone(),
            };
            // RT-19: an item for this one instance is deleted by the commit delivering it, so
            // a worker stopped before its acknowledgement leaves nothing to deliver again.
            let consumes = targets.instance_id.as_deref() == Some(instance.as_str());
            let delivery = self
                .delivery(&item.stimulus_id, true)
                .sent_at(item.sent_at)
                .consuming(consumes.then(|| item.item_id.clone()))
                .traced(TraceParent::from_stored(targets.traceparent.as_deref()));
            let delivered = self
                .run_path
                .run(&instance, RunOptions::to(target).delivering(delivery))
                .await;
            match delivered {
                Ok(Some(_)) => any = true,
                // ST-24: the instance faulted at its last commit; the item, not consumed,
                // is dead-lettered for it (consumed by an earlier commit, it is done with).
                Err(error @ RunError::StateTooLarge { .. }) => {
                    if let Some(rejection) = Rejection::too_large(&error, &first_bookmark) {
                        self.reject(item.clone(), &instance, &first_bookmark, &rejection)
                            .await?;
                    }
                    any = true;
                }
                // RT-22: rejected for this instance; the item is handled (dead-lettered for
                // it) and is not offered to it again.
                Err(RunError::PayloadDecode {
                    instance,
                    bookmark,
                    node,
                    payload_type,
                    message,
                }) => {
                    let rejection = Rejection::PayloadDecode {
                        instance: instance.clone(),
                        bookmark: bookmark.clone(),
                        node,
                        payload_type,
                        message,
                    };
                    if consumes {
                        // An item for this instance alone is itself the dead letter, so the
                        // send that wrote it to reject it makes no second one meanwhile.
                        self.reject_in_place(item, &instance, &rejection).await?;
                    } else {
                        self.reject(item.clone(), &instance, &bookmark, &rejection)
                            .await?;
                    }
                    any = true;
                }
                // Gone or consumed meanwhile: nothing to deliver to it.
                Ok(None) | Err(RunError::BookmarkNotFound { .. }) => {}
                Err(
                    error @ RunError::Store {
                        error: StoreError::LeaseHeld { .. },
                        ..
                    },
                ) => {
                    *busy = true;
                    tracing::debug!(%instance, %error, "queue: instance busy; the item waits for its lease");
                }
                Err(error @ (RunError::NotRunnable { .. } | RunError::Paused { .. })) => {
                    tracing::debug!(%instance, %error, "queue: instance not runnable; the item waits");
                }
                Err(error @ RunError::VersionNotRegistered { .. }) => {
                    tracing::warn!(%instance, %error, "queue: the instance's version is not registered here; the item waits for a process that runs it");
                }
                Err(error) => {
                    tracing::warn!(%instance, %error, "queue: delivering to an instance failed");
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) if !any => Err(DeliveryError::Run(error)),
            _ => Ok(any),
        }
    }
}

/// Logs an item whose last delivery attempt made it a dead letter `Failed` (RT-28).
fn failed_for_good(
    metrics: &super::super::metrics::Metrics,
    item: &QueueItem,
    failure: &crate::store::QueueFailure,
    error: &str,
) {
    if matches!(failure, crate::store::QueueFailure::DeadLettered) {
        metrics.dead_lettered(DeadLetterReason::Failed, 1);
        tracing::warn!(
            event = item.name.as_str(),
            item = item.item_id.as_str(),
            reason = "failed",
            error,
            "stimulus dead-lettered: its deliveries kept failing"
        );
    }
}

/// The queue worker (RT-26, RT-27): one pass per doorbell ring or store hint, and a sweep
/// that passes only when something may have changed since the last pass (see
/// [`Quiet`]).
pub(crate) async fn queue_worker(
    weak: Weak<Router>,
    doorbell: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
    mut hints: tokio::sync::broadcast::Receiver<WakeUp>,
    sweep: Duration,
) {
    // RT-9: the triggers are indexed before the first pass.
    if let Some(router) = weak.upgrade()
        && let Err(error) = router.ensure_triggers().await
    {
        tracing::warn!(%error, "queue worker: indexing the triggers failed");
    }
    // Hints still to come from the last pass's own writes.
    let mut own_hints = 0usize;
    // ENG-50: control requests recorded while no worker ran are honoured first.
    let mut control_due = true;
    let mut quiet = Quiet::default();
    // When the claims of a failed pass lapse.
    let mut lapse: Option<tokio::time::Instant> = None;
    // RT-26: the periodic sweep runs on a fixed schedule, whatever hints come meanwhile.
    let mut next_sweep = tokio::time::Instant::now() + sweep;
    loop {
        if *stop.borrow() {
            return;
        }
        let mut sweeping = false;
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
                continue;
            }
            () = doorbell.notified() => own_hints = 0,
            hint = hints.recv() => match hint {
                // ENG-50, FLT-15: a control request recorded in this process is honoured at
                // once (one from another process is found by the periodic pass).
                Ok(WakeUp::ControlRequested { id }) => {
                    let Some(router) = weak.upgrade() else { return };
                    router.controller.honour(&id).await;
                    continue;
                }
                Ok(WakeUp::QueueChanged) if own_hints > 0 => {
                    own_hints -= 1;
                    continue;
                }
                // ST-36: a dead process's claims were released: a pass takes them over.
                Ok(WakeUp::QueueChanged | WakeUp::OwnerGone { .. })
                | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            () = tokio::time::sleep_until(next_sweep) => {
                own_hints = 0;
                control_due = true;
                sweeping = true;
            }
        }
        next_sweep = tokio::time::Instant::now() + sweep;
        let Some(router) = weak.upgrade() else {
            return;
        };
        let unchanged = quiet.changes == Some(router.store.changes());
        if sweeping && quiet.still(&router) {
            // RT-27: nothing changed since a pass that left only items it cannot deliver:
            // a sweep now would claim and put back the same items (two writes each).
            if control_due {
                control_due = false;
                router.controller.control_pass().await;
            }
            if quiet.still(&router) {
                continue;
            }
        } else if sweeping && quiet.fallback && unchanged {
            // RT-27: nothing heard for a lease TTL; a hint lost to a crash, or the claims of
            // a process that died lapsing, would leave items here only until now.
            tracing::debug!(
                ttl = ?router.run_path.lease_settings().ttl,
                "queue: nothing heard for a lease TTL; sweeping the held items anyway"
            );
        }
        drop(router);
        // RT-26: coalesce a burst of rings into one pass.
        tokio::time::sleep(Duration::from_millis(20)).await;
        while hints.try_recv().is_ok() {}
        let Some(router) = weak.upgrade() else {
            return;
        };
        if control_due {
            control_due = false;
            router.controller.control_pass().await;
        }
        // Read before the pass: a listener that begins to listen during it does not make
        // what it missed before count as heard.
        let hears = router.store.hears_every_change();
        let changes = router.store.changes();
        let began = tokio::time::Instant::now();
        let passed = crate::store::Storage::uncounted(router.queue_pass()).await;
        // The claims of a failed pass are seen by a pass that began after they lapsed.
        if lapse.is_some_and(|at| began >= at) {
            lapse = None;
        }
        match passed {
            // RT-27: the items this pass put back hint `QueueChanged` themselves; those hints
            // announce nothing new, so they do not start another pass (else an undeliverable
            // item would make the worker spin). A pass that delivered may have added
            // bookmarks: it is followed by another one at once.
            Ok(pass) if pass.delivered > 0 => {
                quiet = Quiet::default();
                doorbell.notify_one();
            }
            Ok(pass) => {
                own_hints = pass.put_back;
                quiet = Quiet::after(&router, hears, changes, &pass, lapse);
            }
            Err(error) => {
                // The items it had claimed and not settled come back when their claims
                // lapse: a pass looks then, whatever else happens.
                quiet = Quiet::default();
                lapse = Some(tokio::time::Instant::now() + router.run_path.lease_settings().ttl);
                tracing::warn!(%error, "bookmark queue pass failed");
            }
        }
    }
}

/// What the queue worker knows after a pass that delivered nothing (RT-27): the store's
/// change count when it began ([`Storage::changes`](crate::store::Storage::changes)), and
/// the instant by which it must look again anyway. Until the count moves (a commit, a
/// local hint such as an enqueue or a lease release, a hint from another process, a write
/// of another router sharing the in-process store, a reconnected listener) or that instant
/// comes, a sweep has nothing to find: the items left are held or wait for something that
/// announces itself, so the sweep does not claim them again.
#[derive(Debug, Default)]
struct Quiet {
    /// The change count the last pass began at; `None`: the next sweep passes.
    changes: Option<u64>,
    /// The next sweep passes from this instant on: the first expiry among the items left
    /// (RT-28), when the claims of a failed pass lapse, or, on a store whose hints a crash
    /// can lose, one lease TTL after the pass.
    until: Option<tokio::time::Instant>,
    /// Whether `until` is that last one: the sweep then passes though nothing was heard.
    fallback: bool,
}

impl Quiet {
    /// After a pass that began at change count `changes` and delivered nothing, on a store
    /// that heard every change when it began (`hears`). A store that does not
    /// ([`Storage::hears_every_change`](crate::store::Storage::hears_every_change): no listener, or one not listening then) is swept
    /// every time. One whose hints a crash can lose
    /// ([`Storage::can_miss_a_crash`](crate::store::Storage::can_miss_a_crash): PostgreSQL, whose notification of a commit is sent
    /// after it, and where a claim of a process that died lapses unannounced) is swept at
    /// least once per lease TTL, which bounds how long such a loss can hold an item.
    ///
    /// [`Storage::hears_every_change`](crate::store::Storage::hears_every_change): crate::store::Storage::hears_every_change
    /// [`Storage::can_miss_a_crash`](crate::store::Storage::can_miss_a_crash): crate::store::Storage::can_miss_a_crash
    fn after(
        router: &Router,
        hears: bool,
        changes: u64,
        pass: &QueuePass,
        lapse: Option<tokio::time::Instant>,
    ) -> Self {
        if pass.retry || !hears {
            return Self::default();
        }
        let now = tokio::time::Instant::now();
        let expiry = pass.expires_at.map(|at| {
            let wait = u64::try_from(at.saturating_sub(now_micros())).unwrap_or(0);
            now + Duration::from_micros(wait)
        });
        let due = [expiry, lapse.filter(|at| *at > now)]
            .into_iter()
            .flatten()
            .min();
        let fallback = router
            .store
            .can_miss_a_crash()
            .then(|| now + router.run_path.lease_settings().ttl)
            .filter(|at| due.is_none_or(|due| *at < due));
        Self {
            changes: Some(changes),
            until: fallback.or(due),
            fallback: fallback.is_some(),
        }
    }

    /// Whether nothing changed since the last pass, and nothing is due.
    fn still(&self, router: &Router) -> bool {
        self.changes == Some(router.store.changes())
            && self
                .until
                .is_none_or(|until| tokio::time::Instant::now() < until)
    }
}
