//! A session handed to a new version of its capsule (an upgrade in
//! place): its inbox stays open the whole time, so the route accepts
//! tasks throughout. The running launch takes no more tasks and parks the
//! inbox's receiving end here when it ends; the next version's launch
//! takes it, with what waits in it and what arrives meanwhile. Tasks still
//! running when the drain time is up are canceled with the reason.

use tokio_util::sync::CancellationToken;

use super::{Broker, InboxRx, TaskId, lock};

impl Broker {
    /// The session's launch takes no more tasks and, when it ends, parks
    /// its inbox for the next version. `false`: it has no inbox.
    pub fn begin_handover(&self, session_id: &str) -> bool {
        let mut inboxes = lock(&self.inboxes);
        let Some(inbox) = inboxes.get_mut(session_id) else {
            return false;
        };
        inbox.handover = true;
        inbox.quiesce.cancel();
        true
    }

    /// Whether the session is being handed to a new version.
    pub fn handing_over(&self, session_id: &str) -> bool {
        lock(&self.inboxes)
            .get(session_id)
            .is_some_and(|inbox| inbox.handover)
    }

    /// A launch ending: with a handover (or hibernation) under way its
    /// inbox is parked for the next launch (`true`), else it is the
    /// caller's to close. A hibernating session with a task already
    /// waiting is woken at once.
    pub(super) fn park(&self, session_id: &str, rx: &mut Option<InboxRx>) -> bool {
        let mut inboxes = lock(&self.inboxes);
        match inboxes.get_mut(session_id) {
            Some(inbox) if inbox.handover || inbox.asleep => {
                if let Some(mut rx) = rx.take() {
                    rx.forget_waker();
                    inbox.parked = Some(rx);
                }
                if inbox.asleep && inbox.parked.as_ref().is_some_and(|rx| !rx.is_empty()) {
                    self.ask_wake(session_id, inbox);
                }
                true
            }
            _ => false,
        }
    }

    /// The parked inbox, for the next version: taking tasks again, with its
    /// lifecycle's depth and double-texting rule.
    pub(super) fn take_parked(
        &self,
        session_id: &str,
        depth: usize,
        same_context: crate::manifest::SameContext,
    ) -> Option<InboxRx> {
        let mut inboxes = lock(&self.inboxes);
        let inbox = inboxes.get_mut(session_id)?;
        let mut rx = inbox.parked.take()?;
        let quiesce = CancellationToken::new();
        inbox.quiesce = quiesce.clone();
        rx.quiesce = quiesce;
        inbox.handover = false;
        inbox.asleep = false;
        rx.woken = inbox.waking.take();
        inbox.depth = depth;
        inbox.same_context = same_context;
        Some(rx)
    }

    /// A handover that will not finish (the next version failed to start):
    /// the inbox closes as it would have, its waiting tasks failing visibly.
    pub async fn abandon_handover(&self, session_id: &str) {
        let parked = {
            let mut inboxes = lock(&self.inboxes);
            let parked = inboxes.get_mut(session_id).and_then(|i| i.parked.take());
            if let Some(inbox) = inboxes.get_mut(session_id) {
                inbox.handover = false;
            }
            parked
        };
        match parked {
            Some(rx) => self.close_inbox(session_id, rx).await,
            None => self.detach_inbox(session_id),
        }
    }

    /// Cancels the session's tasks that are running (not those waiting),
    /// each with `reason` in its status.
    pub async fn cancel_running_of(&self, session_id: &str, reason: &str) -> usize {
        let open = lock(&self.fan.open).of_session(session_id);
        let running: Vec<TaskId> = {
            let running = lock(&self.running);
            open.into_iter()
                .filter(|t| running.contains_key(t))
                .collect()
        };
        for task in &running {
            tracing::info!(task_id = %task, session_id, "canceled at the end of an upgrade's drain");
            if let Err(error) = self.cancel_because(task, reason.to_string()).await {
                tracing::warn!(%error, task_id = %task, "cannot cancel a task left running");
            }
        }
        running.len()
    }
}
