//! Delivery (RT-14 to RT-24): a send starts by trigger and resumes by
//! bookmark in one call, defers to the queue what cannot be delivered now, and answers a
//! retried send from its idempotency record.

use serde_json::Value;

use super::Router;
use crate::base::lock;
use crate::base::{new_ulid, now_micros};
use crate::engine::executor::{RunError, RunTarget};
use crate::engine::state::WorkflowStatus;
use crate::identity::{RoutingError, check_correlation_id, check_name, sha_hex, stimulus_hash};
use crate::routing::{
    AddressedInstance, BOOKMARK_PAGE, Declined, MAX_PAYLOAD_BYTES, NotAwaited, Rejection,
    SendError, SendReport, Stimulus, Targets, to_micros,
};
use crate::runtime::run_path::RunOptions;
use crate::status::Started;
use crate::store::{BookmarkQuery, BookmarkRow, IdempotencyRecord, Micros, QueueItem, StoreError};

impl Router {
    /// Sends a stimulus (RT-14 to RT-24): see `Runtime::send`. The links its runs queued
    /// are carried out before it returns, and the report's statuses read after them.
    pub(crate) async fn send(&self, mut stimulus: Stimulus) -> Result<SendReport, SendError> {
        // ENG-61: the trace context of the sender's task, unless the stimulus names one.
        if stimulus.traceparent.is_none() {
            stimulus.traceparent = self.definitions().trace().current();
        }
        let mut result = self.send_inner(stimulus).await;
        if let Ok(report) = &result
            && !report.duplicate
        {
            self.run_path.metrics().sent(
                report.started.len() + report.resumed.len(),
                report.deferred.len() + usize::from(report.inbox_item.is_some()),
            );
        }
        if self.links.process().await
            && let Ok(report) = &mut result
            && !report.duplicate
        {
            for started in report.started.iter_mut().chain(&mut report.resumed) {
                self.links.refresh(started).await;
            }
        }
        result
    }

    /// Queues `stimulus` inside the application's transaction `conn` (ST-37): the worker of
    /// whichever process hears of it after the commit routes it, as an enqueued send
    /// (RT-23). Nothing exists if the transaction rolls back.
    #[cfg(feature = "postgres")]
    pub(crate) async fn send_in(
        &self,
        conn: &mut sqlx::PgConnection,
        stimulus: Stimulus,
    ) -> Result<SendReport, SendError> {
        check_name(&stimulus.name)?;
        if let Some(message) = stimulus.invalid.clone() {
            return Err(SendError::Payload { message });
        }
        if let Some(id) = &stimulus.correlation_id {
            check_correlation_id(id)?;
        }
        let hash = stimulus_hash(&stimulus.name, stimulus.key.as_ref(), None)?;
        let payload_text = serde_json::to_string(&stimulus.payload).unwrap_or_default();
        if payload_text.len() > MAX_PAYLOAD_BYTES {
            return Err(SendError::PayloadTooLarge {
                size: payload_text.len(),
                limit: MAX_PAYLOAD_BYTES,
            });
        }
        let Some(postgres) = self.store.backend().capabilities().postgres else {
            return Err(SendError::Store(StoreError::Invalid {
                what: "store",
                reason: "a send inside an application's transaction needs a PostgresStore"
                    .to_owned(),
            }));
        };
        // RT-19: an idempotency key gives the stimulus its derived id, so an instance takes
        // it once however many transactions queue it.
        let stimulus_id = match &stimulus.idempotency_key {
            Some(key) => format!(
                "idem-{}",
                sha_hex(&["wf-idempotency/1", key])
                    .get(..40)
                    .unwrap_or_default()
            ),
            None => new_ulid(),
        };
        let targets = Targets {
            instance_id: stimulus.instance_id.clone(),
            bookmark_id: stimulus.bookmark_id.clone(),
            route: true,
            key: stimulus.key.clone(),
            ..Targets::default()
        };
        let item = self.queue_item(&stimulus, &hash, &stimulus_id, now_micros(), &targets);
        let mut report = SendReport::empty(stimulus_id, hash);
        report.inbox_item = Some(item.item_id.clone());
        postgres
            .enqueue_in(conn, &item)
            .await
            .map_err(SendError::Store)?;
        Ok(report)
    }

