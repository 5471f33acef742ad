//! The bound on how many sessions that hibernate are awake at once
//! (`hibernation.max_awake`): past it, the one idle the longest is told to
//! hibernate now rather than after its `hibernate_after`.
//!
//! Without it a burst of starts outruns the hibernations (each session
//! sleeps `hibernate_after` after its start, and two cores busy starting
//! others end few launches), and the memory of tens of thousands awake at
//! once stays with the process after they have gone to sleep.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

use super::lock;

/// Sessions that hibernate: how many are awake, and those idle, oldest
/// first.
pub(super) struct Drowse {
    /// `usize::MAX`: no bound.
    max: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    awake: usize,
    /// Awake ones told to hibernate that have not ended yet.
    told: usize,
    /// Idle ones, by when they became idle.
    idle: BTreeMap<u64, Arc<Slot>>,
    seq: u64,
}

#[derive(Default)]
struct Slot {
    told: AtomicBool,
    notify: Notify,
}

/// One awake launch of a session that hibernates; dropped as it ends.
pub struct Awake {
    drowse: Arc<Drowse>,
    slot: Arc<Slot>,
}

/// While an [`Awake`] launch waits idle for a task.
pub(super) struct Idle<'a> {
    awake: &'a Awake,
    seq: u64,
}

impl Drowse {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            max: AtomicUsize::new(usize::MAX),
            state: Mutex::default(),
        })
    }

    pub(super) fn set_max(&self, max: Option<usize>) {
        self.max.store(max.unwrap_or(usize::MAX), Ordering::Relaxed);
        self.evict(&mut lock(&self.state));
    }

    pub(super) fn awake(self: &Arc<Self>) -> Awake {
        let mut state = lock(&self.state);
        state.awake += 1;
        self.evict(&mut state);
        Awake {
            drowse: Arc::clone(self),
            slot: Arc::default(),
        }
    }

    /// Past the bound: the oldest idle ones are told, as many as it takes.
    fn evict(&self, state: &mut State) {
        let max = self.max.load(Ordering::Relaxed);
        while state.awake - state.told > max {
            let Some((_, slot)) = state.idle.pop_first() else {
                return;
            };
            slot.told.store(true, Ordering::Relaxed);
            state.told += 1;
            slot.notify.notify_one();
        }
    }
}

impl Awake {
    /// The launch waits idle: it may be told to hibernate until the guard
    /// is dropped.
    pub(super) fn idle(&self) -> Idle<'_> {
        let drowse = &self.drowse;
        let mut state = lock(&drowse.state);
        // Told before, and a task came first: awake again, counted so.
        if self.slot.told.swap(false, Ordering::Relaxed) {
            state.told -= 1;
        }
        state.seq += 1;
        let seq = state.seq;
        state.idle.insert(seq, Arc::clone(&self.slot));
        drowse.evict(&mut state);
        Idle { awake: self, seq }
    }
}

impl Idle<'_> {
    /// Resolves when this launch is told to hibernate now.
    pub(super) async fn told(&self) {
        let slot = &self.awake.slot;
        loop {
            let notified = slot.notify.notified();
            if slot.told.load(Ordering::Relaxed) {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        lock(&self.awake.drowse.state).idle.remove(&self.seq);
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        let mut state = lock(&self.drowse.state);
        state.awake -= 1;
        if self.slot.told.load(Ordering::Relaxed) {
            state.told -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    fn told(idle: &Idle<'_>) -> bool {
        let fut = std::pin::pin!(idle.told());
        matches!(
            fut.poll(&mut Context::from_waker(Waker::noop())),
            Poll::Ready(())
        )
    }

    #[test]
    fn past_the_bound_the_one_idle_the_longest_is_told() {
        let drowse = Drowse::new();
        drowse.set_max(Some(2));
        let (a, b) = (drowse.awake(), drowse.awake());
        let (idle_a, idle_b) = (a.idle(), b.idle());
        assert!(!told(&idle_a) && !told(&idle_b), "within the bound");
        let c = drowse.awake();
        assert!(told(&idle_a), "the oldest idle is told");
        assert!(!told(&idle_b));
        // `a` hibernates (its launch ends): the bound holds again.
        drop(idle_a);
        drop(a);
        let idle_c = c.idle();
        assert!(!told(&idle_b) && !told(&idle_c));
        // A fourth while `b` runs a task (not idle): `c` is told.
        drop(idle_b);
        let d = drowse.awake();
        assert!(told(&idle_c));
        // `c` took a task instead; its next idle wait counts it awake again
        // and, still past the bound, tells the oldest idle one (itself).
        drop(idle_c);
        let idle_c = c.idle();
        assert!(told(&idle_c));
        drop(idle_c);
        drop(d);
        let idle_c = c.idle();
        assert!(!told(&idle_c), "two awake: within the bound");
        drop(idle_c);
        drop((b, c));
        let state = lock(&drowse.state);
        assert_eq!((state.awake, state.told, state.idle.len()), (0, 0, 0));
    }

    #[test]
    fn no_bound_tells_none() {
        let drowse = Drowse::new();
        let all: Vec<_> = (0..100).map(|_| drowse.awake()).collect();
        let idle: Vec<_> = all.iter().map(Awake::idle).collect();
        assert!(idle.iter().all(|i| !told(i)));
    }
}
