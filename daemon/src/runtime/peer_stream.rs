//! What roostd holds of what a peer sends during one call, one set of
//! limits for every version of the interface (`murmur:peer/call@0.1.0` and
//! `@0.2.0`, a peer here or elsewhere): the largest event read, the bytes
//! and the number of artifacts a call keeps, the text it passes on to the
//! caller's own task, how often that text is stored there, and how long a
//! call may wait. A peer past a limit ends its call with [`PeerLimit`]; the
//! text it streams waits in one bounded buffer ([`progress`]) that the
//! peer's reader never blocks on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// Largest event (or whole answer) read from a peer.
pub const MAX_EVENT_BYTES: usize = 1 << 20;
/// Most a call holds of a peer's artifacts (what the guest gets), ids
/// included.
pub const MAX_HELD_BYTES: usize = 4 << 20;
/// Most artifacts a call holds.
pub const MAX_ARTIFACTS: usize = 256;
/// Longest task or context id a peer may name (A2A's are UUIDs): roostd
/// keeps the ids of the tasks each session sent.
pub const MAX_ID_BYTES: usize = 256;
/// Most text of a peer's stream a call passes on to the caller's own task
/// (as working status messages); the rest still reaches the answer.
pub const MAX_PASSED_ON_BYTES: usize = 1 << 20;
/// Most passed-on text waiting to be stored; what comes faster than it is
/// stored is left out (it still reaches the answer).
pub const MAX_PENDING_BYTES: usize = 64 << 10;
/// Passed-on text is stored into the caller's task at most once in this
/// long (what comes meanwhile is joined into one status message).
pub const STORED_EVERY: Duration = Duration::from_millis(100);
/// Longest wait of a call, and the wait when the guest names none.
pub const MAX_WAIT_SECS: u32 = 3600;
pub const DEFAULT_WAIT_SECS: u32 = 300;

/// The wait a guest's `timeout-secs` asks for (0: the default), bounded.
pub fn wait(secs: u32) -> Duration {
    let secs = match secs {
        0 => DEFAULT_WAIT_SECS,
        n => n.min(MAX_WAIT_SECS),
    };
    Duration::from_secs(u64::from(secs))
}

/// A limit a peer went past: its call is over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerLimit {
    #[error("it sent an event over {} MiB", MAX_EVENT_BYTES >> 20)]
    Event,
    #[error("its task's artifacts grew past {} MiB", MAX_HELD_BYTES >> 20)]
    Held,
    #[error("it sent more than {MAX_ARTIFACTS} artifacts")]
    Artifacts,
    #[error("it named its task or context with an id over {MAX_ID_BYTES} bytes")]
    Id,
}

/// The sending side of a call's passed-on text: never waits, never holds
/// more than [`MAX_PENDING_BYTES`], passes on at most
/// [`MAX_PASSED_ON_BYTES`] in all.
pub struct PeerProgress {
    shared: Arc<Shared>,
}

/// The receiving side: text to store into the caller's task, at most once
/// in [`STORED_EVERY`].
pub struct ProgressRx {
    shared: Arc<Shared>,
    next: tokio::time::Instant,
}

struct Shared {
    pending: Mutex<Pending>,
    notify: Notify,
    /// Senders alive: at none, the receiver ends once it has read all.
    senders: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Pending {
    text: String,
    passed_on: usize,
    /// Every sender is gone.
    closed: bool,
}

/// A call's passed-on text, both ends.
pub fn progress() -> (PeerProgress, ProgressRx) {
    let shared = Arc::new(Shared {
        pending: Mutex::default(),
        notify: Notify::new(),
        senders: std::sync::atomic::AtomicUsize::new(1),
    });
    (
        PeerProgress {
            shared: Arc::clone(&shared),
        },
        ProgressRx {
            shared,
            next: tokio::time::Instant::now(),
        },
    )
}

impl PeerProgress {
    /// Passes `text` on, as far as the bounds let it.
    pub fn pass_on(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let Ok(mut pending) = self.shared.pending.lock() else {
            return;
        };
        let room = MAX_PASSED_ON_BYTES
            .saturating_sub(pending.passed_on)
            .min(MAX_PENDING_BYTES.saturating_sub(pending.text.len()));
        if text.len() > room {
            return;
        }
        pending.passed_on += text.len();
        pending.text.push_str(text);
        drop(pending);
        self.shared.notify.notify_one();
    }
}

impl Clone for PeerProgress {
    fn clone(&self) -> Self {
        self.shared
            .senders
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for PeerProgress {
    fn drop(&mut self) {
        let left = self
            .shared
            .senders
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if left == 1 {
            if let Ok(mut pending) = self.shared.pending.lock() {
                pending.closed = true;
            }
            self.shared.notify.notify_one();
        }
    }
}

impl ProgressRx {
    /// The text passed on since the last, once it may be stored; `None`
    /// once the call is over and nothing is left.
    pub async fn next(&mut self) -> Option<String> {
        tokio::time::sleep_until(self.next).await;
        loop {
            let notified = self.shared.notify.notified();
            match self.take() {
                (Some(text), _) => {
                    self.next = tokio::time::Instant::now() + STORED_EVERY;
                    return Some(text);
                }
                (None, true) => return None,
                (None, false) => notified.await,
            }
        }
    }

    /// What is left, at once (the call is over).
    pub fn rest(&mut self) -> Option<String> {
        self.take().0
    }

    fn take(&self) -> (Option<String>, bool) {
        let Ok(mut pending) = self.shared.pending.lock() else {
            return (None, true);
        };
        let text = std::mem::take(&mut pending.text);
        ((!text.is_empty()).then_some(text), pending.closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn passed_on_text_is_bounded_and_stored_at_most_ten_times_a_second() {
        let (tx, mut rx) = progress();
        // A flood: every piece arrives before the first store.
        let piece = "x".repeat(1024);
        for _ in 0..1000 {
            tx.pass_on(&piece);
        }
        let first = rx.next().await.expect("text");
        assert_eq!(first.len(), MAX_PENDING_BYTES, "held at most its bound");
        let at = tokio::time::Instant::now();
        tx.pass_on("after");
        assert_eq!(rx.next().await.as_deref(), Some("after"));
        assert!(at.elapsed() >= STORED_EVERY, "not stored sooner");
        // Past the whole bound nothing more is passed on.
        for _ in 0..MAX_PASSED_ON_BYTES {
            tx.pass_on("z");
            let _ = rx.rest();
        }
        tx.pass_on("more");
        assert_eq!(rx.rest(), None);
        // Every sender gone: the receiver ends.
        let clone = tx.clone();
        drop(tx);
        clone.pass_on("");
        drop(clone);
        assert_eq!(rx.next().await, None);
    }
}