    async fn send_inner(&self, stimulus: Stimulus) -> Result<SendReport, SendError> {
        // RT-14: validate before any effect.
        if let Some(window) = stimulus.debounce {
            super::debounce::check_window(window)?;
        }
        check_name(&stimulus.name)?;
        if let Some(message) = stimulus.invalid.clone() {
            return Err(SendError::Payload { message });
        }
        if let Some(id) = &stimulus.correlation_id {
            check_correlation_id(id)?;
        }
        let hash = stimulus_hash(&stimulus.name, stimulus.key.as_ref(), None)?;
        let payload_text = serde_json::to_string(&stimulus.payload).unwrap_or_default();
        if payload_text.len() > MAX_PAYLOAD_BYTES {
            return Err(SendError::PayloadTooLarge {
                size: payload_text.len(),
                limit: MAX_PAYLOAD_BYTES,
            });
        }
        let store = &self.store;
        // RT-14: an instance and a bookmark of another instance exclude each other.
        if let (Some(instance), Some(bookmark)) = (&stimulus.instance_id, &stimulus.bookmark_id) {
            let mut query = BookmarkQuery::by_hash(hash.clone(), 1);
            query.bookmark_id = Some(bookmark.clone());
            let rows = store
                .find_bookmarks(query)
                .await
                .map_err(SendError::Store)?;
            if let Some(row) = rows.into_iter().find(|r| r.instance_id != *instance) {
                return Err(SendError::Routing(RoutingError::ConflictingTargets {
                    instance: instance.clone(),
                    bookmark: bookmark.clone(),
                    owner: row.instance_id,
                }));
            }
        }
        if let Some(window) = stimulus.debounce {
            // RT-35: stored, delivered once the window is quiet. A send to one instance says
            // at once that it is gone or final.
            if let Some(instance) = &stimulus.instance_id {
                self.refuse_gone_or_final(instance).await?;
            }
            return self.debounce(&stimulus, &hash, window).await;
        }
        // RT-19: a retried send finds its first report. The digest only serves idempotency
        // records, so a send without a key does not hash its payload.
        let payload_digest = if stimulus.idempotency_key.is_some() {
            sha_hex(&[&payload_text])
        } else {
            String::new()
        };
        // RT-19: a pending record that no send of this process is completing was left by a
        // send that stopped after its first delivery (a crash, a store failure): this send
        // carries it on under the same mark, to the targets not yet delivered (their receipts
        // tell the others), instead of answering its empty report. What it finds nothing new
        // for is not queued (the stimulus was taken: a copy queued now could reach a wait
        // that never was its target), and it is then answered as the duplicate it is.
        let mut carried: Option<IdempotencyRecord> = None;
        let stimulus_id = match &stimulus.idempotency_key {
            Some(key) => {
                let stimulus_id = format!(
                    "idem-{}",
                    sha_hex(&["wf-idempotency/1", key])
                        .get(..40)
                        .unwrap_or_default()
                );
                if let Some(record) = store
                    .find_idempotency_record(key)
                    .await
                    .map_err(SendError::Store)?
                {
                    let in_progress = lock(&self.pending_records).contains_key(&stimulus_id);
                    let carry_on = !in_progress
                        && !stimulus.via_inbox
                        && is_pending(&record.report)
                        && record.report.get(SEND_MARK).is_some()
                        && record.hash == hash
                        && record.payload_digest == payload_digest;
                    if !carry_on {
                        return duplicate(record, key, &hash, &payload_digest);
                    }
                    tracing::info!(
                        key = key.as_str(),
                        stimulus = stimulus_id.as_str(),
                        "send: carrying on a send with this idempotency key that stopped after its first delivery"
                    );
                    carried = Some(record);
                }
                stimulus_id
            }
            None => new_ulid(),
        };
        let sent_at = now_micros();
        if stimulus.via_inbox
            && let Some(instance) = &stimulus.instance_id
        {
            // RT-34: a send to one instance says at once that it is gone or final, queued or
            // not (its status alone: the document is not decoded).
            self.refuse_gone_or_final(instance).await?;
        }
        let (report, own) = if stimulus.via_inbox {
            // RT-23 `Enqueue`: written to the queue untargeted; the worker routes it.
            let targets = Targets {
                instance_id: stimulus.instance_id.clone(),
                bookmark_id: stimulus.bookmark_id.clone(),
                route: true,
                key: stimulus.key.clone(),
                ..Targets::default()
            };
            let item = self.queue_item(&stimulus, &hash, &stimulus_id, sent_at, &targets);
            let mut report = SendReport::empty(stimulus_id.clone(), hash.clone());
            report.inbox_item = Some(item.item_id.clone());
            // RT-19: the item and the send's idempotency record are written in one
            // operation: concurrent sends with one key queue one item, and a send retried
            // after a crash finds the record of the item it queued.
            let record = stimulus
                .idempotency_key
                .as_ref()
                .map(|key| IdempotencyRecord {
                    key: key.clone(),
                    hash: hash.clone(),
                    payload_digest: payload_digest.clone(),
                    report: serde_json::to_value(&report).unwrap_or(Value::Null),
                    created_at: now_micros(),
                });
            if let Some(existing) = store
                .enqueue_send(vec![item], record)
                .await
                .map_err(SendError::Store)?
            {
                let key = stimulus.idempotency_key.as_deref().unwrap_or_default();
                return duplicate(existing, key, &hash, &payload_digest);
            }
            self.doorbell.notify_one();
            return Ok(report);
        } else {
            // RT-19: the first write of the send's effects (the commit delivering the
            // stimulus, the instance a trigger creates, or the items it queues) writes the
            // send's record, pending, in its transaction, so a send retried after a crash
            // finds it; the send completes it below. `own` carries this send's mark, so it
            // knows a record its own writes made from one of a concurrent send with the key.
            let own = stimulus
                .idempotency_key
                .as_ref()
                .map(|key| IdempotencyRecord {
                    key: key.clone(),
                    hash: hash.clone(),
                    payload_digest: payload_digest.clone(),
                    report: pending_report(
                        &stimulus_id,
                        &hash,
                        &carried
                            .as_ref()
                            .and_then(|r| r.report.get(SEND_MARK))
                            .and_then(Value::as_str)
                            .map_or_else(new_ulid, str::to_owned),
                    ),
                    created_at: now_micros(),
                });
            if let Some(own) = &own {
                lock(&self.pending_records)
                    .entry(stimulus_id.clone())
                    .or_insert_with(|| (own.clone(), 0))
                    .1 += 1;
            }
            let origin = if own.is_none() {
                Origin::NewId
            } else if carried.is_some() {
                Origin::CarriedOn
            } else {
                Origin::Stable
            };
            let carrying = carried.is_some().then(|| Stimulus {
                inbox: false,
                ..stimulus.clone()
            });
            let routed = self
                .route(
                    carrying.as_ref().unwrap_or(&stimulus),
                    &hash,
                    &stimulus_id,
                    sent_at,
                    origin,
                    own.as_ref(),
                )
                .await;
            if own.is_some() {
                let mut pending = lock(&self.pending_records);
                if let Some(entry) = pending.get_mut(&stimulus_id) {
                    entry.1 = entry.1.saturating_sub(1);
                    if entry.1 == 0 {
                        pending.remove(&stimulus_id);
                    }
                }
            }
            (routed?, own)
        };
        if report.duplicate {
            return Ok(report);
        }
        if let Some(record) = carried
            && report.started.is_empty()
            && report.resumed.is_empty()
            && report.deferred.is_empty()
            && report.rejected.is_empty()
        {
            let key = stimulus.idempotency_key.as_deref().unwrap_or_default();
            return duplicate(record, key, &hash, &payload_digest);
        }
        if let Some(own) = &own {
            let record = own.with_report(&report);
            match store
                .find_idempotency_record(&own.key)
                .await
                .map_err(SendError::Store)?
            {
                // Written complete with the items this send queued.
                Some(existing) if existing.report == record.report => {}
                // Written pending by this send's delivery: completed with the full report.
                Some(existing)
                    if existing.hash == hash
                        && existing.payload_digest == payload_digest
                        && is_pending(&existing.report) =>
                {
                    store
                        .replace_idempotency_record(record)
                        .await
                        .map_err(SendError::Store)?;
                }
                Some(existing) => return duplicate(existing, &own.key, &hash, &payload_digest),
                None => {
                    if let Some(existing) = store
                        .put_idempotency_record(record)
                        .await
                        .map_err(SendError::Store)?
                    {
                        return duplicate(existing, &own.key, &hash, &payload_digest);
                    }
                }
            }
        }
        Ok(report)
    }

