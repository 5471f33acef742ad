//! `murmur:peer/call@0.2.0` on the host: a guest's peer (a card, or an
//! endpoint) resolved to the interface it speaks, the network policy checked
//! for the card's URL and again for the interface the card names, and the
//! call made through the [`Outbox`](super::super::Outbox) — parts in and out.

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::bindings::murmur::a2a0_2_0::types;
use super::super::bindings::murmur::peer0_2_0::call as wit;
use super::super::{Outbox, PeerBinding, PeerCall, PeerInterface, PeerOp, PeerTarget, PeerTask};
use super::GuestState;
use super::parts::{all_to_json, from_json};
use crate::telemetry::{Kind, Span};

use crate::runtime::peer_stream::wait;

impl GuestState {
    /// The interface a guest's peer names, every URL it goes to allowed.
    async fn interface(
        &mut self,
        peer: wit::Peer,
    ) -> Result<(Arc<dyn Outbox>, PeerInterface), String> {
        let outbox = self
            .outbox
            .clone()
            .ok_or_else(|| "this daemon has no A2A gateway to call through".to_string())?;
        let v03 = match peer.version.as_deref().map(str::trim) {
            None | Some("") => None,
            Some("1.0") | Some("1") => Some(false),
            Some("0.3") | Some("0.3.0") => Some(true),
            Some(v) => return Err(format!("A2A version '{v}': say 1.0 or 0.3")),
        };
        let target = PeerTarget {
            url: peer.url.trim().to_string(),
            binding: peer.binding.map(|b| match b {
                wit::Binding::Jsonrpc => PeerBinding::JsonRpc,
                wit::Binding::HttpJson => PeerBinding::HttpJson,
                wit::Binding::Grpc => PeerBinding::Grpc,
            }),
            v03,
            endpoint: peer.endpoint,
            tenant: peer.tenant,
        };
        self.may_reach(&target.url)?;
        let at = outbox.resolve(&target).await.map_err(|e| e.to_string())?;
        // The card names where to go: that is checked too.
        if at.url != target.url {
            self.may_reach(&at.url)?;
        }
        Ok((outbox, at))
    }

    async fn peer_call(
        &mut self,
        what: &'static str,
        peer: wit::Peer,
        op: PeerOp,
        accepted_only: bool,
        secs: u32,
    ) -> Result<wit::Answer, String> {
        let (outbox, at) = self.interface(peer).await?;
        let parent = self
            .task
            .as_ref()
            .and_then(|t| t.traceparent())
            .or_else(crate::telemetry::current);
        let mut span = Span::start("a2a call", Kind::Client, parent.as_deref());
        span.set("roost.peer", at.url.as_str());
        let traceparent = span.traceparent().unwrap_or_else(|| {
            super::send::traceparent(self.task.as_ref(), &self.hooks.session_id)
        });
        let call = PeerCall {
            op,
            accepted_only,
            wait: wait(secs),
            traceparent: traceparent.clone(),
            caller: self.hooks.session_id.to_string(),
        };
        let (progress, streamed) = crate::runtime::peer_stream::progress();
        let answer = self
            .passing_on(outbox.exchange(&at, call, progress), streamed)
            .await;
        if let Err(error) = &answer {
            span.fail(error.to_string());
        }
        drop(span);
        let url = at.url.clone();
        let task = self.record(what, &url, "", answer, |t: &PeerTask| {
            json!({
                "peer_task_id": t.task_id, "peer_context_id": t.context_id,
                "state": t.state, "traceparent": traceparent,
            })
        })?;
        Ok(answer_of(task))
    }
}

fn parts_of(parts: &[Value]) -> Vec<types::Part> {
    parts.iter().filter_map(from_json).collect()
}

fn answer_of(t: PeerTask) -> wit::Answer {
    wit::Answer {
        task_id: t.task_id,
        context_id: t.context_id,
        state: t.state,
        message: parts_of(&t.message),
        artifacts: t
            .artifacts
            .into_iter()
            .map(|(artifact_id, parts)| types::Artifact {
                artifact_id,
                parts: parts_of(&parts),
            })
            .collect(),
    }
}

impl wit::Host for GuestState {
    async fn send(&mut self, peer: wit::Peer, r: wit::Request) -> Result<wit::Answer, String> {
        if r.parts.is_empty() {
            return Err("a message needs at least one part".into());
        }
        let mut message = json!({
            "messageId": r.message_id.filter(|m| !m.is_empty())
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            "role": "ROLE_USER",
            "parts": all_to_json(r.parts),
        });
        for (key, value) in [("contextId", r.context_id), ("taskId", r.task_id)] {
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                message[key] = json!(v);
            }
        }
        if let Some(meta) = r
            .metadata
            .and_then(|m| serde_json::from_str::<Value>(&m).ok())
            .filter(Value::is_object)
        {
            message["metadata"] = meta;
        }
        let push = r.push.map(|p| {
            let mut c = json!({ "url": p.url });
            if let Some(token) = p.token {
                c["token"] = json!(token);
            }
            if let Some(id) = p.id {
                c["id"] = json!(id);
            }
            c
        });
        if let Some(push) = &push
            && let Some(url) = push["url"].as_str()
        {
            // Where the peer will post is named by the capsule: it must be
            // somewhere the capsule could reach itself.
            self.may_reach(url)?;
        }
        let op = PeerOp::Send {
            message,
            streaming: r.streaming,
            push,
        };
        let accepted = r.until == wit::Until::Accepted;
        self.peer_call("a2a_call", peer, op, accepted, r.timeout_secs)
            .await
    }

    async fn subscribe(
        &mut self,
        peer: wit::Peer,
        task_id: String,
        until: wit::Until,
        timeout_secs: u32,
    ) -> Result<wit::Answer, String> {
        let accepted = until == wit::Until::Accepted;
        self.peer_call(
            "a2a_subscribe",
            peer,
            PeerOp::Subscribe(task_id),
            accepted,
            timeout_secs,
        )
        .await
    }

    async fn get(&mut self, peer: wit::Peer, task_id: String) -> Result<wit::Answer, String> {
        self.peer_call("a2a_get", peer, PeerOp::Get(task_id), false, 0)
            .await
    }

    async fn cancel(&mut self, peer: wit::Peer, task_id: String) -> Result<wit::Answer, String> {
        self.peer_call("a2a_cancel", peer, PeerOp::Cancel(task_id), false, 0)
            .await
    }
}
