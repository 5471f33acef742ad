//! Delivery: a launch's pending tasks, then its inbox (`Queue`), and one
//! delivered task's run, with its answer and final state recorded
//! (`Broker::serve`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::sync::mpsc;

use tokio_util::sync::CancellationToken;

use crate::runtime::Outcome;

use super::{
    ANSWER_ARTIFACT, Broker, EventKind, Inbox, Incoming, NEVER_RAN, TaskId, TaskLink, TaskSlot,
    TaskState, lock,
};

/// The tasks of a session's inbox that wait and still count against its
/// `queue_depth`: a task canceled while it waits leaves this set at once
/// (its slot is free again) though the channel still holds it until the
/// session receives and skips it.
pub(super) type Queued = Arc<Mutex<HashSet<TaskId>>>;

/// The channel holds this many times `queue_depth` (at least
/// [`INBOX_SLACK`] more), so tasks canceled while they wait do not keep new
/// ones out; the depth itself is counted apart ([`Queued`]).
pub(super) const INBOX_SLACK: usize = 16;

/// The receiving end of a session's inbox. Tasks travel boxed: the channel
/// allocates its slots in blocks of 32 up front, and every live session has one.
pub struct InboxRx {
    pub(super) rx: mpsc::Receiver<Box<Incoming>>,
    pub(super) queued: Queued,
    /// Cancelled by `Broker::quiesce`: take no more tasks.
    pub(super) quiesce: CancellationToken,
    /// Set when a hibernated session's launch takes it: when the wake
    /// began (marked on the first task it takes).
    pub(super) woken: Option<std::time::Instant>,
    /// A task taken out of the channel as the inbox was parked
    /// ([`InboxRx::forget_waker`]): the next one handed out.
    pub(super) first: Option<Box<Incoming>>,
}

impl InboxRx {
    /// The next task handed to the session; it no longer counts as waiting.
    pub async fn recv(&mut self) -> Option<Box<Incoming>> {
        let task = match self.first.take() {
            Some(task) => task,
            None => self.rx.recv().await?,
        };
        lock(&self.queued).remove(&task.task_id);
        Some(task)
    }

    /// The next task already in the inbox, if any (it still counts as
    /// waiting: the caller decides what becomes of it).
    pub(super) fn try_recv(&mut self) -> Option<Box<Incoming>> {
        self.first.take().or_else(|| self.rx.try_recv().ok())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none() && self.rx.is_empty()
    }

    /// Drops the waker of the launch that last waited on this inbox. The
    /// channel keeps the waker of its last `recv` until another replaces
    /// it, and a waker keeps its task's memory (the launch's whole future,
    /// ~6.6 KiB for an agent) allocated after the task ended: a parked
    /// inbox would hold that for as long as its session sleeps. A task
    /// that reaches the channel meanwhile is kept in `first`, not lost.
    pub(super) fn forget_waker(&mut self) {
        if self.first.is_some() {
            return;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let rx = &mut self.rx;
        let mut poll = std::pin::pin!(tokio::task::unconstrained(std::future::poll_fn(|cx| {
            Poll::Ready(rx.poll_recv(cx))
        })));
        if let Poll::Ready(Poll::Ready(Some(task))) = poll.as_mut().poll(&mut cx) {
            self.first = Some(task);
        }
    }

    pub(super) fn close(&mut self) {
        self.rx.close();
    }
}

impl Inbox {
    /// A new inbox for `route` and its receiving end.
    pub(super) fn new(
        route: &str,
        depth: usize,
        same_context: crate::manifest::SameContext,
    ) -> (Self, InboxRx) {
        let (tx, rx) = mpsc::channel(depth.saturating_mul(2).max(depth + INBOX_SLACK));
        let queued = Queued::default();
        let quiesce = CancellationToken::new();
        let inbox = Self {
            tx,
            route: route.to_string(),
            depth,
            queued: Arc::clone(&queued),
            waiting: Arc::default(),
            quiesce: quiesce.clone(),
            same_context,
            handover: false,
            parked: None,
            asleep: false,
            waking: None,
        };
        let rx = InboxRx {
            rx,
            queued,
            quiesce,
            woken: None,
            first: None,
        };
        (inbox, rx)
    }
}

/// What waiting for the next task gave.
pub enum Next {
    Task(Incoming),
    /// Nothing came within the idle timeout.
    Idle,
    Stopped,
    /// The inbox is closed (or the session takes no A2A tasks).
    Closed,
}

/// The tasks one launch of a session takes: those accepted before it
/// (re)started first, then its inbox.
#[derive(Default)]
pub struct Queue {
    inbox: Option<InboxRx>,
    pending: std::collections::VecDeque<Incoming>,
    /// Counted up while this launch waits on the inbox (see `Broker::submit`).
    waiting: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// A launch that hibernates: counted toward `hibernation.max_awake`.
    awake: Option<super::drowse::Awake>,
}

impl Queue {
    /// `inbox` for this launch, with the tasks stored for the session that never started.
    pub async fn open(broker: &Broker, session_id: &str, inbox: Option<InboxRx>) -> Self {
        let pending = match &inbox {
            Some(_) => broker.pending(session_id).await.into(),
            None => Default::default(),
        };
        let waiting = inbox.as_ref().and_then(|_| broker.waiting(session_id));
        Self {
            inbox,
            pending,
            waiting,
            awake: None,
        }
    }