    /// Writes `items` (queued by a send) in one operation with the send's idempotency record
    /// `own` completed with `report` (RT-19). When the key has a record already, written by
    /// one of this send's own writes (it bears this send's mark), the items are written and
    /// the record completed, in one operation; a record of another send means that send
    /// delivers the stimulus: nothing is written and its report is returned, a duplicate.
    async fn enqueue_for_send(
        &self,
        items: Vec<QueueItem>,
        own: Option<&IdempotencyRecord>,
        report: &SendReport,
    ) -> Result<Option<SendReport>, SendError> {
        let store = &self.store;
        let Some(own) = own else {
            store
                .enqueue_send(items, None)
                .await
                .map_err(SendError::Store)?;
            return Ok(None);
        };
        let record = own.with_report(report);
        match store
            .enqueue_send(items.clone(), Some(record.clone()))
            .await
            .map_err(SendError::Store)?
        {
            None => Ok(None),
            Some(existing) if sent_by(&existing, own) => {
                store
                    .enqueue_completing(items, record)
                    .await
                    .map_err(SendError::Store)?;
                Ok(None)
            }
            Some(existing) => {
                duplicate(existing, &own.key, &own.hash, &own.payload_digest).map(Some)
            }
        }
    }

    /// RT-15 to RT-21 for one stimulus: triggers, bookmarks, deferrals, then the queue;
    /// `origin` says who may have seen the stimulus id before.
    pub(crate) async fn route(
        &self,
        stimulus: &Stimulus,
        hash: &str,
        stimulus_id: &str,
        sent_at: Micros,
        origin: Origin,
        own: Option<&IdempotencyRecord>,
    ) -> Result<SendReport, SendError> {
        let mut report = SendReport::empty(stimulus_id.to_owned(), hash.to_owned());
        let mut created = false;
        // An instance an earlier try of this stimulus started (RT-19): delivered then.
        let mut found = false;
        let mut prefetched = None;
        if stimulus.instance_id.is_none() && stimulus.bookmark_id.is_none() {
            // The trigger rows and the first page of bookmarks are read together (one store
            // operation); the page is used only when the trigger phase created nothing that
            // could have added a bookmark since.
            let query = self.bookmark_query(stimulus, hash);
            let hashes = self.trigger_hashes(stimulus, hash).await?;
            let (rows, page) = self
                .store
                .find_routes(hashes, query)
                .await
                .map_err(SendError::Store)?;
            (created, found) = self
                .trigger_phase(rows, stimulus, stimulus_id, sent_at, origin, &mut report)
                .await?;
            if !created {
                prefetched = Some(page);
            }
        }
        let busy = self
            .bookmark_phase(
                stimulus,
                hash,
                Sent {
                    id: stimulus_id,
                    at: sent_at,
                },
                Receipts::of(origin, created),
                prefetched,
                &mut report,
            )
            .await?;
        if !busy.is_empty() {
            let mut items = Vec::with_capacity(busy.len());
            for (instance, held) in busy {
                let targets = Targets {
                    instance_id: Some(instance.clone()),
                    bookmark_id: stimulus.bookmark_id.clone(),
                    ..Targets::default()
                };
                let mut item = self.queue_item(stimulus, hash, stimulus_id, sent_at, &targets);
                item.held = held;
                items.push(item);
                report.deferred.push(instance);
            }
            // RT-19: the deferred items are written with the send's record, so a send
            // retried after a crash finds it instead of deferring (or delivering) again.
            if let Some(duplicate) = self.enqueue_for_send(items, own, &report).await? {
                return Ok(duplicate);
            }
        }
        let delivered = found
            || !report.started.is_empty()
            || !report.resumed.is_empty()
            || !report.deferred.is_empty();
        if !delivered
            && report.finished.is_empty()
            && let Some(correlation) = &stimulus.correlation_id
        {
            report.finished = self
                .finished_correlation(correlation)
                .await
                .map_err(SendError::Store)?;
        }
        if !delivered && !report.finished.is_empty() {
            // Too late for the instances it was for: said in the report, not queued.
            return Ok(report);
        }
        if !delivered
            && report.refused.is_empty()
            && report.rejected.is_empty()
            && !report.not_delivered.is_empty()
        {
            // Nothing reached: the first instance's error.
            let error = report.not_delivered.swap_remove(0);
            return Err(SendError::Run(error));
        }
        // RT-21, RT-22: a stimulus rejected for an instance is dead-lettered, not queued.
        if !delivered && report.not_delivered.is_empty() && report.rejected.is_empty() {
            // RT-19: a stable id that reached nobody now may have been consumed by an earlier
            // routing of it (a queued stimulus routed, then its process stopped before the
            // acknowledgement, and its instance moved on): then it is done with, and a copy
            // queued now would only wait to expire.
            if stimulus.inbox
                && origin == Origin::Stable
                && self
                    .store
                    .consumed_anywhere(stimulus_id)
                    .await
                    .map_err(SendError::Store)?
            {
                tracing::debug!(
                    stimulus = stimulus_id,
                    "send: consumed by an earlier routing of it; not queued again"
                );
                return Ok(report);
            }
            if stimulus.inbox {
                let targets = Targets {
                    instance_id: stimulus.instance_id.clone(),
                    bookmark_id: stimulus.bookmark_id.clone(),
                    ..Targets::default()
                };
                let item = self.queue_item(stimulus, hash, stimulus_id, sent_at, &targets);
                report.inbox_item = Some(item.item_id.clone());
                report.inbox_because = Some(NotAwaited {
                    expires_at: item.expires_at,
                    addressed: self.addressed(stimulus).await.map_err(SendError::Store)?,
                    by_key: stimulus.instance_id.is_none() && stimulus.correlation_id.is_none(),
                });
                // RT-19: a direct send's record is written with the item it queues.
                if let Some(duplicate) = self.enqueue_for_send(vec![item], own, &report).await? {
                    return Ok(duplicate);
                }
                self.doorbell.notify_one();
            } else {
                report.unmatched = true;
            }
        }
        Ok(report)
    }

