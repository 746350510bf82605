//! The retention purge (ST-30, ST-31): one pass removes what is older than the runtime's
//! [`Retention`](crate::Retention) ages, in batches, under a named lease so one process of a
//! store purges at a time; the background task runs a pass at start and then periodically.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use crate::base::now_micros;
use crate::runtime::lease::NamedLease;
use crate::runtime::retention::{Retention, RetentionReport};
use crate::store::{PurgeFilter, Storage, StoreError};

/// Rows removed per store call.
const BATCH: usize = 500;

fn cut_off(age: Duration) -> i64 {
    now_micros().saturating_sub(i64::try_from(age.as_micros()).unwrap_or(i64::MAX))
}

/// The retention purge: what the background purge and `Runtime::purge_expired` run.
pub(crate) struct RetentionPurge {
    store: Storage,
    /// This runtime's lease owner name: one process of a store purges at a time.
    owner: String,
    /// How long the retention lease lasts (ST-11).
    lease_ttl: Duration,
    retention: Retention,
}

impl RetentionPurge {
    pub(crate) fn new(
        store: Storage,
        owner: String,
        lease_ttl: Duration,
        retention: Retention,
    ) -> Self {
        Self {
            store,
            owner,
            lease_ttl,
            retention,
        }
    }

    /// How often the background purge runs; `None`: it does not.
    pub(crate) fn every(&self) -> Option<Duration> {
        self.retention.every
    }

    /// One retention pass now (what the background purge does every
    /// [`Retention::every`]): removes what is older than the runtime's [`Retention`] ages,
    /// in batches. Returns `None` when another process holds the retention lease (it is
    /// purging).
    ///
    /// # Errors
    ///
    /// The store's.
    pub(crate) async fn purge_expired(&self) -> Result<Option<RetentionReport>, StoreError> {
        // Long enough for a pass; a process that dies during one gives it up then.
        let ttl = self.lease_ttl.max(Duration::from_secs(600));
        let Some(lease) =
            NamedLease::try_acquire(&self.store, &self.owner, "retention", ttl).await?
        else {
            return Ok(None);
        };
        let result = self.purge_pass().await;
        lease.release().await;
        result.map(Some)
    }

    async fn purge_pass(&self) -> Result<RetentionReport, StoreError> {
        let retention = &self.retention;
        let store = &self.store;
        let mut report = RetentionReport::default();
        if let Some(age) = retention.finished {
            let mut filter = PurgeFilter::finished_before(cut_off(age));
            filter.batch_size = BATCH;
            report.instances = store.purge(filter).await?;
        }
        let before = cut_off(retention.dead_letters);
        loop {
            let removed = store.purge_dead_letters(before, BATCH).await?;
            report.dead_letters += removed;
            if removed < BATCH as u64 {
                break;
            }
        }
        let before = cut_off(retention.receipts);
        loop {
            let removed = store.purge_receipts(before, BATCH).await?;
            report.receipts += removed;
            if removed < BATCH as u64 {
                break;
            }
        }
        let before = cut_off(retention.idempotency_records);
        loop {
            let removed = store.purge_idempotency_records(before, BATCH).await?;
            report.idempotency_records += removed;
            if removed < BATCH as u64 {
                break;
            }
        }
        Ok(report)
    }
}

/// The background purge: one pass at start, then one every `every`.
pub(crate) async fn retention_purge(
    weak: Weak<RetentionPurge>,
    mut stop: watch::Receiver<bool>,
    every: Duration,
) {
    loop {
        {
            let Some(purge) = weak.upgrade() else { return };
            if *stop.borrow() {
                return;
            }
            match purge.purge_expired().await {
                Ok(Some(report)) if report != RetentionReport::default() => {
                    tracing::info!(
                        instances = report.instances,
                        receipts = report.receipts,
                        idempotency_records = report.idempotency_records,
                        dead_letters = report.dead_letters,
                        "retention: purged"
                    );
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "retention: purge failed"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}
