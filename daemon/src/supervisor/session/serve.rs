//! One launch of a script capsule that serves A2A tasks: its queue, each
//! task in a fresh instance (up to `concurrency` at once), and when it ends
//! (idle, hibernating, stopped, closed).

use std::sync::Arc;

use super::setup::trace_notes;
use super::{RunEnd, SessionTask};
use crate::runtime::{ScriptLaunch, TaskMessage};

impl SessionTask {
    /// One launch of a script capsule that serves A2A tasks: each task in a
    /// fresh instance, per the lifecycle (no `task.md`: tasks come over A2A).
    pub(super) async fn serve_tasks(
        &self,
        prepared: &Arc<crate::runtime::PreparedCapsule>,
        lifecycle: &crate::manifest::Lifecycle,
        launch: ScriptLaunch,
        notes: &crate::runtime::Notes,
        trace: &mut crate::agent::trace::Trace,
    ) -> RunEnd {
        use crate::tasks::{Next, Outcome, Queue};
        let broker = &self.shared.tasks;
        let inbox = self.launch_inbox();
        let mut queue = Queue::open(broker, &self.id, inbox).await;
        if lifecycle.hibernates().is_some() {
            queue.hibernates(broker);
        }
        let forever = lifecycle.waits_forever();
        let ends = lifecycle.ends_after_task();
        let input_timeout = Some(std::time::Duration::from_secs(lifecycle.input_timeout_secs));
        // Each task has its own instance, so tasks may run side by side
        // (`concurrency`; one for `single`).
        let concurrency = if ends {
            1
        } else {
            lifecycle.concurrency.max(1) as usize
        };
        let serve = |incoming: crate::tasks::Incoming| {
            broker.serve(incoming, input_timeout, None, |link, incoming| async {
                tracing::info!(task_id = %link.task_id, "A2A task handed to the capsule");
                let crate::tasks::Incoming {
                    message_id,
                    text,
                    parts,
                    ..
                } = incoming;
                self.shared
                    .runtime
                    .handle_task(
                        prepared,
                        &launch,
                        Arc::new(link),
                        TaskMessage {
                            message_id,
                            text,
                            parts,
                        },
                        &self.stop,
                    )
                    .await
            })
        };
        let mut running = futures::stream::FuturesUnordered::new();
        let mut closed = false;
        let mut end = None;
        // One that hibernates does so after `hibernate_after` with nothing
        // running or waiting.
        let hibernates = lifecycle.hibernates();
        while end.is_none() {
            let idle = running
                .is_empty()
                .then(|| hibernates.or((!forever).then(|| self.idle_timeout())))
                .flatten();
            let room = !closed && running.len() < concurrency;
            tokio::select! {
                Some(outcome) = futures::StreamExt::next(&mut running), if !running.is_empty() => {
                    trace_notes(notes, trace).await;
                    match outcome {
                        Some(Outcome::Stopped) => end = Some(RunEnd::Stopped),
                        Some(Outcome::Failed(e)) if ends => end = Some(RunEnd::Failed(e)),
                        Some(_) if ends => end = Some(RunEnd::Completed),
                        _ if closed && running.is_empty() => end = Some(RunEnd::Completed),
                        _ => {}
                    }
                }
                next = queue.next(idle, &self.stop), if room => match next {
                    Next::Task(task) => running.push(serve(task)),
                    Next::Stopped => end = Some(RunEnd::Stopped),
                    Next::Idle if hibernates.is_some() => {
                        if broker.begin_hibernation(&self.id) {
                            tracing::info!("idle for lifecycle.hibernate_after: hibernating");
                            end = Some(RunEnd::Hibernated);
                        }
                    }
                    Next::Closed | Next::Idle if running.is_empty() => end = Some(RunEnd::Completed),
                    Next::Closed | Next::Idle => closed = true,
                },
            }
        }
        // Tasks still running see the stop (or finish) before the launch ends.
        while futures::StreamExt::next(&mut running).await.is_some() {}
        trace_notes(notes, trace).await;
        let end = end.unwrap_or(RunEnd::Completed);
        queue
            .release(
                broker,
                &self.id,
                self.by_shutdown.load(std::sync::atomic::Ordering::Relaxed),
            )
            .await;
        end
    }
}