    /// A queue item for `stimulus` (RT-25), expiring after its TTL (RT-28).
    fn queue_item(
        &self,
        stimulus: &Stimulus,
        hash: &str,
        stimulus_id: &str,
        sent_at: Micros,
        targets: &Targets,
    ) -> QueueItem {
        let ttl = stimulus.ttl.map_or(self.queue_ttl, to_micros);
        QueueItem {
            item_id: new_ulid(),
            stimulus_id: stimulus_id.to_owned(),
            name: stimulus.name.clone(),
            hash: hash.to_owned(),
            key_display: stimulus.key.as_ref().map(Value::to_string),
            payload: stimulus.payload.clone(),
            correlation_id: stimulus.correlation_id.clone(),
            targets: {
                let mut targets = serde_json::to_value(targets).unwrap_or(Value::Null);
                // ENG-61: the send's trace context travels with the item.
                if let (Some(parent), Value::Object(map)) = (stimulus.traceparent, &mut targets) {
                    map.insert("traceparent".to_owned(), Value::String(parent.to_string()));
                }
                targets
            },
            sent_at,
            enqueued_at: now_micros(),
            expires_at: sent_at.saturating_add(ttl),
            attempts: 0,
            last_error: None,
            last_attempt_at: None,
            held: false,
            idempotency_key: stimulus.idempotency_key.clone(),
        }
    }

