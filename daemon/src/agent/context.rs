//! What surrounds an agent's turns: hooks, the system prompt and
//! `MURMUR.md`, and checkpoint verification and signing.

use super::*;
use crate::telemetry::{Kind, Span};

impl AgentRun<'_> {
    /// Sends `kind` to every hook bound to it, in order; a failing or slow
    /// hook is logged and traced and the session goes on. Returns the first
    /// answer (`Ok(Some(json))`) with the hook's name.
    pub(super) async fn hook(
        &self,
        state: &mut AgentState,
        kind: &str,
        mut payload: Value,
        task_id: Option<&str>,
    ) -> Option<(String, String)> {
        payload["session_id"] = json!(self.session_id);
        payload["capsule"] = json!(self.capsule);
        let payload = payload.to_string();
        // After a stop the end-of-task and end-of-session events still reach
        // hooks: they run under their own deadline, not the cancelled token.
        let hook_spec = self.hook_spec.as_ref().unwrap_or(&self.tool_spec);
        let stopped_spec;
        let spec = if self.stop.is_cancelled() {
            let mut fresh = hook_spec.clone();
            fresh.stop = CancellationToken::new();
            stopped_spec = fresh;
            &stopped_spec
        } else {
            hook_spec
        };
        let mut first = None;
        for (name, hook, manifest) in &self.plan.hooks {
            if !handles(manifest, kind) {
                continue;
            }
            let started = Instant::now();
            let mut span = Span::start(format!("hook {kind}"), Kind::Internal, None);
            span.set("roost.hook.name", name.as_str());
            span.set("roost.hook.kind", kind);
            // As the seed does: the hook continues the trace, and may export
            // its own spans to the same collector.
            let traced;
            let spec = match span.traceparent() {
                Some(traceparent) => {
                    let mut with = spec.clone();
                    with.env.push(("TRACEPARENT".into(), traceparent));
                    if let Some(endpoint) = crate::telemetry::endpoint() {
                        with.env
                            .push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.into()));
                    }
                    traced = with;
                    &traced
                }
                None => spec,
            };
            let called = Box::pin(self.runtime.call_hook(hook, kind, &payload, spec)).await;
            if let Err(error) = &called {
                span.fail(error.to_string());
            }
            drop(span);
            match called {
                Ok(Some(answer)) if first.is_none() => first = Some((name.clone(), answer)),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(hook = %name, kind, %error, "hook failed; the session goes on");
                    state
                        .trace
                        .event(
                            "hook_error",
                            json!({
                                "hook": name, "kind": kind, "task_id": task_id,
                                "error": error.to_string(),
                                "duration_ms": started.elapsed().as_millis() as u64,
                            }),
                        )
                        .await;
                }
            }
        }
        first
    }

    /// The system message: the capsule's prompt, then MURMUR.md.
    pub(super) fn system_text(&self) -> Option<String> {
        let md = self.murmur_md_text();
        Some(match &self.plan.system_prompt {
            Some(prompt) => format!("{prompt}\n\n{md}"),
            None => md,
        })
    }

    pub(super) fn murmur_md_text(&self) -> String {
        let listed: Vec<murmur_md::Listed> = self
            .tool_defs()
            .into_iter()
            .map(|t| match self.artifacts.target(&t.name, &self.policy) {
                Target::Skill(_) => murmur_md::Listed {
                    description: self
                        .artifacts
                        .describe(&t.name, &self.policy)
                        .map(|i| i.description)
                        .unwrap_or_default(),
                    name: t.name,
                    skill: true,
                },
                _ => murmur_md::Listed {
                    name: t.name,
                    description: t.description,
                    skill: false,
                },
            })
            .collect();
        murmur_md::render(
            &murmur_md::SessionFacts {
                name: &self.capsule,
                version: &self.version,
                session_id: &self.session_id,
                url: &self.url,
            },
            &self.plan.spec,
            &self.policy,
            &listed,
            self.plan.has_compaction_hook(),
        )
    }

    pub(super) async fn write_murmur_md(&self) {
        let path = self.bookkeeping.join(murmur_md::MURMUR_MD);
        let text = self.murmur_md_text();
        let root = self.workdir.clone();
        // Never through a link (or a hard link) a tool may have planted.
        let written = tokio::task::spawn_blocking(move || {
            crate::fsx::replace(&root, &path, text.as_bytes(), 0o644).map_err(|e| (path, e))
        })
        .await;
        if let Ok(Err((path, error))) = written {
            tracing::warn!(path = %path.display(), %error, "cannot write MURMUR.md");
        }
    }

    pub(super) async fn verify_checkpoints(&self, state: &mut AgentState) {
        let Some(key) = self.checkpoint_key.clone() else {
            return;
        };
        let workdir = self.workdir.clone();
        let rejected = tokio::task::spawn_blocking(move || checkpoint::verify(&key, &workdir))
            .await
            .unwrap_or_default();
        for r in rejected {
            tracing::warn!(
                path = %r.path,
                reason = r.reason,
                "checkpoint rejected: renamed to {}{}",
                r.path,
                checkpoint::REJECTED_SUFFIX
            );
            state
                .trace
                .event(
                    "checkpoint_rejected",
                    json!({"path": r.path, "reason": r.reason}),
                )
                .await;
        }
    }

    pub(super) async fn sign_checkpoints(&self, state: &mut AgentState) {
        let Some(key) = self.checkpoint_key.clone() else {
            return;
        };
        let workdir = self.workdir.clone();
        let signed = tokio::task::spawn_blocking(move || checkpoint::sign(&key, &workdir)).await;
        match signed {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                state
                    .trace
                    .event("checkpoints_signed", json!({"files": n}))
                    .await;
            }
            Ok(Err(error)) => tracing::warn!(%error, "cannot sign checkpoints"),
            Err(error) => tracing::warn!(%error, "checkpoint signing task failed"),
        }
    }
}
