//! A peer's answers followed: each 1.0 `StreamResponse` (whatever binding
//! and version it came in) taken into the task as a call leaves it — its
//! ids, state, latest status message, artifacts put together from their
//! chunks — until the call has what it asked for.

use std::collections::HashMap;

use serde_json::Value;

use super::super::wire;
use crate::runtime::peer_stream::{
    MAX_ARTIFACTS, MAX_HELD_BYTES, MAX_ID_BYTES, PeerLimit, PeerProgress,
};
use crate::runtime::{PeerCall, PeerOp, PeerTask};

/// What a peer's answers have said so far.
pub(super) struct Follow {
    pub(super) task: PeerTask,
    /// Each artifact's id, parts and size, in the order they came.
    artifacts: Vec<(String, Vec<Value>, usize)>,
    /// Where each artifact is in `artifacts`, by id.
    index: HashMap<String, usize>,
    /// What the artifacts hold now, in bytes of JSON.
    held: usize,
    /// The peer went past a limit of `peer_stream`: the call is over.
    pub(super) over: Option<PeerLimit>,
    accepted_only: bool,
    /// The call answers once (not a stream): its one answer is all.
    pub(super) unary: bool,
    pub(super) done: bool,
    progress: PeerProgress,
}

impl Follow {
    pub(super) fn new(call: &PeerCall, progress: PeerProgress) -> Self {
        let unary = match &call.op {
            PeerOp::Send { streaming, .. } => !streaming,
            PeerOp::Subscribe(_) => false,
            PeerOp::Get(_) | PeerOp::Cancel(_) => true,
        };
        Self {
            task: PeerTask::default(),
            artifacts: Vec::new(),
            index: HashMap::new(),
            held: 0,
            over: None,
            accepted_only: call.accepted_only,
            unary,
            done: false,
            progress,
        }
    }

    /// Takes one 1.0 `StreamResponse`; `true` once the call has its answer.
    pub(super) fn take(&mut self, v: &Value) -> bool {
        if let Some(t) = v.get("task") {
            self.ids(t.get("id"), t.get("contextId"));
            self.status(&t["status"]);
            if let Some(artifacts) = t["artifacts"].as_array() {
                self.artifacts.clear();
                self.index.clear();
                self.held = 0;
                for a in artifacts {
                    self.artifact(a, false);
                }
            }
        } else if let Some(m) = v.get("message") {
            self.ids(m.get("taskId"), m.get("contextId"));
            self.task.state = "completed".into();
            self.task.message = parts(&m["parts"]);
            self.done = true;
        } else if let Some(u) = v.get("statusUpdate") {
            self.ids(u.get("taskId"), u.get("contextId"));
            self.status(&u["status"]);
        } else if let Some(u) = v.get("artifactUpdate") {
            self.ids(u.get("taskId"), u.get("contextId"));
            let text: String = u["artifact"]["parts"]
                .as_array()
                .map(|p| p.iter().filter_map(|p| p["text"].as_str()).collect())
                .unwrap_or_default();
            self.progress.pass_on(&text);
            self.artifact(&u["artifact"], u["append"].as_bool() == Some(true));
        } else {
            return false;
        }
        if self.accepted_only {
            self.done = true;
        }
        self.done
    }

    fn ids(&mut self, task: Option<&Value>, context: Option<&Value>) {
        for (v, slot) in [
            (task, &mut self.task.task_id),
            (context, &mut self.task.context_id),
        ] {
            if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
                if s.len() > MAX_ID_BYTES {
                    self.over = Some(PeerLimit::Id);
                    self.done = true;
                    return;
                }
                *slot = s.to_string();
            }
        }
    }

    fn status(&mut self, status: &Value) {
        if let Some(m) = status.get("message").filter(|m| m.is_object()) {
            self.task.message = parts(&m["parts"]);
        }
        let Some(name) = status["state"].as_str() else {
            return;
        };
        let state = name
            .strip_prefix("TASK_STATE_")
            .unwrap_or(name)
            .to_ascii_lowercase()
            .replace('_', "-");
        let state = if state == "cancelled" {
            "canceled".to_string()
        } else {
            state
        };
        self.done |= matches!(
            state.as_str(),
            "completed" | "failed" | "canceled" | "rejected" | "input-required" | "auth-required"
        );
        self.task.state = state;
    }

    fn artifact(&mut self, a: &Value, append: bool) {
        let id = a["artifactId"].as_str().unwrap_or("answer").to_string();
        let new = parts(&a["parts"]);
        let size: usize = new.iter().map(|p| p.to_string().len()).sum();
        let before = self.held;
        match self
            .index
            .get(&id)
            .and_then(|&at| self.artifacts.get_mut(at))
        {
            Some((_, have, bytes)) if append => {
                have.extend(new);
                *bytes += size;
                self.held += size;
            }
            Some((_, have, bytes)) => {
                self.held = self.held - *bytes + size;
                *have = new;
                *bytes = size;
            }
            None => {
                self.held += id.len() + size;
                self.index.insert(id.clone(), self.artifacts.len());
                self.artifacts.push((id, new, size));
            }
        }
        // A peer that streams without end is cut off, not held in memory.
        if self.held > MAX_HELD_BYTES && self.held > before {
            self.over = Some(PeerLimit::Held);
        } else if self.artifacts.len() > MAX_ARTIFACTS {
            self.over = Some(PeerLimit::Artifacts);
        }
        self.done |= self.over.is_some();
    }

    pub(super) fn finish(mut self) -> PeerTask {
        self.task.artifacts = std::mem::take(&mut self.artifacts)
            .into_iter()
            .map(|(id, parts, _)| (id, parts))
            .collect();
        self.task
    }
}