    /// RT-34: a send aimed at one instance is refused at once when the instance is gone or
    /// final (its status alone: the document is not decoded).
    async fn refuse_gone_or_final(&self, instance: &str) -> Result<(), SendError> {
        match self.store.instance_status(instance).await {
            Ok((status, _)) if status.is_final() => Err(SendError::InstanceTerminal {
                instance: instance.to_owned(),
                status,
            }),
            Ok(_) => Ok(()),
            Err(StoreError::NotFound { .. }) => Err(SendError::InstanceNotFound {
                instance: instance.to_owned(),
            }),
            Err(error) => Err(SendError::Store(error)),
        }
    }

    /// RT-17 to RT-20: resumes every matching bookmark, one run per instance. Returns the
    /// instances to defer (RT-18): busy in another process or pinned to a version this process
    /// does not run (`false`, RT-24), or faulted or paused (`true`: the item is held, it does
    /// not expire).
    ///
    /// `receipts`: which receipts of `stimulus_id` can exist, and whether its deliveries
    /// write theirs.
    async fn bookmark_phase(
        &self,
        stimulus: &Stimulus,
        hash: &str,
        sent: Sent<'_>,
        receipts: Receipts,
        prefetched: Option<Vec<BookmarkRow>>,
        report: &mut SendReport,
    ) -> Result<Vec<(String, bool)>, SendError> {
        let stimulus_id = sent.id;
        let store = &self.store;
        if let Some(instance) = &stimulus.instance_id {
            self.refuse_gone_or_final(instance).await?;
        }
        let query = self.bookmark_query(stimulus, hash);
        let targets = self
            .matching_from(query, prefetched)
            .await
            .map_err(SendError::Store)?;
        if let Some(bookmark) = &stimulus.bookmark_id
            && targets.is_empty()
        {
            if let Some(instance) = &stimulus.instance_id
                && let Some(row) = store
                    .list_bookmarks(instance)
                    .await
                    .map_err(SendError::Store)?
                    .into_iter()
                    .find(|r| r.bookmark_id == *bookmark)
            {
                return Err(SendError::BookmarkStimulusMismatch {
                    bookmark: bookmark.clone(),
                    expected: row.hash,
                    got: hash.to_owned(),
                });
            }
            return Err(SendError::BookmarkNotFound {
                bookmark: bookmark.clone(),
            });
        }
        let mut busy = Vec::new();
        for (instance, ids) in targets {
            let first_bookmark = ids.first().cloned().unwrap_or_default();
            // RT-19: a retried send skips instances that already consumed it.
            if receipts != Receipts::None
                && store
                    .has_receipt(&instance, stimulus_id)
                    .await
                    .map_err(SendError::Store)?
            {
                continue;
            }
            let target = RunTarget::Bookmarks {
                ids,
                payload: stimulus.payload.clone(),
            };
            let delivery = self
                .delivery(stimulus_id, receipts == Receipts::Kept)
                .sent_at(sent.at)
                .traced(stimulus.traceparent);
            match self
                .run_path
                .run_reporting(&instance, RunOptions::to(target).delivering(delivery))
                .await
            {
                Ok(Some(ran)) => {
                    // SM-4: the instance ran; its transitions that declined are said too.
                    report
                        .declined
                        .extend(ran.declined.into_iter().map(|d| Declined {
                            instance_id: ran.started.instance_id.clone(),
                            state: d.state,
                            transition: d.transition,
                            condition: d.condition,
                        }));
                    report.resumed.push(ran.started);
                }
                // Consumed elsewhere in the meantime: routing treats it as gone (ENG-25).
                Ok(None) | Err(RunError::BookmarkNotFound { .. }) => {}
                Err(RunError::Store {
                    error: StoreError::LeaseHeld { .. },
                    ..
                }) => busy.push((instance, false)),
                // RT-24: pinned to a version this process does not run: queued for the
                // instance, for a process that runs it (not held: its TTL runs). Nothing of
                // the instance was modified, nothing consumed.
                Err(error @ RunError::VersionNotRegistered { .. }) => {
                    tracing::info!(%instance, %error, "send: the instance's version is not registered here; the stimulus is queued for a process that runs it");
                    busy.push((instance, false));
                }
                // RT-18: a faulted instance gets a held item, delivered once it runs again;
                // so does a paused one (ENG-50), delivered after its resume.
                Err(
                    RunError::NotRunnable {
                        status: WorkflowStatus::Faulted,
                        ..
                    }
                    | RunError::Paused { .. },
                ) => busy.push((instance, true)),
                // It ended between the lookup and its run: too late for it.
                Err(RunError::NotRunnable { instance, status }) if status.is_final() => {
                    report.finished.push(Started {
                        instance_id: instance,
                        status,
                        sub_status: None,
                    });
                }
                // RT-22: rejected for this instance (nothing of the run was committed).
                Err(RunError::PayloadDecode {
                    instance,
                    bookmark,
                    node,
                    payload_type,
                    message,
                }) => {
                    let rejection = Rejection::PayloadDecode {
                        instance,
                        bookmark,
                        node,
                        payload_type,
                        message,
                    };
                    self.reject_for_send(stimulus, hash, stimulus_id, rejection, report)
                        .await?;
                }
                // ST-24: the instance faulted at its last commit; the stimulus it did not
                // consume is dead-lettered for it, not lost.
                Err(error @ RunError::StateTooLarge { .. }) => {
                    match Rejection::too_large(&error, &first_bookmark) {
                        Some(rejection) => {
                            self.reject_for_send(stimulus, hash, stimulus_id, rejection, report)
                                .await?;
                        }
                        // An earlier commit of the run consumed it.
                        None => report.resumed.push(Started {
                            instance_id: instance,
                            status: WorkflowStatus::Faulted,
                            sub_status: None,
                        }),
                    }
                }
                Err(error @ (RunError::NotRunnable { .. } | RunError::Store { .. })) => {
                    report.not_delivered.push(error);
                }
                Err(error) => return Err(SendError::Run(error)),
            }
        }
        Ok(busy)
    }

