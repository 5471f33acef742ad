//! A hibernated session's inbox: parked here while nothing of the session
//! runs, so its route keeps accepting tasks; the first task to arrive asks
//! the supervisor (the waker) to launch it again, and that launch takes the
//! inbox with what waits in it.

use tokio::sync::mpsc;

use super::{Broker, Inbox, NEVER_RAN, TaskId, lock};

impl Broker {
    /// Where wakes are asked for from now on (set once, by the supervisor).
    pub fn set_waker(&self, waker: mpsc::UnboundedSender<String>) {
        let _ = self.waker.set(waker);
    }

    /// At most `max` sessions that hibernate awake at once (none: no
    /// bound); past it the one idle the longest hibernates now.
    pub fn set_max_awake(&self, max: Option<usize>) {
        self.drowse.set_max(max);
    }

    /// The session's launch is about to end idle: its inbox is parked, not
    /// closed, when it does. `false`: it has no inbox, or it is being
    /// upgraded or drained (then it does not hibernate).
    pub fn begin_hibernation(&self, session_id: &str) -> bool {
        let mut inboxes = lock(&self.inboxes);
        match inboxes.get_mut(session_id) {
            Some(inbox) if !inbox.handover && !inbox.quiesce.is_cancelled() => {
                inbox.asleep = true;
                true
            }
            _ => false,
        }
    }

    /// Whether the session hibernates: its launch is ending idle, or has
    /// ended and its inbox waits parked.
    pub fn hibernating(&self, session_id: &str) -> bool {
        lock(&self.inboxes)
            .get(session_id)
            .is_some_and(|inbox| inbox.asleep)
    }

    /// At start-up, a hibernated session's inbox, parked as it was: its
    /// route takes tasks before anything of it runs.
    pub fn open_asleep(
        &self,
        session_id: &str,
        route: &str,
        depth: usize,
        same_context: crate::manifest::SameContext,
    ) {
        let (mut inbox, rx) = Inbox::new(route, depth.max(1), same_context);
        inbox.parked = Some(rx);
        inbox.asleep = true;
        lock(&self.inboxes).insert(session_id.to_string(), inbox);
    }

    /// A task reached the session's inbox (or, at start-up, one stored for
    /// it waits): wake it if it sleeps.
    pub fn wake_if_asleep(&self, session_id: &str) {
        let mut inboxes = lock(&self.inboxes);
        if let Some(inbox) = inboxes.get_mut(session_id)
            && inbox.asleep
            && inbox.parked.is_some()
        {
            self.ask_wake(session_id, inbox);
        }
    }

    /// Asks the waker to launch the session (once until it is launched or
    /// the wake fails); without a waker, nothing can.
    pub(super) fn ask_wake(&self, session_id: &str, inbox: &mut Inbox) {
        if inbox.waking.is_some() {
            return;
        }
        inbox.waking = Some(std::time::Instant::now());
        if let Some(waker) = self.waker.get() {
            let _ = waker.send(session_id.to_string());
        }
    }

    /// The wake failed (the session did not stage): the tasks waiting for
    /// it fail with `why`; it stays asleep, its route open, and the next
    /// task tries again.
    pub async fn wake_failed(&self, session_id: &str, why: &str) {
        let mut waiting = self.take_waiting(session_id, false);
        // Those stored before a restart wait in the store, not the inbox.
        waiting.extend(
            self.pending(session_id)
                .await
                .into_iter()
                .map(|t| t.task_id),
        );
        let failed = self.fail_all(waiting, why).await;
        tracing::warn!(session_id, failed, why, "a hibernated session did not wake");
    }

    /// The hibernated session ended (stopped): its inbox goes, and the
    /// tasks waiting in it fail visibly.
    pub async fn close_asleep(&self, session_id: &str) {
        let waiting = self.take_waiting(session_id, true);
        self.fail_all(waiting, NEVER_RAN).await;
    }

    /// The tasks in a parked inbox (taken out of it); with `remove`, the
    /// inbox is gone too.
    fn take_waiting(&self, session_id: &str, remove: bool) -> Vec<TaskId> {
        let mut inboxes = lock(&self.inboxes);
        let mut waiting = Vec::new();
        let Some(inbox) = inboxes.get_mut(session_id) else {
            return waiting;
        };
        inbox.waking = None;
        if let Some(parked) = inbox.parked.as_mut() {
            if remove {
                parked.close();
            }
            while let Some(task) = parked.try_recv() {
                lock(&parked.queued).remove(&task.task_id);
                waiting.push(task.task_id);
            }
        }
        if remove {
            inboxes.remove(session_id);
        }
        waiting
    }
}
