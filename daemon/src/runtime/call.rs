//! One guest call, the way every guest is called (a capsule's `run`, an A2A
//! task's `handle`, a tool's `run`, a hook's `handle`): instantiation and the
//! call each with a fresh epoch budget, raced against the wall-clock backstop
//! (time waited for input aside) and the caller's cancel and stop tokens, and
//! a failure classified.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wasmtime::Store;

use super::GuestState;
use super::limits::{self, GuestFailure};

/// The instantiate-and-call future a caller hands to [`call_guest`].
pub(crate) type GuestCall<'s, R> = Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + 's>>;

/// Starts a fresh epoch budget (one for instantiation, another for the call).
pub(crate) fn fresh_budget(store: &mut Store<GuestState>) {
    store.data_mut().guard.arm();
    store.set_epoch_deadline(1);
}

/// What ends a call from outside besides its own deadline.
#[derive(Default, Clone, Copy)]
pub(crate) struct Halts<'a> {
    /// The client canceled the task: the call ends as
    /// [`GuestFailure::Canceled`], also when the guest trapped because of it.
    pub cancel: Option<&'a CancellationToken>,
    /// The session is stopping: [`GuestFailure::Stopped`] at once (the epoch
    /// guard's own stop token interrupts running guest code as well).
    pub stop: Option<&'a CancellationToken>,
}

/// Runs `call` (which instantiates and calls, and should call
/// [`fresh_budget`] between the two) in `store`.
pub(crate) async fn call_guest<R>(
    store: &mut Store<GuestState>,
    halts: Halts<'_>,
    call: impl for<'s> FnOnce(&'s mut Store<GuestState>) -> GuestCall<'s, R>,
) -> Result<R, GuestFailure> {
    let budget = store.data().guard.budget();
    let seconds = budget.as_secs();
    let waited = store.data().waited.clone();
    fresh_budget(store);
    let result = tokio::select! {
        result = call(store) => result,
        () = until(halts.cancel) => return Err(GuestFailure::Canceled),
        () = until(halts.stop) => return Err(GuestFailure::Stopped),
        () = waited.backstop(backstop(budget)) => {
            return Err(GuestFailure::DeadlineExceeded { seconds });
        }
    };
    match result {
        Ok(value) => Ok(value),
        // Canceled while it waited for input: the request trapped.
        Err(_) if halts.cancel.is_some_and(CancellationToken::is_cancelled) => {
            Err(GuestFailure::Canceled)
        }
        Err(error) => {
            let state = store.data();
            Err(limits::classify(
                &error,
                &state.guard,
                &state.limiter,
                seconds,
                &state.log.stderr_tail(),
            ))
        }
    }
}

/// Resolves when `token` is cancelled; never without one.
async fn until(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// How long a guest call may take in wall-clock time before it is stopped
/// whatever its epoch deadline says: host-side waits (an HTTP response) do
/// not tick the epoch.
fn backstop(budget: Duration) -> Duration {
    budget * 2 + Duration::from_secs(1)
}
