//! Starting a session (`roostctl start`, with its staging steps told to a
//! client that asks), and `roostctl restart`: a session stopped if it is
//! live, then staged again from its stored start request and run under the
//! same id and name, as a resume after a roostd restart does.

use roost_wire::api::Session;

use super::{OwnerCommand, Resume, Supervisor, SupervisorError};
use crate::staging::stage;

impl Supervisor {
    /// Stages (concurrently with other requests) and launches a new session.
    pub async fn start(
        &self,
        request: roost_wire::api::StartRequest,
    ) -> Result<Session, SupervisorError> {
        self.start_with_progress(request, crate::staging::Progress::default())
            .await
    }

    /// [`Self::start`], telling `progress` each staging step as it starts.
    pub async fn start_with_progress(
        &self,
        request: roost_wire::api::StartRequest,
        progress: crate::staging::Progress,
    ) -> Result<Session, SupervisorError> {
        let mut ctx = self.shared.stage_ctx();
        ctx.progress = progress;
        let staged = stage(&ctx, request).await?;
        self.ask(|reply| OwnerCommand::Launch {
            staged: Box::new(staged),
            resume: None,
            reply,
        })
        .await
    }

    /// Stops the session if it is live, then runs it again from its start
    /// request (same id, name and workdir; its restart count goes up by
    /// one). A request that no longer stages (the capsule changed or is
    /// gone) is refused with the staging error and the ended row is left
    /// as it was.
    pub async fn restart(&self, id_or_name: &str) -> Result<Session, SupervisorError> {
        let ended = self.stop(id_or_name).await?;
        let item = self
            .shared
            .store
            .restartable(&ended.id)
            .await?
            .ok_or_else(|| SupervisorError::NotFound(id_or_name.to_string()))?;
        let staged = stage(&self.shared.stage_ctx(), item.request).await?;
        tracing::info!(session_id = %item.id, name = %item.name, "restarting on request");
        self.ask(|reply| OwnerCommand::Launch {
            staged: Box::new(staged),
            resume: Some(Resume {
                id: item.id.clone().into(),
                name: item.name.clone(),
                restart_count: item.restart_count + 1,
                why: "restarted by an operator",
                arriving: None,
            }),
            reply,
        })
        .await
    }

    /// Starts session `id` as `name` from `request`, which ran on a node
    /// that left the cluster: same id and name, a row of its own here;
    /// `arriving` (its tasks brought in) runs once the row exists, before
    /// the session takes any task.
    pub async fn take_over(
        &self,
        id: crate::ids::SessionId,
        name: String,
        request: roost_wire::api::StartRequest,
        arriving: futures::future::BoxFuture<'static, ()>,
    ) -> Result<Session, SupervisorError> {
        let staged = stage(&self.shared.stage_ctx(), request).await?;
        tracing::info!(session_id = %id, name, "taking over a session from a node that left the cluster");
        self.ask(|reply| OwnerCommand::Launch {
            staged: Box::new(staged),
            resume: Some(Resume {
                id,
                name,
                restart_count: 0,
                why: "taken over from a node that left the cluster",
                arriving: Some(arriving),
            }),
            reply,
        })
        .await
    }
}
