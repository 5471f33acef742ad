//! Running capsules: a script capsule's `run`, and one A2A task handled in a
//! fresh instance of a capsule that serves them.

use super::bindings::guest::agent::exports::murmur::a2a::handler;
use super::call::{Halts, call_guest, fresh_budget, instantiate};
use super::*;

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
        let Entry::Handle(indices) = &prepared.entry else {
            return Outcome::Failed("this capsule does not serve A2A tasks".into());
        };
        let cancel = task.cancel().clone();
        let param = handler::Task {
            task_id: task.task_id().to_string(),
            context_id: task.context_id().to_string(),
            message_id: message_id.to_string(),
            text,
        };
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
        let (component, indices) = (Arc::clone(&prepared.inner), indices.clone());
        let answered = call_guest(&mut store, halts, move |store| {
            Box::pin(async move {
                let instance = instantiate(&component, store).await?;
                let agent = indices.load(&mut *store, &instance)?;
                fresh_budget(store);
                agent
                    .murmur_a2a_handler()
                    .call_handle(&mut *store, &param)
                    .await
            })
        })
        .await;
        match answered {
            Ok(handler::Outcome::Completed(answer)) => Outcome::Completed(answer),
            Ok(handler::Outcome::Reply(text)) => Outcome::Reply(text),
            Ok(handler::Outcome::Failed(why)) => Outcome::Failed(why),
            Ok(handler::Outcome::Rejected(why)) => Outcome::Rejected(why),
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
