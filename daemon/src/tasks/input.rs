//! Input requests: a running task asks its client for input (it moves to
//! input-required), and the client's next message on the task answers it
//! (or the wait times out, or the task is canceled).

use super::*;

/// Why a follow-up message on a task was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("task '{task_id}' is not waiting for input; send a new message without taskId")]
    NotWaiting { task_id: String },
    #[error(transparent)]
    Log(#[from] LogError),
}

impl Broker {
    /// A running task asks its client for input: the task moves to
    /// input-required with `prompt`, and this returns the text of the next
    /// message on the task. With no answer within `timeout` the task fails
    /// (`input-timeout`); a cancel ends the wait.
    pub async fn request_input(
        &self,
        task_id: &TaskId,
        first: Vec<EventKind>,
        (prompt, parts): (&str, Option<Vec<serde_json::Value>>),
        timeout: Option<std::time::Duration>,
        cancel: &CancellationToken,
    ) -> Result<Reply, InputError> {
        let (tx, rx) = oneshot::channel();
        // Registered before the state is visible, so an immediate answer is not lost.
        lock(&self.waiting).insert(task_id.clone(), tx);
        let asked = EventKind::Status {
            parts,
            state: TaskState::InputRequired,
            message: Some(prompt.to_string()),
        };
        let mut events = first;
        events.push(asked);
        let asked = self.publish_all(task_id, events).await;
        if !asked.is_ok_and(|w| w.iter().all(Option::is_some)) {
            lock(&self.waiting).remove(task_id);
            return Err(InputError::Store);
        }
        let wait = async {
            match timeout {
                Some(t) => tokio::time::timeout(t, rx).await.ok(),
                None => Some(rx.await),
            }
        };
        let answer = tokio::select! {
            answer = wait => answer,
            () = cancel.cancelled() => {
                lock(&self.waiting).remove(task_id);
                return Err(InputError::Canceled);
            }
        };
        lock(&self.waiting).remove(task_id);
        match answer {
            // `resume` recorded the answer and the task as working again.
            Some(Ok(reply)) => Ok(reply),
            _ => {
                tracing::info!(
                    %task_id,
                    "no answer to an input request in time; the task fails"
                );
                let _ = self
                    .finish(task_id, TaskState::Failed, Some(INPUT_TIMEOUT))
                    .await;
                Err(InputError::Timeout)
            }
        }
    }

    /// A follow-up message on a task in input-required: recorded in the
    /// task's log (its history) with the task working again, then handed to
    /// the waiting request.
    pub async fn resume(
        &self,
        task_id: &TaskId,
        message_id: &str,
        (text, parts): (&str, &[serde_json::Value]),
    ) -> Result<A2aTask, ResumeError> {
        let not_waiting = || ResumeError::NotWaiting {
            task_id: task_id.to_string(),
        };
        let tx = lock(&self.waiting)
            .remove(task_id)
            .ok_or_else(not_waiting)?;
        let reply = Reply {
            message_id: message_id.to_string(),
            text: text.to_string(),
            parts: parts.to_vec(),
        };
        let input = EventKind::Input {
            message_id: message_id.to_string(),
            text: text.to_string(),
            parts: (!parts.is_empty()).then(|| parts.to_vec()),
        };
        let written = self.publish_all(task_id, vec![input, working()]).await?;
        if !written.iter().all(Option::is_some) {
            return Err(not_waiting());
        }
        let task = self.log.task(task_id).await?.ok_or_else(not_waiting)?;
        tx.send(reply).map_err(|_| not_waiting())?;
        Ok(task)
    }
}
