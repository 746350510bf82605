//! Cooperative cancellation of running tasks (ENG-36, FLT-16, FLT-17): a token in the
//! [`TaskContext`](crate::TaskContext), fired when the instance is cancelled while the task
//! runs or when its attempt times out. A task that has not returned `cancel_grace` after the
//! token fired is dropped at its next await (ENG-52).

use std::sync::Arc;

use tokio::sync::watch;

/// A cancellation token (ENG-36). Cheap to clone; clones share the state. Once fired it stays
/// fired.
#[derive(Debug, Clone)]
pub struct CancellationToken {
    fired: Arc<watch::Sender<bool>>,
}

impl Default for CancellationToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancellationToken {
    /// A token not fired yet.
    pub fn new() -> Self {
        let (fired, _) = watch::channel(false);
        Self {
            fired: Arc::new(fired),
        }
    }

    /// Fires the token.
    pub fn cancel(&self) {
        self.fired.send_replace(true);
    }

    /// Whether the token fired.
    pub fn is_cancelled(&self) -> bool {
        *self.fired.borrow()
    }

    /// Completes once the token fired.
    pub async fn cancelled(&self) {
        let mut receiver = self.fired.subscribe();
        // The sender lives in `self`: it cannot be dropped while we wait.
        let _ = receiver.wait_for(|fired| *fired).await;
    }
}

/// A duration as the message of FLT-17 writes it: `30s`, `1500ms`, `2m`.
pub(crate) fn human_ms(ms: u64) -> String {
    if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fired_token_wakes_its_waiters() {
        let token = CancellationToken::new();
        let clone = token.clone();
        let waiter = tokio::spawn(async move { clone.cancelled().await });
        tokio::task::yield_now().await;
        assert!(!token.is_cancelled());
        token.cancel();
        assert!(waiter.await.is_ok());
        assert!(token.is_cancelled());
        assert_eq!(human_ms(30_000), "30s");
        assert_eq!(human_ms(120_000), "2m");
        assert_eq!(human_ms(1_500), "1500ms");
    }
}