    /// RT-22, ST-24: dead-letters the stimulus for the instance and bookmark `rejection`
    /// names, and lists the rejection in the send's report.
    async fn reject_for_send(
        &self,
        stimulus: &Stimulus,
        hash: &str,
        stimulus_id: &str,
        rejection: Rejection,
        report: &mut SendReport,
    ) -> Result<(), SendError> {
        let base = self.queue_item(
            stimulus,
            hash,
            stimulus_id,
            now_micros(),
            &Targets::default(),
        );
        let (instance, bookmark) = rejection.target();
        self.reject(base, instance, bookmark, &rejection)
            .await
            .map_err(SendError::Store)?;
        report.rejected.push(rejection);
        Ok(())
    }

    /// The bookmark query of a stimulus's bookmark phase, first page (RT-17).
    fn bookmark_query(&self, stimulus: &Stimulus, hash: &str) -> BookmarkQuery {
        let mut query = BookmarkQuery::by_hash(hash, BOOKMARK_PAGE);
        query.instance_id.clone_from(&stimulus.instance_id);
        query.correlation_id.clone_from(&stimulus.correlation_id);
        query.bookmark_id.clone_from(&stimulus.bookmark_id);
        query
    }

    /// The live instances a stimulus names, by instance id or correlation id (at most 20), as
    /// they are now: read by id or through the correlation id's listing, never by key.
    async fn addressed(&self, stimulus: &Stimulus) -> Result<Vec<AddressedInstance>, StoreError> {
        if let Some(instance) = &stimulus.instance_id {
            let state = match crate::runtime::document::load_state(&self.store, instance).await {
                Ok(Some(state)) if !state.status.is_final() => state,
                // Gone, final or unreadable: nothing to say of it here.
                _ => return Ok(Vec::new()),
            };
            let listing = crate::runtime::listing::listing_of(&state);
            return Ok(vec![AddressedInstance {
                instance_id: instance.clone(),
                status: state.status,
                at: listing.at,
                waiting_for: listing.waiting_for,
            }]);
        }
        let Some(correlation) = &stimulus.correlation_id else {
            return self.with_key(stimulus).await;
        };
        let page = self
            .store
            .list_instances(crate::store::InstanceFilter {
                correlation_id: Some(correlation.clone()),
                live_only: true,
                limit: 20,
                ..crate::store::InstanceFilter::default()
            })
            .await?;
        Ok(page
            .into_iter()
            .filter_map(|listed| listed.summary.ok())
            .map(|row| {
                let listing = row
                    .listing
                    .as_deref()
                    .and_then(crate::store::InstanceListing::decode)
                    .unwrap_or_default();
                AddressedInstance {
                    instance_id: row.instance_id,
                    status: row.status,
                    at: listing.at,
                    waiting_for: listing.waiting_for,
                }
            })
            .collect())
    }

