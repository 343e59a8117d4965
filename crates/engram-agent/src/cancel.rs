//! Cancelling a run from outside (Ctrl-C, a shutdown): a token shared between the one who
//! cancels and the run, which checks it at every await point that can take long.

use std::sync::Arc;

use tokio::sync::watch;

/// A cancellation flag that can be awaited. Clones share the flag; once cancelled it stays so
/// (make a new token for the next run).
#[derive(Debug, Clone)]
pub struct CancelToken {
    flag: Arc<watch::Sender<bool>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self {
            flag: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Cancels: every [`CancelToken::cancelled`] wakes up, now and later.
    pub fn cancel(&self) {
        self.flag.send_replace(true);
    }

    /// Whether it was cancelled.
    pub fn is_cancelled(&self) -> bool {
        *self.flag.borrow()
    }

    /// Resolves once the token is cancelled (at once if it already is).
    pub async fn cancelled(&self) {
        let mut rx = self.flag.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|cancelled| *cancelled).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn waiters_wake_when_cancelled_and_late_waiters_return_at_once() {
        let token = CancelToken::new();
        assert!(!token.is_cancelled());
        let waiter = tokio::spawn({
            let token = token.clone();
            async move { token.cancelled().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        token.cancel();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(token.is_cancelled());
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .unwrap();
    }
}
