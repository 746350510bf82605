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
        match rejection {
            Rejection::PayloadDecode {
                node,
                payload_type,
                message,
                ..
            } => tracing::warn!(
                instance,
                node = node.as_str(),
                event = base.name.as_str(),
                item = item_id.as_str(),
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
                event = base.name.as_str(),
                item = item_id.as_str(),
                reason = "rejected",
                size,
                limit,
                incident = incident.as_str(),
                "stimulus dead-lettered: its run made the instance's state too large; the instance is faulted"
            ),
        }
        store.enqueue(base).await?;
        store
            .dead_letter(
                &item_id,
                DeadLetterReason::Rejected,
                Some(&error),
                now_micros(),
            )
            .await?;
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
