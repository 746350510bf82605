//! Cooperative cancellation of running tasks (ENG-36, FLT-16, FLT-17): a token in the
//! [`TaskContext`](crate::TaskContext), fired when the instance is cancelled while the task
//! runs or when its attempt times out. A task that has not returned `cancel_grace` after the
//! token fired is dropped at its next await (ENG-52).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A cancellation token (ENG-36). Cheap to clone; clones share the state. Once fired it stays
/// fired.
#[derive(Debug, Clone)]
pub struct CancellationToken {
    inner: Arc<Fired>,
}

/// A token's shared state: one allocation, and dropping it wakes nobody (a token that never
/// fires, as nearly every run's, costs its allocation only).
#[derive(Debug, Default)]
struct Fired {
    fired: AtomicBool,
    waiters: Notify,
}

impl Default for CancellationToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancellationToken {
    /// A token not fired yet.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Fired::default()),
        }
    }

    /// Fires the token.
    pub fn cancel(&self) {
        self.inner.fired.store(true, Ordering::SeqCst);
        self.inner.waiters.notify_waiters();
    }

    /// Whether the token fired.
    pub fn is_cancelled(&self) -> bool {
        self.inner.fired.load(Ordering::SeqCst)
    }

    /// Completes once the token fired.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.waiters.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the flag is read: a `cancel` after the read wakes it.
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
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

    #[tokio::test]
    async fn a_token_fired_before_the_wait_completes_it_and_every_waiter_wakes() {
        let token = CancellationToken::new();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let clone = token.clone();
                tokio::spawn(async move { clone.cancelled().await })
            })
            .collect();
        tokio::task::yield_now().await;
        token.clone().cancel();
        for waiter in waiters {
            assert!(waiter.await.is_ok());
        }
        // Fired already: a wait started now returns at once, and the token stays fired.
        token.cancelled().await;
        assert!(token.is_cancelled());
        assert!(!CancellationToken::new().is_cancelled());
    }
}
