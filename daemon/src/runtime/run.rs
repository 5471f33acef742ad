//! Running capsules: a script capsule's `run`, and one A2A task handled in a
//! fresh instance of a capsule that serves them.

use super::bindings::guest::agent::exports::murmur::a2a0_1_0::handler;
use super::bindings::guest::agent2::exports::murmur::a2a0_2_0::handler as handler2;
use super::bindings::murmur::a2a0_2_0::types as types2;
use super::call::{Halts, call_guest, fresh_budget, instantiate};
use super::host::parts;
use super::*;

impl Runtime {
    /// Handles one A2A task in a fresh instance of a capsule that serves
    /// them: its limits, a fresh deadline (time waiting for input aside), the
    /// task's chunks and input requests through `task`. A 0.2.0 handler gets
    /// the message's parts; a 0.1.0 one its text.
    pub async fn handle_task(
        &self,
        prepared: &PreparedCapsule,
        launch: &ScriptLaunch,
        task: Arc<dyn TaskIo>,
        message: TaskMessage,
        stop: &CancellationToken,
    ) -> Outcome {
        let cancel = task.cancel().clone();
        let (task_id, context_id) = (task.task_id().to_string(), task.context_id().to_string());
        let mut store = match self
            .core
            .new_store(launch.store_spec(stop.child_token(), Some(task)))
        {
            Ok(store) => store,
            Err(failure) => return Outcome::Failed(failure.to_string()),
        };
        let halts = Halts {
            cancel: Some(&cancel),
            stop: Some(stop),
        };
        let component = Arc::clone(&prepared.inner);
        let answered = match &prepared.entry {
            Entry::Handle2(indices) => {
                let indices = indices.clone();
                let param = handler2::Task {
                    task_id,
                    context_id,
                    message: types2::Message {
                        message_id: message.message_id,
                        parts: message.parts.iter().filter_map(parts::from_json).collect(),
                        metadata: None,
                    },
                    text: message.text,
                };
                call_guest(&mut store, halts, move |store| {
                    Box::pin(async move {
                        let instance = instantiate(&component, store).await?;
                        let agent = indices.load(&mut *store, &instance)?;
                        fresh_budget(store);
                        agent
                            .murmur_a2a0_2_0_handler()
                            .call_handle(&mut *store, &param)
                            .await
                    })
                })
                .await
                .map(said)
            }
            Entry::Handle(indices) => {
                let indices = indices.clone();
                let param = handler::Task {
                    task_id,
                    context_id,
                    message_id: message.message_id,
                    text: message.text,
                };
                call_guest(&mut store, halts, move |store| {
                    Box::pin(async move {
                        let instance = instantiate(&component, store).await?;
                        let agent = indices.load(&mut *store, &instance)?;
                        fresh_budget(store);
                        agent
                            .murmur_a2a0_1_0_handler()
                            .call_handle(&mut *store, &param)
                            .await
                    })
                })
                .await
                .map(|outcome| match outcome {
                    handler::Outcome::Completed(answer) => Outcome::Completed(answer),
                    handler::Outcome::Reply(text) => Outcome::Reply(text),
                    handler::Outcome::Failed(why) => Outcome::Failed(why),
                    handler::Outcome::Rejected(why) => Outcome::Rejected(why),
                })
            }
            Entry::Run(_) => {
                return Outcome::Failed("this capsule does not serve A2A tasks".into());
            }
        };
        match answered {
            Ok(outcome) => outcome,
            Err(GuestFailure::Canceled) => Outcome::Canceled,
            Err(GuestFailure::Stopped) => Outcome::Stopped,
            Err(failure) => Outcome::Failed(failure.to_string()),
        }
    }

    /// Instantiates and runs a script capsule to completion, a stop request, or a failure.
    pub async fn run_script(
        &self,
        prepared: &PreparedCapsule,
        launch: ScriptLaunch,
        stop: CancellationToken,
    ) -> Result<(), GuestFailure> {
        let Entry::Run(indices) = &prepared.entry else {
            return Err(GuestFailure::Setup {
                message: "this capsule serves A2A tasks; it has no `run`".into(),
            });
        };
        let mut store = self.core.new_store(launch.store_spec(stop.clone(), None))?;
        let halts = Halts {
            cancel: None,
            stop: Some(&stop),
        };
        let (component, indices) = (Arc::clone(&prepared.inner), indices.clone());
        call_guest(&mut store, halts, move |store| {
            Box::pin(async move {
                let instance = instantiate(&component, store).await?;
                let capsule = indices.load(&mut *store, &instance)?;
                fresh_budget(store);
                capsule.murmur_capsule_run().call_run(&mut *store).await
            })
        })
        .await
    }
}

impl ScriptLaunch {
    fn store_spec(&self, stop: CancellationToken, task: Option<Arc<dyn TaskIo>>) -> StoreSpec<'_> {
        StoreSpec {
            session_id: &self.session_id,
            workdir: &self.workdir,
            env: &self.env,
            timeout: self.timeout,
            memory_bytes: self.memory_bytes,
            policy: Arc::clone(&self.policy),
            log: self.log.clone(),
            stop,
            tools: self.tools.clone(),
            notes: self.notes.clone(),
            task,
        }
    }
}

/// The message that created a task, as a handler gets it.
pub struct TaskMessage {
    pub message_id: String,
    /// Its text parts, data as JSON, files described (what 0.1.0 gets).
    pub text: String,
    /// Its parts (1.0 Part objects).
    pub parts: Vec<serde_json::Value>,
}

/// How a 0.2.0 handler ended its task. Failed or rejected parts are kept as
/// their text, which is what a task's failure says.
fn said(outcome: handler2::Outcome) -> Outcome {
    let text = |parts: Vec<types2::Part>| {
        parts
            .into_iter()
            .filter_map(|p| match p.content {
                types2::Content::Text(t) | types2::Content::Data(t) | types2::Content::Url(t) => {
                    Some(t)
                }
                types2::Content::Raw(_) => None,
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    match outcome {
        handler2::Outcome::Completed(answer) => Outcome::CompletedWith(Box::new(Answer {
            message: parts::all_to_json(answer.message),
            artifacts: answer
                .artifacts
                .into_iter()
                .map(|a| (a.artifact_id, parts::all_to_json(a.parts)))
                .collect(),
        })),
        handler2::Outcome::Reply(p) => Outcome::ReplyWith(parts::all_to_json(p)),
        handler2::Outcome::Failed(p) => Outcome::Failed(text(p)),
        handler2::Outcome::Rejected(p) => Outcome::Rejected(text(p)),
    }
}