fn parts(v: &Value) -> Vec<Value> {
    v.as_array()
        .map(|p| p.iter().filter_map(wire::normal_part).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    /// A call that follows task `t` to its end.
    fn subscription() -> PeerCall {
        PeerCall {
            op: PeerOp::Subscribe("t".into()),
            accepted_only: false,
            wait: Duration::from_secs(1),
            traceparent: String::new(),
            caller: String::new(),
        }
    }

    #[test]
    fn a_follower_puts_chunks_together_and_stops_where_the_call_says() {
        let (tx, mut rx) = crate::runtime::peer_stream::progress();
        let call = subscription();
        let mut f = Follow::new(&call, tx);
        assert!(!f.take(&json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING"}}})));
        assert!(
            !f.take(&json!({"artifactUpdate": {"artifact": {"artifactId": "a",
            "parts": [{"text": "hel"}]}}}))
        );
        assert!(!f.take(
            &json!({"artifactUpdate": {"append": true, "artifact": {"artifactId": "a",
            "parts": [{"raw": "AAE=", "filename": "f"}]}}})
        ));
        assert!(f.take(
            &json!({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED",
            "message": {"parts": [{"text": "done"}]}}}})
        ));
        let t = f.finish();
        assert_eq!((t.task_id.as_str(), t.state.as_str()), ("t", "completed"));
        assert_eq!(t.message, vec![json!({"text": "done"})]);
        assert_eq!(
            t.artifacts,
            vec![(
                "a".to_string(),
                vec![
                    json!({"text": "hel"}),
                    json!({"raw": "AAE=", "filename": "f"})
                ]
            )]
        );
        assert_eq!(rx.rest().as_deref(), Some("hel"));

        let (tx, _rx) = crate::runtime::peer_stream::progress();
        let mut first = Follow::new(
            &PeerCall {
                accepted_only: true,
                ..call
            },
            tx,
        );
        assert!(
            first.take(&json!({"task": {"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}}}))
        );
    }

    #[test]
    fn a_peer_that_streams_without_end_is_cut_off() {
        let (tx, _rx) = crate::runtime::peer_stream::progress();
        let call = subscription();
        let mut f = Follow::new(&call, tx);
        let chunk = "x".repeat(64 * 1024);
        let mut taken = 0;
        while !f.take(&json!({"artifactUpdate": {"append": true,
            "artifact": {"artifactId": "a", "parts": [{"text": chunk}]}}}))
        {
            taken += 1;
            assert!(taken < 1000, "never cut off");
        }
        assert_eq!(f.over, Some(PeerLimit::Held));
        // Replacing an artifact does not add up.
        let (tx, _rx) = crate::runtime::peer_stream::progress();
        let mut g = Follow::new(&call, tx);
        for _ in 0..200 {
            assert!(!g.take(&json!({"artifactUpdate": {
                "artifact": {"artifactId": "a", "parts": [{"text": chunk}]}}})));
        }
        assert_eq!(g.over, None);
    }

    #[test]
    fn a_peer_that_sends_artifact_after_artifact_or_streams_text_without_end_is_bounded() {
        let (tx, mut rx) = crate::runtime::peer_stream::progress();
        let call = subscription();
        let mut f = Follow::new(&call, tx);
        let mut n = 0;
        while !f.take(&json!({"artifactUpdate": {
            "artifact": {"artifactId": format!("a{n}"), "parts": []}}}))
        {
            n += 1;
            assert!(n < 10_000, "never cut off");
        }
        assert!(
            f.over == Some(PeerLimit::Artifacts) && n <= MAX_ARTIFACTS,
            "{n}"
        );
        // Replaced text is passed on only up to its bound.
        let (tx, mut rx2) = crate::runtime::peer_stream::progress();
        let mut g = Follow::new(&call, tx);
        let chunk = "y".repeat(64 * 1024);
        for _ in 0..100 {
            g.take(&json!({"artifactUpdate": {
                "artifact": {"artifactId": "a", "parts": [{"text": chunk}]}}}));
        }
        let passed = rx2.rest().map_or(0, |t| t.len());
        assert!(
            passed <= crate::runtime::peer_stream::MAX_PENDING_BYTES,
            "{passed}"
        );
        assert!(rx.rest().is_none());
    }

    #[test]
    fn a_peer_naming_its_task_with_a_long_id_ends_the_call() {
        let (tx, _rx) = crate::runtime::peer_stream::progress();
        let mut f = Follow::new(&subscription(), tx);
        let long = "t".repeat(MAX_ID_BYTES + 1);
        assert!(f.take(&json!({"task": {"id": long, "status": {"state": "TASK_STATE_WORKING"}}})));
        assert_eq!(f.over, Some(PeerLimit::Id));
        assert!(f.task.task_id.is_empty(), "never kept");
        // The control: an id at the bound is taken.
        let (tx, _rx) = crate::runtime::peer_stream::progress();
        let mut g = Follow::new(&subscription(), tx);
        let id = "t".repeat(MAX_ID_BYTES);
        assert!(!g.take(&json!({"task": {"id": id, "status": {"state": "TASK_STATE_WORKING"}}})));
        assert_eq!((g.over, g.task.task_id.len()), (None, MAX_ID_BYTES));
    }
}