    /// The instances, live or final, whose waits carried a send's key (RT-36, at most 20), as
    /// they are now; none for a send without a key or from a store without the key index.
    async fn with_key(&self, stimulus: &Stimulus) -> Result<Vec<AddressedInstance>, StoreError> {
        let Some(key) = stimulus.key.as_ref().filter(|k| !k.is_null()) else {
            return Ok(Vec::new());
        };
        // The send's hash was made of this key: it digests.
        let Ok(digest) = crate::identity::key_digest(key) else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        for instance in self.store.instances_with_key(&digest, 20).await? {
            // Purged since, or unreadable: nothing to say of it here.
            let Ok(Some(state)) =
                crate::runtime::document::load_state(&self.store, &instance).await
            else {
                continue;
            };
            let listing = crate::runtime::listing::listing_of(&state);
            found.push(AddressedInstance {
                instance_id: instance,
                status: state.status,
                at: listing.at,
                waiting_for: listing.waiting_for,
            });
        }
        Ok(found)
    }

    /// The final instances of a correlation id when none of its instances is live (at most
    /// 20 listed); empty when one is live or there is none.
    async fn finished_correlation(&self, correlation: &str) -> Result<Vec<Started>, StoreError> {
        let page = self
            .store
            .list_instances(crate::store::InstanceFilter {
                correlation_id: Some(correlation.to_owned()),
                limit: 100,
                ..crate::store::InstanceFilter::default()
            })
            .await?;
        let mut finished = Vec::new();
        for listed in page {
            let Ok(record) = listed.summary else { continue };
            if !record.status.is_final() {
                return Ok(Vec::new());
            }
            if finished.len() < 20 {
                finished.push(Started {
                    instance_id: record.instance_id,
                    status: record.status,
                    sub_status: None,
                });
            }
        }
        Ok(finished)
    }

    /// Bookmark ids matching `query`, grouped by instance in creation order (RT-18).
    /// The first page, when given, was read already.
    async fn matching_from(
        &self,
        query: BookmarkQuery,
        first: Option<Vec<BookmarkRow>>,
    ) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        Ok(self
            .matching_rows_from(query, first)
            .await?
            .into_iter()
            .map(|(instance, rows)| (instance, rows.into_iter().map(|r| r.bookmark_id).collect()))
            .collect())
    }

    /// Bookmark rows matching `query`, grouped by instance in creation order.
    pub(crate) async fn matching_rows(
        &self,
        query: BookmarkQuery,
    ) -> Result<Vec<(String, Vec<BookmarkRow>)>, StoreError> {
        self.matching_rows_from(query, None).await
    }

    /// [`Router::matching_rows`] whose first page, when given, was read already.
    async fn matching_rows_from(
        &self,
        mut query: BookmarkQuery,
        mut first: Option<Vec<BookmarkRow>>,
    ) -> Result<Vec<(String, Vec<BookmarkRow>)>, StoreError> {
        let mut targets: Vec<(String, Vec<BookmarkRow>)> = Vec::new();
        loop {
            let rows = match first.take() {
                Some(rows) => rows,
                None => self.store.find_bookmarks(query.clone()).await?,
            };
            let full = rows.len() >= query.limit;
            query.after = rows.last().map(|r| (r.created_at, r.bookmark_id.clone()));
            for row in rows {
                match targets.iter_mut().find(|(i, _)| *i == row.instance_id) {
                    Some((_, group)) => group.push(row),
                    None => targets.push((row.instance_id.clone(), vec![row])),
                }
            }
            if !full {
                return Ok(targets);
            }
        }
    }
}