    /// This launch hibernates when idle: it counts toward
    /// `hibernation.max_awake`, and an idle wait ends ([`Next::Idle`])
    /// early when that bound is passed and it has been idle the longest.
    pub fn hibernates(&mut self, broker: &Broker) {
        self.awake = Some(broker.drowse.awake());
    }

    /// The next task; `idle` (none: wait until stopped) bounds the wait.
    pub async fn next(
        &mut self,
        idle: Option<std::time::Duration>,
        stop: &CancellationToken,
    ) -> Next {
        // Quiesced (its node is being drained): no more tasks here; those
        // still queued stay queued for where the session goes next.
        if self
            .inbox
            .as_ref()
            .is_some_and(|inbox| inbox.quiesce.is_cancelled())
        {
            return Next::Stopped;
        }
        let woke = self.inbox.as_mut().and_then(|inbox| inbox.woken.take());
        if let Some(mut task) = self.pending.pop_front() {
            task.woke = woke;
            return Next::Task(task);
        }
        let Some(inbox) = self.inbox.as_mut() else {
            return Next::Closed;
        };
        let quiesce = inbox.quiesce.clone();
        let idle = async {
            match idle {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let _waiting = self.waiting.as_deref().map(Waiting::new);
        let drowsy = self.awake.as_ref().map(super::drowse::Awake::idle);
        let told = async {
            match &drowsy {
                Some(idle) => idle.told().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => Next::Stopped,
            () = quiesce.cancelled() => Next::Stopped,
            () = idle => Next::Idle,
            () = told => {
                tracing::debug!("past hibernation.max_awake, idle the longest: hibernating now");
                Next::Idle
            }
            task = inbox.recv() => task.map_or(Next::Closed, |mut t| {
                t.woke = woke;
                Next::Task(*t)
            }),
        }
    }

    /// The launch ends: on a shutdown the queued tasks stay queued for the
    /// restarted session; otherwise those still waiting fail visibly.
    pub async fn release(mut self, broker: &Broker, session_id: &str, shutdown: bool) {
        // An upgrade or hibernation: the inbox goes to the next launch,
        // and the stored tasks this launch had not taken are read again by
        // it.
        if broker.park(session_id, &mut self.inbox) {
            self.pending.clear();
            return;
        }
        if shutdown {
            self.pending.clear();
            if self.inbox.take().is_some() {
                broker.detach_inbox(session_id);
            }
        }
        let pending = std::mem::take(&mut self.pending);
        broker
            .fail_all(pending.into_iter().map(|t| t.task_id), NEVER_RAN)
            .await;
        if let Some(inbox) = self.inbox.take() {
            broker.close_inbox(session_id, inbox).await;
        }
    }
}

impl Broker {
    /// The task woke its session: the wake's time is counted and is a span
    /// of the task's trace.
    fn woke(&self, began: std::time::Instant, traceparent: Option<&str>) {
        let took = began.elapsed();
        self.metrics().woke(took);
        let mut span = crate::telemetry::Span::start_at(
            "session wake",
            crate::telemetry::Kind::Internal,
            traceparent,
            std::time::SystemTime::now() - took,
        );
        span.set("roost.wake_us", took.as_micros() as u64);
        tracing::info!(
            wake_ms = took.as_secs_f64() * 1000.0,
            "woke from hibernation"
        );
    }
}

/// A launch waiting on its inbox, counted while it waits.
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Broker {
    /// Runs one delivered task: points `slot` (through which tool calls ask
    /// for input and stream text) at it, runs `work`, records the answer and
    /// the final state. `None` when the task was canceled before it started.
    ///
    /// The task's `working` status is committed before `work` starts, so a
    /// crash leaves `submitted` only a task that never started (which is
    /// delivered again); one that may have run ends visibly instead.
    pub async fn serve<Fut>(
        self: &Arc<Self>,
        incoming: Incoming,
        input_timeout: Option<std::time::Duration>,
        slot: Option<&TaskSlot>,
        work: impl FnOnce(TaskLink, Incoming) -> Fut,
    ) -> Option<Outcome>
    where
        Fut: std::future::Future<Output = Outcome>,
    {
        let id = incoming.task_id.clone();
        // Canceled while it waited, or already running (delivered twice):
        // it must not run (again).
        let cancel = self.running(&id)?;
        let link = TaskLink::new(Arc::clone(self), &incoming, input_timeout, cancel.clone());
        // `working` is committed before the work starts: after a crash, a
        // task that may have run is never delivered again (it ends visibly
        // instead); only a `submitted` one never started.
        match link.mark_working().await {
            Ok(true) => {}
            // Ended meanwhile (canceled before it started).
            Ok(false) => {
                self.done(&id);
                return None;
            }
            Err(error) => {
                tracing::warn!(%error, task_id = %id, "cannot record the task as working");
                self.done(&id);
                return Some(Outcome::Failed(
                    "the task store failed; see roostd's log".into(),
                ));
            }
        }
        if let Some(slot) = slot {
            *lock(slot) = Some(Arc::new(link.clone()));
        }
        // The task's span (see `watch.rs`) is the parent of what its run does.
        let traceparent = link.traceparent.clone();
        if let Some(began) = incoming.woke {
            self.woke(began, traceparent.as_deref());
        }
        let outcome = crate::telemetry::scope(traceparent, work(link.clone(), incoming)).await;
        if let Some(slot) = slot {
            *lock(slot) = None;
        }

        // The answer and the end are committed together (after any updates
        // still queued).
        let reason = match &outcome {
            Outcome::Canceled => self.cancel_reason(&id),
            _ => String::new(),
        };
        let mut said = None;
        let (answer, end, message) = match &outcome {
            Outcome::CompletedWith(a) => {
                if !a.message.is_empty() {
                    said = Some(a.message.clone());
                }
                (None, TaskState::Completed, None)
            }
            Outcome::ReplyWith(parts) => (
                Some(EventKind::Reply {
                    text: super::parts_text(parts),
                    parts: Some(parts.clone()),
                }),
                TaskState::Completed,
                None,
            ),
            Outcome::Completed(text) if text.is_empty() => (None, TaskState::Completed, None),
            Outcome::Completed(text) => (
                Some(EventKind::Artifact {
                    artifact_id: ANSWER_ARTIFACT.into(),
                    text: text.clone(),
                    append: false,
                    last_chunk: true,
                    part: None,
                }),
                TaskState::Completed,
                None,
            ),
            Outcome::Reply(text) => (
                Some(EventKind::Reply {
                    parts: None,
                    text: text.clone(),
                }),
                TaskState::Completed,
                None,
            ),
            Outcome::Failed(e) => (None, TaskState::Failed, Some(e.as_str())),
            Outcome::Rejected(e) => (None, TaskState::Rejected, Some(e.as_str())),
            Outcome::Canceled => (None, TaskState::Canceled, Some(reason.as_str())),
            Outcome::Stopped => (None, TaskState::Failed, Some("the session was stopped")),
        };
        let status = match said {
            Some(parts) => EventKind::Status {
                state: end,
                message: Some(super::parts_text(&parts)),
                parts: Some(parts),
            },
            None => EventKind::Status {
                state: end,
                message: message.map(str::to_string),
                parts: None,
            },
        };
        let mut events = link.first_events();
        events.extend(answer);
        if let Outcome::CompletedWith(a) = &outcome {
            events.extend(artifact_events(&a.artifacts));
        }
        events.push(status);
        let outcome = match self.publish_all(&id, events).await.map(|mut w| w.pop()) {
            Ok(Some(Some(_))) => outcome,
            // It had already ended (an input request timed out): the session
            // sees what the client sees.
            Ok(_) => match self.log.task(&id).await {
                Ok(Some(t)) if t.state == TaskState::Failed => {
                    Outcome::Failed(t.status_message.unwrap_or_default())
                }
                _ => outcome,
            },
            // The store refused the end (an update it streamed was not
            // stored: the writer will not let it end completed), or failed:
            // it ends failed, saying so, if that can be recorded.
            Err(error) => {
                tracing::warn!(%error, task_id = %id, "cannot record the task's answer and end");
                let why = "some of the task's streamed updates, or its answer, could not be \
                           stored (see roostd's log): its answer is incomplete";
                if let Err(error) = self.finish(&id, TaskState::Failed, Some(why)).await {
                    tracing::warn!(%error, task_id = %id, "cannot record the task as failed");
                }
                Outcome::Failed(why.into())
            }
        };
        self.done(&id);
        Some(outcome)
    }
}

/// The events that store artifacts said with parts: one per part, each after
/// an artifact's first appended to it, its last marked the last chunk. A
/// text part is stored as text.
fn artifact_events(artifacts: &[(String, Vec<serde_json::Value>)]) -> Vec<EventKind> {
    let mut events = Vec::new();
    for (id, parts) in artifacts {
        let id = if id.is_empty() { ANSWER_ARTIFACT } else { id };
        for (i, part) in parts.iter().enumerate() {
            let (text, part) = match part["text"].as_str() {
                Some(text) if part.get("metadata").is_none() => (text.to_string(), None),
                _ => (String::new(), Some(part.clone())),
            };
            events.push(EventKind::Artifact {
                artifact_id: id.to_string(),
                text,
                append: i > 0,
                last_chunk: i + 1 == parts.len(),
                part,
            });
        }
    }
    events
}
