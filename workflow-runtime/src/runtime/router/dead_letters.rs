//! Dead letters (RT-22, RT-28): stimuli that expired in the queue or were rejected by an
//! instance, listed and replayed by operators.

use serde_json::Value;

use super::Router;
use crate::base::new_ulid;
use crate::base::now_micros;
use crate::routing::{Rejection, Targets};
use crate::store::{DeadLetter, DeadLetterFilter, DeadLetterReason, QueueItem, StoreError};

impl Router {
    /// RT-22 (and ST-24): writes the stimulus of `base` to the dead letters with reason
    /// `Rejected` and the typed error, targeted at `instance` and `bookmark` (so a replay after a fix reaches
    /// only them).
    pub(crate) async fn reject(
        &self,
        mut base: QueueItem,
        instance: &str,
        bookmark: &str,
        rejection: &Rejection,
    ) -> Result<(), StoreError> {
        let targets = Targets {
            instance_id: Some(instance.to_owned()),
            bookmark_id: Some(bookmark.to_owned()),
            ..Targets::default()
        };
        base.item_id = new_ulid();
        base.targets = serde_json::to_value(&targets).unwrap_or(Value::Null);
        base.attempts = 0;
        base.held = false;
        let error = serde_json::to_string(rejection).unwrap_or_default();
        let store = &self.store;
        let item_id = base.item_id.clone();
        warn_rejected(instance, &base.name, &item_id, rejection);
        store.enqueue(base).await?;
        let moved = store
            .dead_letter(
                &item_id,
                DeadLetterReason::Rejected,
                Some(&error),
                now_micros(),
            )
            .await?;
        if moved {
            self.run_path
                .metrics()
                .dead_lettered(DeadLetterReason::Rejected, 1);
        }
        Ok(())
    }

    /// RT-22 (and ST-24): moves `item`, a stimulus for `instance` alone, to the dead letters
    /// itself with reason `Rejected` and the typed error. A move happens at most once per
    /// item (C-17): a send that rejects the same item while this worker delivers it makes no
    /// second dead letter.
    pub(crate) async fn reject_in_place(
        &self,
        item: &QueueItem,
        instance: &str,
        rejection: &Rejection,
    ) -> Result<(), StoreError> {
        warn_rejected(instance, &item.name, &item.item_id, rejection);
        let error = serde_json::to_string(rejection).unwrap_or_default();
        let moved = self
            .store
            .dead_letter(
                &item.item_id,
                DeadLetterReason::Rejected,
                Some(&error),
                now_micros(),
            )
            .await?;
        if moved {
            self.run_path
                .metrics()
                .dead_lettered(DeadLetterReason::Rejected, 1);
        }
        Ok(())
    }

    /// Re-enqueues a dead letter with a fresh TTL (the runtime's default), zero attempts and
    /// the same stimulus id, so receipts still prevent a double application (RT-28).
    pub(crate) async fn replay_dead_letter(&self, item_id: &str) -> Result<QueueItem, StoreError> {
        let item = self
            .store
            .replay_dead_letter(item_id, now_micros(), self.queue_ttl)
            .await?;
        self.doorbell.notify_one();
        Ok(item)
    }

    /// Dead letters (RT-28), oldest first.
    pub(crate) async fn dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.store.list_dead_letters(filter).await
    }
}

/// The `warn` event of a stimulus dead-lettered as rejected by `instance` (RT-22, ST-24).
fn warn_rejected(instance: &str, event: &str, item: &str, rejection: &Rejection) {
    match rejection {
        Rejection::PayloadDecode {
            node,
            payload_type,
            message,
            ..
        } => tracing::warn!(
            instance,
            node = node.as_str(),
            event,
            item,
            reason = "rejected",
            payload_type = payload_type.as_str(),
            error = message.as_str(),
            "stimulus dead-lettered: its payload does not decode for the waiting activity"
        ),
        Rejection::StateTooLarge {
            size,
            limit,
            incident,
            ..
        } => tracing::warn!(
            instance,
            event,
            item,
            reason = "rejected",
            size,
            limit,
            incident = incident.as_str(),
            "stimulus dead-lettered: its run made the instance's state too large; the instance is faulted"
        ),
    }
}
