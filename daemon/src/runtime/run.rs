//! Running guests: a script capsule's `run`, and one A2A task handled in a
//! fresh instance of a capsule that serves them; each with its deadline, the
//! backstop, and its failures classified.

use super::*;

/// The record `murmur:a2a/handler@0.1.0#handle` takes.
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lower)]
#[component(record)]
struct HandlerTask {
    #[component(name = "task-id")]
    task_id: String,
    #[component(name = "context-id")]
    context_id: String,
    #[component(name = "message-id")]
    message_id: String,
    text: String,
}

/// The variant `handle` answers.
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lift)]
#[component(variant)]
enum HandlerOutcome {
    #[component(name = "completed")]
    Completed(String),
    #[component(name = "reply")]
    Reply(String),
    #[component(name = "failed")]
    Failed(String),
    #[component(name = "rejected")]
    Rejected(String),
}

impl Runtime {
    /// Handles one A2A task in a fresh instance of a capsule that serves
    /// them: its limits, a fresh deadline (time waiting for input aside), the
    /// task's chunks and input requests through `task`.
    pub async fn handle_task(
        &self,
        prepared: &PreparedCapsule,
        launch: &ScriptLaunch,
        task: Arc<dyn TaskIo>,
        message_id: &str,
        text: String,
        stop: &CancellationToken,
    ) -> Outcome {
        let Entry::Handle(handle) = prepared.entry else {
            return Outcome::Failed("this capsule does not serve A2A tasks".into());
        };
        let timeout_secs = launch.timeout.as_secs();
        let cancel = task.cancel().clone();
        let param = HandlerTask {
            task_id: task.task_id().to_string(),
            context_id: task.context_id().to_string(),
            message_id: message_id.to_string(),
            text,
        };
        let mut store = match self.core.new_store(StoreSpec {
            session_id: &launch.session_id,
            workdir: &launch.workdir,
            env: &launch.env,
            timeout: launch.timeout,
            memory_bytes: launch.memory_bytes,
            policy: Arc::clone(&launch.policy),
            log: launch.log.clone(),
            stop: stop.child_token(),
            tools: launch.tools.clone(),
            notes: None,
            task: Some(task),
        }) {
            Ok(store) => store,
            Err(failure) => return Outcome::Failed(failure.to_string()),
        };
        let waited = store.data().waited.clone();
        let call = async {
            store.data_mut().guard.arm();
            store.set_epoch_deadline(1);
            let instance = prepared.inner.pre.instantiate_async(&mut store).await?;
            let func = instance
                .get_func(&mut store, handle)
                .ok_or_else(|| wasmtime::format_err!("export `handle` is not a function"))?;
            let typed = func.typed::<(HandlerTask,), (HandlerOutcome,)>(&store)?;
            store.data_mut().guard.arm();
            store.set_epoch_deadline(1);
            typed.call_async(&mut store, (param,)).await
        };
        let result = tokio::select! {
            result = call => result,
            () = cancel.cancelled() => return Outcome::Canceled,
            () = stop.cancelled() => return Outcome::Stopped,
            () = waited.backstop(launch_backstop(launch.timeout)) => {
                return Outcome::Failed(
                    GuestFailure::DeadlineExceeded { seconds: timeout_secs }.to_string(),
                );
            }
        };
        match result {
            Ok((HandlerOutcome::Completed(answer),)) => Outcome::Completed(answer),
            Ok((HandlerOutcome::Reply(text),)) => Outcome::Reply(text),
            Ok((HandlerOutcome::Failed(why),)) => Outcome::Failed(why),
            Ok((HandlerOutcome::Rejected(why),)) => Outcome::Rejected(why),
            // Canceled while it waited for input: the request trapped.
            Err(_) if cancel.is_cancelled() => Outcome::Canceled,
            Err(error) => {
                let state = store.data();
                match limits::classify(
                    &error,
                    &state.guard,
                    &state.limiter,
                    timeout_secs,
                    &launch.log.stderr_tail(),
                ) {
                    GuestFailure::Stopped => Outcome::Stopped,
                    failure => Outcome::Failed(failure.to_string()),
                }
            }
        }
    }

    /// Instantiates and runs a script capsule to completion, a stop request, or a failure.
    pub async fn run_script(
        &self,
        prepared: &PreparedCapsule,
        launch: ScriptLaunch,
        stop: CancellationToken,
    ) -> Result<(), GuestFailure> {
        let timeout_secs = launch.timeout.as_secs();
        let log = launch.log.clone();
        let mut store = self.core.new_store(StoreSpec {
            session_id: &launch.session_id,
            workdir: &launch.workdir,
            env: &launch.env,
            timeout: launch.timeout,
            memory_bytes: launch.memory_bytes,
            policy: launch.policy,
            log: launch.log,
            stop: stop.clone(),
            tools: launch.tools,
            notes: None,
            task: None,
        })?;
        // Host-side waits (e.g. an HTTP response) do not tick the epoch, so the
        // wall clock also bounds both phases together.
        let backstop = launch_backstop(store.data().guard_budget());
        let outcome = {
            let call = call_run(&mut store, prepared);
            tokio::select! {
                result = call => Some(result),
                () = stop.cancelled() => None,
                () = tokio::time::sleep(backstop) => {
                    return Err(GuestFailure::DeadlineExceeded { seconds: timeout_secs });
                }
            }
        };
        match outcome {
            None => Err(GuestFailure::Stopped),
            Some(Ok(())) => Ok(()),
            Some(Err(error)) => {
                let state = store.data();
                Err(limits::classify(
                    &error,
                    &state.guard,
                    &state.limiter,
                    timeout_secs,
                    &log.stderr_tail(),
                ))
            }
        }
    }
}

/// Instantiation and `run`, each with a fresh budget.
async fn call_run(
    store: &mut Store<GuestState>,
    prepared: &PreparedCapsule,
) -> wasmtime::Result<()> {
    store.data_mut().guard.arm();
    store.set_epoch_deadline(1);
    let Entry::Run(run) = prepared.entry else {
        return Err(wasmtime::format_err!(
            "this capsule serves A2A tasks; it has no `run`"
        ));
    };
    let instance = prepared.inner.pre.instantiate_async(&mut *store).await?;
    let func = instance.get_func(&mut *store, run).ok_or_else(|| {
        wasmtime::format_err!("export `{CAPSULE_RUN_EXPORT}#run` is not a function")
    })?;
    let run = func.typed::<(), ()>(&*store)?;
    store.data_mut().guard.arm();
    store.set_epoch_deadline(1);
    run.call_async(&mut *store, ()).await
}