/// The report a direct send's record holds until the send completes it (RT-19): what a send
/// retried after a crash in between returns, marked `pending`.
fn pending_report(stimulus_id: &str, hash: &str, mark: &str) -> Value {
    let mut report =
        serde_json::to_value(SendReport::empty(stimulus_id.to_owned(), hash.to_owned()))
            .unwrap_or(Value::Null);
    if let Some(fields) = report.as_object_mut() {
        fields.insert("pending".to_owned(), Value::Bool(true));
        fields.insert(SEND_MARK.to_owned(), Value::String(mark.to_owned()));
    }
    report
}

/// Who may have seen a stimulus id before this routing of it (RT-19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The id was made by this send (no idempotency key): no instance this send did not
    /// start has a receipt for it, so the bookmark phase need not look receipts up.
    NewId,
    /// The id is stable (an idempotency key, a queued item): an earlier try or a concurrent
    /// send with the key may have delivered it; an instance found already created by its
    /// trigger is reported as started, as the send that created it reports it.
    Stable,
    /// This send carries on an earlier try that stopped after its first delivery: what that
    /// try delivered is not this send's doing, so an instance it created is not reported as
    /// started, and finding nothing new makes this send the duplicate it is.
    CarriedOn,
}

/// Which receipts of a stimulus id a bookmark phase can meet, and whether the deliveries it
/// makes write theirs (RT-19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receipts {
    /// An id this send made, and no trigger of it created an instance: no instance holds a
    /// receipt for it, none is looked up.
    None,
    /// An id this send made, held by the instances its triggers created (their creation
    /// wrote it): looked up, so those are skipped.
    OfCreated,
    /// A stable id (an idempotency key, a queued item): an earlier try or delivery may have
    /// consumed it, so receipts are looked up, and each delivery writes its own.
    Kept,
}

impl Receipts {
    /// A delivery of an id this send made writes no receipt: the send reaches each instance
    /// at most once (one run per instance, RT-18), and the copies it queues are only for the
    /// instances it did not reach (deferred) or for when it reached none (RT-21); those
    /// copies' deliveries write theirs.
    fn of(origin: Origin, created: bool) -> Self {
        match origin {
            Origin::NewId if created => Self::OfCreated,
            Origin::NewId => Self::None,
            Origin::Stable | Origin::CarriedOn => Self::Kept,
        }
    }
}

/// The field of a stored report naming the send call that wrote it (a fresh id per call),
/// so a send tells the record its own writes made from a concurrent one's with the key.
const SEND_MARK: &str = "send";

/// Whether `record` was written by the send whose pending record is `own`.
fn sent_by(record: &IdempotencyRecord, own: &IdempotencyRecord) -> bool {
    record.hash == own.hash
        && record.payload_digest == own.payload_digest
        && record.report.get(SEND_MARK).is_some()
        && record.report.get(SEND_MARK) == own.report.get(SEND_MARK)
}

impl IdempotencyRecord {
    /// This send's record with its full `report`, keeping the send's mark.
    fn with_report(&self, report: &SendReport) -> Self {
        let mut full = serde_json::to_value(report).unwrap_or(Value::Null);
        if let (Some(fields), Some(mark)) = (full.as_object_mut(), self.report.get(SEND_MARK)) {
            fields.insert(SEND_MARK.to_owned(), mark.clone());
        }
        Self {
            report: full,
            created_at: now_micros(),
            ..self.clone()
        }
    }
}

/// Whether a stored report is a pending one ([`pending_report`]).
fn is_pending(report: &Value) -> bool {
    report.get("pending") == Some(&Value::Bool(true))
}

/// The stored report of an earlier send with this idempotency key, if it was the same send.
fn duplicate(
    record: IdempotencyRecord,
    key: &str,
    hash: &str,
    payload_digest: &str,
) -> Result<SendReport, SendError> {
    if record.hash != hash || record.payload_digest != payload_digest {
        return Err(SendError::IdempotencyKeyReused {
            key: key.to_owned(),
        });
    }
    let mut report: SendReport =
        serde_json::from_value(record.report).map_err(|e| SendError::Payload {
            message: format!("stored report does not decode: {e}"),
        })?;
    report.duplicate = true;
    Ok(report)
}

/// The id and send time of the stimulus a bookmark phase delivers.
#[derive(Debug, Clone, Copy)]
struct Sent<'a> {
    id: &'a str,
    /// When it was sent: its deliveries' cause (RT-30).
    at: Micros,
}
