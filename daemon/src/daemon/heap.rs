//! Gives the heap's free pages back to the kernel once many launches have
//! ended: glibc's allocator keeps the pages of a burst's peak in its arenas
//! (in holes between what stays), so the memory of tens of thousands of
//! sessions that hibernated or stopped would stay resident for good.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Launches that must have ended since the last trim before the next one.
const ENDED_BEFORE_TRIM: u64 = 1_000;
/// How often the count is looked at.
const EVERY: Duration = Duration::from_secs(5);

/// Until `stop`: every few seconds, if [`ENDED_BEFORE_TRIM`] launches have
/// ended since the last trim (`ended` counts them), returns the free pages
/// of every arena to the kernel. A trim walks the free chunks under each
/// arena's lock, so it runs on a blocking thread and only after a burst.
pub async fn give_back(ended: impl Fn() -> u64 + Send + 'static, stop: CancellationToken) {
    let mut at = ended();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = ended();
        if now.saturating_sub(at) < ENDED_BEFORE_TRIM {
            continue;
        }
        at = now;
        let started = Instant::now();
        let Ok(released) = tokio::task::spawn_blocking(trim).await else {
            continue;
        };
        tracing::debug!(
            ended = now,
            released,
            trim_ms = started.elapsed().as_millis() as u64,
            "heap trimmed"
        );
    }
}

/// Returns free heap pages to the kernel; whether any were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() -> bool {
    // SAFETY: malloc_trim has no preconditions; it takes each arena's lock.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators give pages back on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}
