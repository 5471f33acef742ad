//! The control API's upgrade calls (`/v1/sessions/{id}/upgrade`, `versions`).

use hyper::Method;

use super::{Client, ClientError, encode};
use crate::api::{API_PREFIX, Session, SessionVersion, SessionVersions, UpgradeRequest};

impl Client {
    /// Upgrades (or rolls back) a live session in place; its record once
    /// the new version takes its tasks.
    pub async fn upgrade(
        &self,
        id_or_name: &str,
        request: &UpgradeRequest,
    ) -> Result<Session, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        let path = format!("{API_PREFIX}/sessions/{}/upgrade", encode(id_or_name));
        self.call(Method::POST, &path, Some(body)).await
    }

    /// The versions a session has run, oldest first.
    pub async fn versions(&self, id_or_name: &str) -> Result<Vec<SessionVersion>, ClientError> {
        let path = format!("{API_PREFIX}/sessions/{}/versions", encode(id_or_name));
        let versions: SessionVersions = self.call(Method::GET, &path, None).await?;
        Ok(versions.versions)
    }
}
