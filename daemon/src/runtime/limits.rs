//! Execution limits of one store: the memory/table/instance limiter, the epoch
//! guard that enforces wall-clock deadlines and stop requests, and the
//! classification of a failed guest call.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::{ResourceLimiter, UpdateDeadline};

/// Why a guest call did not return normally, as reported in the session record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestFailure {
    #[error("deadline exceeded after {seconds} s")]
    DeadlineExceeded { seconds: u64 },
    #[error("resource limit: {message}")]
    ResourceLimit { message: String },
    #[error("trap: {message}")]
    Trap { message: String },
    /// Interrupted by a stop request (operator or shutdown).
    #[error("stopped")]
    Stopped,
    /// The client canceled the A2A task the call worked on.
    #[error("canceled")]
    Canceled,
    /// The host could not set the guest up (e.g. the workdir vanished).
    #[error("setup failed: {message}")]
    Setup { message: String },
}

/// Why the epoch guard interrupted a guest; carried inside the wasmtime error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Interrupt {
    #[error("guest interrupted: deadline exceeded")]
    Deadline,
    #[error("guest interrupted: stop requested")]
    Stop,
}

/// Per-store memory, table and instance limits (`capabilities.limits.memory_mb`).
pub(crate) struct StoreLimiter {
    memory_limit: usize,
    memory_used: usize,
    /// Set when a growth was refused, so a resulting trap is classified as a limit.
    pub(crate) denied: Option<String>,
}

const MAX_INSTANCES: usize = 64;
const MAX_TABLES: usize = 64;
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

impl StoreLimiter {
    pub(crate) fn new(memory_limit: usize) -> Self {
        Self {
            memory_limit,
            memory_used: 0,
            denied: None,
        }
    }
}

impl ResourceLimiter for StoreLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory_used - current.min(self.memory_used) + desired;
        if total > self.memory_limit {
            self.denied = Some(format!(
                "memory: guest asked for {} MiB, limit is {} MiB",
                total.div_ceil(1 << 20),
                self.memory_limit >> 20
            ));
            return Ok(false);
        }
        self.memory_used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.denied = Some(format!(
                "tables: guest asked for {desired} elements, limit is {MAX_TABLE_ELEMENTS}"
            ));
            return Ok(false);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_INSTANCES
    }
}

/// Wall-clock deadline and stop signal, checked on every epoch tick. Guests yield
/// to the executor on every tick, so a spinning guest cannot starve others.
pub(crate) struct EpochGuard {
    budget: Duration,
    deadline: Instant,
    stop: CancellationToken,
    pub(crate) tripped: Option<Interrupt>,
}

impl EpochGuard {
    pub(crate) fn new(stop: CancellationToken) -> Self {
        Self {
            budget: Duration::from_secs(30),
            deadline: Instant::now(),
            stop,
            tripped: None,
        }
    }

    pub(crate) fn set_budget(&mut self, budget: Duration) {
        self.budget = budget;
    }

    pub(crate) fn budget(&self) -> Duration {
        self.budget
    }

    /// Starts a fresh budget (one for instantiation, another for `run`).
    pub(crate) fn arm(&mut self) {
        self.deadline = Instant::now() + self.budget;
    }

    /// Moves the deadline by time the guest spent waiting on someone else
    /// (an input request), which its budget does not count.
    pub(crate) fn extend(&mut self, by: Duration) {
        self.deadline += by;
    }

    pub(crate) fn on_tick(&mut self) -> wasmtime::Result<UpdateDeadline> {
        let interrupt = if self.stop.is_cancelled() {
            Some(Interrupt::Stop)
        } else if Instant::now() >= self.deadline {
            Some(Interrupt::Deadline)
        } else {
            None
        };
        match interrupt {
            Some(i) => {
                self.tripped = Some(i);
                Err(wasmtime::Error::new(i))
            }
            None => Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            )),
        }
    }
}

/// Time a store's guest spent waiting for input, shared with the wall-clock
/// backstop outside the store so that it waits that much longer (and never
/// fires during a wait).
#[derive(Clone, Default)]
pub(crate) struct Waited(std::sync::Arc<WaitedInner>);

#[derive(Default)]
pub(crate) struct WaitedInner {
    ms: std::sync::atomic::AtomicU64,
    waiting: std::sync::atomic::AtomicU32,
}

impl Waited {
    /// A wait begins.
    pub(crate) fn begin(&self) {
        self.0
            .waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The wait that began took `by`.
    pub(crate) fn end(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0
            .ms
            .fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
        self.0
            .waiting
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn get(&self) -> Duration {
        Duration::from_millis(self.0.ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn waiting(&self) -> bool {
        self.0.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Resolves once `base` plus the time waited has passed since the call,
    /// outside any wait.
    pub(crate) async fn backstop(&self, base: Duration) {
        let start = tokio::time::Instant::now();
        loop {
            tokio::time::sleep_until(start + base + self.get()).await;
            if self.waiting() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            } else if start + base + self.get() <= tokio::time::Instant::now() {
                return;
            }
        }
    }
}

/// Maps a failed instantiate/call onto the most specific failure class.
pub(crate) fn classify(
    error: &wasmtime::Error,
    guard: &EpochGuard,
    limiter: &StoreLimiter,
    timeout_secs: u64,
    stderr_tail: &str,
) -> GuestFailure {
    let interrupt = error.downcast_ref::<Interrupt>().copied().or(guard.tripped);
    match interrupt {
        Some(Interrupt::Stop) => return GuestFailure::Stopped,
        Some(Interrupt::Deadline) => {
            return GuestFailure::DeadlineExceeded {
                seconds: timeout_secs,
            };
        }
        None => {}
    }
    if let Some(message) = &limiter.denied {
        return GuestFailure::ResourceLimit {
            message: message.clone(),
        };
    }
    let text = format!("{error:#}");
    let lower = text.to_ascii_lowercase();
    if lower.contains("instance limit") || lower.contains("maximum concurrent") {
        return GuestFailure::ResourceLimit { message: text };
    }
    let mut message = error
        .downcast_ref::<wasmtime::Trap>()
        .map(|trap| trap.to_string())
        .unwrap_or_else(|| first_line(&text));
    if !stderr_tail.is_empty() {
        message = format!("{message}; guest stderr: {stderr_tail}");
    }
    GuestFailure::Trap { message }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}
