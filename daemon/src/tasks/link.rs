//! The task a guest call works on (`TaskLink`): what
//! `murmur:task/task#request-input`, text chunks and artifacts reach.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::LogError;
use super::{ANSWER_ARTIFACT, Broker, EventKind, TaskState};
use crate::ids::TaskId;
use crate::runtime::{ArtifactUpdate, InputError, Prompt, Reply, TaskIo, trace_id_of};

/// Why a task failed when nobody answered its input request in time.
pub const INPUT_TIMEOUT: &str = "input-timeout";

/// The A2A task a guest call works on: what `murmur:task/task#request-input`
/// reaches.
#[derive(Clone)]
pub struct TaskLink {
    pub broker: Arc<Broker>,
    pub task_id: TaskId,
    pub context_id: String,
    /// `lifecycle.input_timeout_secs`.
    pub input_timeout: Option<std::time::Duration>,
    pub cancel: CancellationToken,
    /// The `traceparent` the client sent with the task.
    pub traceparent: Option<String>,
    /// Whether the task's `working` status is written: with its record when
    /// it went straight to a waiting session, else before its work starts
    /// (see [`Broker::serve`]).
    started: Arc<AtomicBool>,
    /// Updates queued but not yet committed, at most [`UPDATES_IN_FLIGHT`].
    in_flight: Arc<Semaphore>,
}

/// How many of a task's updates (chunks, artifacts) may wait for their
/// commit while the guest goes on.
const UPDATES_IN_FLIGHT: usize = 64;

pub(super) fn working() -> EventKind {
    EventKind::Status {
        parts: None,
        state: TaskState::Working,
        message: None,
    }
}

impl TaskLink {
    /// The link of a task delivered to a session, about to run.
    pub(super) fn new(
        broker: Arc<Broker>,
        incoming: &super::Incoming,
        input_timeout: Option<std::time::Duration>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            broker,
            task_id: incoming.task_id.clone(),
            context_id: incoming.context_id.clone(),
            input_timeout,
            cancel,
            traceparent: incoming.traceparent.clone(),
            started: Arc::new(AtomicBool::new(incoming.working)),
            in_flight: Arc::new(Semaphore::new(UPDATES_IN_FLIGHT)),
        }
    }

    /// The task's trace: the client's, else one named after the task.
    pub fn trace_id(&self) -> String {
        self.traceparent
            .as_deref()
            .and_then(|t| {
                let mut parts = t.split('-');
                let (_, id) = (parts.next()?, parts.next()?);
                (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                    .then(|| id.to_ascii_lowercase())
            })
            .unwrap_or_else(|| trace_id_of(&self.task_id))
    }

    pub async fn request_input(&self, prompt: Prompt) -> Result<Reply, InputError> {
        let first = self.first_events();
        let (text, parts) = match prompt {
            Prompt::Text(text) => (text, None),
            Prompt::Parts(parts) => (super::parts_text(&parts), Some(parts)),
        };
        self.broker
            .request_input(
                &self.task_id,
                first,
                (&text, parts),
                self.input_timeout,
                &self.cancel,
            )
            .await
    }

    /// What must precede the task's next event: `working`, the first time.
    pub(super) fn first_events(&self) -> Vec<EventKind> {
        if self.started.swap(true, Ordering::AcqRel) {
            Vec::new()
        } else {
            vec![working()]
        }
    }

    /// Records the task as working if nothing has yet; `false` when it
    /// had already ended (canceled).
    pub(super) async fn mark_working(&self) -> Result<bool, LogError> {
        let first = self.first_events();
        if first.is_empty() {
            return Ok(true);
        }
        Ok(self
            .broker
            .publish_all(&self.task_id, first)
            .await?
            .iter()
            .all(Option::is_some))
    }

    /// Streams a guest's text to the task's subscribers, in order: text as an
    /// `append` update of the answer artifact, thinking as a `working` status
    /// message.
    pub async fn chunk(&self, text: &str, thinking: bool) {
        let kind = if thinking {
            EventKind::Status {
                parts: None,
                state: TaskState::Working,
                message: Some(text.to_string()),
            }
        } else {
            EventKind::Artifact {
                artifact_id: ANSWER_ARTIFACT.into(),
                text: text.to_string(),
                append: true,
                last_chunk: false,
                part: None,
            }
        };
        self.artifact(kind).await;
    }

    /// Records an event of the task (an artifact update) and tells its
    /// subscribers once it is committed. The guest goes on meanwhile: up to
    /// [`UPDATES_IN_FLIGHT`] updates wait for their commit at a time, and
    /// everything the task records later is committed after them.
    pub async fn artifact(&self, kind: EventKind) {
        let Ok(permit) = Arc::clone(&self.in_flight).acquire_owned().await else {
            return;
        };
        let mut events = self.first_events();
        events.push(kind);
        self.broker.publish_queued(&self.task_id, events, permit);
    }
}

#[async_trait::async_trait]
impl TaskIo for TaskLink {
    fn task_id(&self) -> &str {
        &self.task_id
    }

    fn context_id(&self) -> &str {
        &self.context_id
    }

    fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    fn traceparent(&self) -> Option<String> {
        self.traceparent.clone()
    }
    fn trace_id(&self) -> String {
        TaskLink::trace_id(self)
    }

    async fn request_input(&self, prompt: Prompt) -> Result<Reply, InputError> {
        TaskLink::request_input(self, prompt).await
    }

    async fn chunk(&self, text: &str, thinking: bool) {
        TaskLink::chunk(self, text, thinking).await
    }

    async fn artifact(&self, update: ArtifactUpdate) {
        TaskLink::artifact(
            self,
            EventKind::Artifact {
                artifact_id: update.artifact_id,
                text: update.text,
                append: update.append,
                last_chunk: update.last_chunk,
                part: update.part,
            },
        )
        .await
    }

    async fn status(&self, parts: Vec<serde_json::Value>) {
        let kind = EventKind::Status {
            state: TaskState::Working,
            message: Some(super::parts_text(&parts)),
            parts: Some(parts),
        };
        TaskLink::artifact(self, kind).await
    }
}
