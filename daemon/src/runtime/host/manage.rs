//! `murmur:artifact-manager/manage`: a capsule's list, describe, search,
//! pull and remove of its session's artifacts (through its `Catalog`); tools
//! and hooks have no artifact manager.

use super::super::bindings::manage;
use super::super::catalog::{ManageError, PortError, Summary};
use super::GuestState;

fn no_tools() -> String {
    ManageError::NotForTools.to_string()
}

/// The text a guest reads for a failed `manage` call.
fn said(error: PortError) -> String {
    ManageError::Catalog(error).to_string()
}

fn summary(s: Summary) -> manage::ArtifactSummary {
    manage::ArtifactSummary {
        name: s.name,
        version: s.version,
        runtime: runtime_type(s.native),
    }
}

fn runtime_type(native: bool) -> manage::RuntimeType {
    if native {
        manage::RuntimeType::Native
    } else {
        manage::RuntimeType::Wasm
    }
}

impl manage::Host for GuestState {
    async fn list(&mut self) -> Vec<manage::ArtifactSummary> {
        match &self.tools {
            Some(tools) => tools
                .artifacts
                .list(&tools.spec.policy)
                .into_iter()
                .map(summary)
                .collect(),
            None => Vec::new(),
        }
    }

    async fn describe(&mut self, name: String) -> Result<manage::ArtifactInfo, String> {
        let tools = self.tools.as_ref().ok_or_else(no_tools)?;
        let info = tools
            .artifacts
            .describe(&name, &tools.spec.policy)
            .map_err(said)?;
        Ok(manage::ArtifactInfo {
            name: info.name,
            version: info.version,
            description: info.description,
            tags: info.tags,
            runtime: runtime_type(info.native),
            input_schema: info.input_schema,
            output_schema: info.output_schema,
        })
    }

    async fn search(&mut self, query: String) -> Result<Vec<manage::ArtifactSummary>, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let found = tools.artifacts.search(&query).await.map_err(said)?;
        Ok(found.into_iter().map(summary).collect())
    }

    async fn pull(
        &mut self,
        name: String,
        version: String,
    ) -> Result<manage::ArtifactSummary, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let pulled = tools
            .artifacts
            .pull(&name, &version, &*tools.core)
            .await
            .map_err(said)?;
        tracing::info!(artifact = %name, version = %version, "artifact pulled at run time");
        Ok(summary(pulled))
    }

    async fn remove(&mut self, name: String) -> Result<bool, String> {
        let tools = self.tools.clone().ok_or_else(no_tools)?;
        let removed = tools.artifacts.remove(&name).await.map_err(said)?;
        if removed {
            tracing::info!(artifact = %name, "artifact removed at run time");
        }
        Ok(removed)
    }

    async fn diagnostics(&mut self) -> Result<manage::RuntimeState, String> {
        let tools = self.tools.as_ref().ok_or_else(no_tools)?;
        let installed = tools
            .artifacts
            .list(&tools.spec.policy)
            .into_iter()
            .map(summary)
            .collect();
        Ok(manage::RuntimeState {
            capsule_id: tools.spec.session_id.to_string(),
            installed,
            capabilities: tools
                .artifacts
                .capabilities_json(&tools.spec.policy, &tools.allowlist),
        })
    }
}
