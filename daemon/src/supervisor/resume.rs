//! Bringing sessions back after roostd restarts: every session the
//! database says should come back, staged side by side and launched again
//! under its id and name, and how far that has come (`roostctl status`).

use roost_wire::api::SessionState;

use super::{OwnerCommand, Resume, Supervisor, SupervisorError};
use crate::staging::stage;

/// Sessions staged at once while roostd brings them back after a restart.
const RESUME_PARALLEL: usize = 8;

impl Supervisor {
    /// Brings back the sessions the database says should come back after a restart.
    pub async fn resume_all(&self) -> Result<usize, SupervisorError> {
        use futures::StreamExt;
        let items = self.shared.store.resumable().await?;
        self.set_resume(|p| {
            *p = Some(roost_wire::api::ResumeProgress {
                total: items.len() as u64,
                done: 0,
            });
        });
        // Staged side by side (reading, hashing, compiling from the cache);
        // each launch still goes through the owner task, one at a time.
        let resumed = futures::stream::iter(items)
            .map(|item| async move {
                let ok = self.resume_one(item).await;
                self.set_resume(|p| {
                    if let Some(p) = p {
                        p.done += 1;
                    }
                });
                ok
            })
            .buffer_unordered(RESUME_PARALLEL)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        self.set_resume(|p| *p = None);
        Ok(resumed)
    }

    fn set_resume(&self, change: impl FnOnce(&mut Option<roost_wire::api::ResumeProgress>)) {
        change(
            &mut self
                .shared
                .resume
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    /// How far resuming after a restart has come (`None`: not resuming).
    pub fn resuming(&self) -> Option<roost_wire::api::ResumeProgress> {
        *self
            .shared
            .resume
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stages and launches one session again; `false` when it could not be.
    async fn resume_one(&self, item: crate::store::Resumable) -> bool {
        match stage(&self.shared.stage_ctx(), item.request).await {
            Ok(staged) => {
                let resume = Resume {
                    id: item.id.clone().into(),
                    name: item.name.clone(),
                    restart_count: item.restart_count + 1,
                    why: "resumed after roostd restart",
                    arriving: None,
                };
                let outcome = self
                    .ask(|reply| OwnerCommand::Launch {
                        staged: Box::new(staged),
                        resume: Some(resume),
                        reply,
                    })
                    .await;
                match outcome {
                    Ok(_) => true,
                    Err(error) => {
                        tracing::warn!(session_id = %item.id, %error, "cannot resume session");
                        false
                    }
                }
            }
            Err(error) => {
                let message = format!("cannot restart after roostd restart: {error}");
                tracing::warn!(session_id = %item.id, error = %message, "resume failed");
                if let Err(error) = self
                    .shared
                    .store
                    .mark_ended(&item.id, SessionState::Failed, Some(&message), None)
                    .await
                {
                    tracing::error!(session_id = %item.id, %error, "cannot record a failed resume");
                }
                false
            }
        }
    }
}
