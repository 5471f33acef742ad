//! `murmur:peer/call@0.2.0` for [`Peers`]: one call on a peer's interface
//! (`resolve.rs` finds it) over the binding and version it speaks —
//! JSON-RPC, HTTP+JSON or gRPC (tonic), A2A 1.0 or 0.3 — with roostd's
//! credentials for it (`a2a.peers`), every answer read into 1.0's shape
//! ([`normal`]) and followed (`follow.rs`) until the call has what it asked
//! for.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::envelope::Op;
use super::super::grpc::{pb, pb03};
use super::super::wire::Dialect;
use super::call::SseBuffer;
use super::follow::Follow;
use super::normal;
use super::{Peers, RemoteError};
use crate::runtime::peer_stream::{MAX_EVENT_BYTES, PeerLimit, PeerProgress};
use crate::runtime::{PeerBinding, PeerCall, PeerInterface, PeerOp, PeerTask};

impl Peers {
    /// One call on a peer's interface, followed as it says.
    pub(super) async fn exchange_remote(
        &self,
        at: &PeerInterface,
        call: PeerCall,
        progress: PeerProgress,
    ) -> Result<PeerTask, RemoteError> {
        // gRPC reaches the whole origin (a path in its URL goes nowhere,
        // and the tenant is the caller's): it gets only a token configured
        // for the origin itself, never one scoped to a path under it.
        let peer = origin(&at.url);
        let auth = match at.binding {
            PeerBinding::Grpc => self.auth_for(&peer).await?,
            _ => self.auth_for(&at.url).await?,
        };
        // With roostd's credentials, a session acts only on peer tasks it
        // sent there itself (a message naming a task continues it).
        let named = match &call.op {
            PeerOp::Subscribe(id) | PeerOp::Get(id) | PeerOp::Cancel(id) => Some(id.as_str()),
            PeerOp::Send { message, .. } => message["taskId"].as_str(),
        };
        if let Some(id) = named
            && auth.authorizes()
            && !self.may_act_on(&call.caller, &peer, id)
        {
            return Err(RemoteError::Refused {
                code: 0,
                message: format!(
                    "task '{id}' was not sent to this peer by this session: roostd's \
                     credentials for it (a2a.peers) follow, continue and cancel only the \
                     tasks a session sent itself"
                ),
            });
        }
        // A task id goes into HTTP+JSON's path: one that could reshape it
        // (another path, a query, a fragment) is refused.
        if let PeerOp::Subscribe(id) | PeerOp::Get(id) | PeerOp::Cancel(id) = &call.op
            && !sendable_task_id(id)
        {
            return Err(RemoteError::Refused {
                code: 0,
                message: format!(
                    "'{id}' is not a task id roostd sends (no /, ?, #, %, \\, .., spaces)"
                ),
            });
        }
        let mut follow = Follow::new(&call, progress);
        let deadline = Instant::now() + call.wait;
        let ask = Ask {
            at,
            call: &call,
            auth: &auth,
            wait: call.wait,
        };
        let ran = tokio::time::timeout_at(deadline, async {
            match at.binding {
                PeerBinding::JsonRpc => ask.jsonrpc(&mut follow).await,
                PeerBinding::HttpJson => ask.rest(&mut follow).await,
                PeerBinding::Grpc => ask.grpc(&mut follow).await,
            }
        })
        .await;
        // The task a send made is this session's, however the call ends
        // (it may subscribe to it again after a cut-off stream).
        if auth.authorizes()
            && matches!(call.op, PeerOp::Send { .. })
            && !follow.task.task_id.is_empty()
        {
            self.owns(&call.caller, &peer, &follow.task.task_id);
        }
        match ran {
            Err(_) => Err(RemoteError::Deadline {
                task_id: follow.task.task_id,
            }),
            Ok(read) => outcome(read, follow),
        }
    }
}

/// What a call that has read all it will is left with.
fn outcome(read: Result<(), RemoteError>, follow: Follow) -> Result<PeerTask, RemoteError> {
    match read {
        Err(e) => Err(e),
        Ok(()) if follow.over.is_some() => {
            Err(RemoteError::Limit(follow.over.unwrap_or(PeerLimit::Held)))
        }
        // An answer that named no task and said no message.
        Ok(()) if follow.task.state.is_empty() => Err(RemoteError::NoTask(http::StatusCode::OK)),
        Ok(()) if follow.done || follow.unary => Ok(follow.finish()),
        Ok(()) => Err(RemoteError::StreamEnded),
    }
}

/// A peer's streamed answer to a streaming send, as the call reads it but
/// without a connection: `pieces` of a body as they came (server-sent
/// events of JSON-RPC answers when `rpc`, else of HTTP+JSON ones), read in
/// `v03`'s shapes or 1.0's and followed, under `peer_stream`'s limits.
/// (Fuzzed: `fuzz/fuzz_targets/peer_stream.rs`.)
pub fn read_stream(pieces: &[&[u8]], v03: bool, rpc: bool) -> Result<PeerTask, RemoteError> {
    offline(v03, rpc, |ask, follow| {
        let mut events = SseBuffer::default();
        for piece in pieces {
            if ask.feed(&mut events, piece, rpc, http::StatusCode::OK, follow)? {
                break;
            }
        }
        Ok(())
    })
}

/// A peer's gRPC stream as the call reads it but without a connection:
/// each message's bytes decoded as the version's `StreamResponse`, read into
/// 1.0's shape and followed. (Fuzzed: `fuzz/fuzz_targets/peer_stream.rs`.)
pub fn read_grpc(messages: &[&[u8]], v03: bool) -> Result<PeerTask, RemoteError> {
    use prost::Message;
    offline(v03, false, |ask, follow| {
        for bytes in messages {
            let event = match v03 {
                true => pb03::StreamResponse::decode(*bytes).map(serde_json::to_value),
                false => pb::StreamResponse::decode(*bytes).map(serde_json::to_value),
            };
            let event = event
                .map_err(|e| RemoteError::Grpc(e.to_string()))?
                .map_err(|e| RemoteError::Grpc(e.to_string()))?;
            if follow.take(&ask.read(event, false)) {
                break;
            }
        }
        Ok(())
    })
}

/// A streaming send's reading, with no peer: what `read` leaves.
fn offline(
    v03: bool,
    rpc: bool,
    read: impl FnOnce(&Ask<'_>, &mut Follow) -> Result<(), RemoteError>,
) -> Result<PeerTask, RemoteError> {
    let at = PeerInterface {
        url: String::new(),
        binding: if rpc {
            PeerBinding::JsonRpc
        } else {
            PeerBinding::HttpJson
        },
        v03,
        tenant: None,
    };
    let call = PeerCall {
        op: PeerOp::Send {
            message: json!({}),
            streaming: true,
            push: None,
        },
        accepted_only: false,
        wait: Duration::ZERO,
        traceparent: String::new(),
        caller: String::new(),
    };
    let auth = super::Auth::default();
    let ask = Ask {
        at: &at,
        call: &call,
        auth: &auth,
        wait: Duration::ZERO,
    };
    let (progress, _passed_on) = crate::runtime::peer_stream::progress();
    let mut follow = Follow::new(&call, progress);
    let read = read(&ask, &mut follow);
    outcome(read, follow)
}

/// One call's request, on one interface.
struct Ask<'a> {
    at: &'a PeerInterface,
    call: &'a PeerCall,
    auth: &'a super::Auth,
    wait: Duration,
}

impl Ask<'_> {
    fn task_id(&self) -> Option<&str> {
        match &self.call.op {
            PeerOp::Send { .. } => None,
            PeerOp::Subscribe(id) | PeerOp::Get(id) | PeerOp::Cancel(id) => Some(id),
        }
    }

    fn op(&self) -> Op {
        match &self.call.op {
            PeerOp::Send {
                streaming: true, ..
            } => Op::Stream,
            PeerOp::Send { .. } => Op::Send,
            PeerOp::Subscribe(_) => Op::Subscribe,
            PeerOp::Get(_) => Op::Get,
            PeerOp::Cancel(_) => Op::Cancel,
        }
    }

    /// The request's body in a version's shape: `rpc` for 0.3 JSON-RPC,
    /// else ProtoJSON.
    fn params(&self, rpc: bool) -> Value {
        let accepted = self.call.accepted_only;
        match (&self.call.op, self.at.v03) {
            (PeerOp::Send { message, push, .. }, false) => {
                normal::send_v10(message, accepted, push.as_ref())
            }
            (PeerOp::Send { message, push, .. }, true) if rpc => {
                normal::send_v03_rpc(message, accepted, push.as_ref())
            }
            (PeerOp::Send { message, push, .. }, true) => {
                normal::send_v03_proto(message, accepted, push.as_ref())
            }
            (_, _) => json!({ "id": self.task_id() }),
        }
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("traceparent", self.call.traceparent.as_str()),
        ];
        if !self.at.v03 {
            headers.push(("a2a-version", "1.0"));
        }
        headers.extend(self.auth.pairs());
        headers
    }

    /// An answer read into 1.0's `StreamResponse`.
    fn read(&self, v: Value, rpc: bool) -> Value {
        let task = matches!(self.op(), Op::Get | Op::Cancel);
        match (self.at.v03, rpc) {
            (false, _) => normal::from_v10(v, task),
            (true, true) => normal::from_v03_rpc(v),
            (true, false) => normal::from_v03_proto(v, task),
        }
    }

    async fn jsonrpc(&self, follow: &mut Follow) -> Result<(), RemoteError> {
        let d = if self.at.v03 {
            Dialect::V03
        } else {
            Dialect::V10
        };
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": self.op().method(d), "params": self.params(true),
        });
        self.post_and_follow(http::Method::POST, &self.at.url, Some(body), true, follow)
            .await
    }

    async fn rest(&self, follow: &mut Follow) -> Result<(), RemoteError> {
        let base = self.at.url.trim_end_matches('/');
        let v1 = if self.at.v03 { "/v1" } else { "" };
        let id = self.task_id().unwrap_or_default();
        let (method, path, body) = match self.op() {
            Op::Send => (http::Method::POST, "/message:send".to_string(), true),
            Op::Stream => (http::Method::POST, "/message:stream".to_string(), true),
            Op::Get => (http::Method::GET, format!("/tasks/{id}"), false),
            Op::Cancel => (http::Method::POST, format!("/tasks/{id}:cancel"), false),
            // 0.3's reference client subscribes with GET, 1.0's with POST.
            _ if self.at.v03 => (http::Method::GET, format!("/tasks/{id}:subscribe"), false),
            _ => (http::Method::POST, format!("/tasks/{id}:subscribe"), false),
        };
        let url = format!("{base}{v1}{path}");
        let body = body.then(|| self.params(false));
        self.post_and_follow(method, &url, body, false, follow)
            .await
    }

    /// One HTTP request; its answer (an event stream, or one JSON body)
    /// followed. `rpc`: the answers are JSON-RPC responses.
    async fn post_and_follow(
        &self,
        method: http::Method,
        url: &str,
        body: Option<Value>,
        rpc: bool,
        follow: &mut Follow,
    ) -> Result<(), RemoteError> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(url)
            .header(http::header::USER_AGENT, "roostd")
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        for (name, value) in self.headers() {
            request = request.header(name, value);
        }
        let request = self.auth.with_tls(request);
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let request = request
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| RemoteError::Http(crate::http_client::HttpError::Request(e)))?;
        let read = self.wait.saturating_add(Duration::from_secs(1));
        let timeouts = crate::http_client::Timeouts {
            connect: crate::http_client::TIMEOUT,
            first_byte: read,
            between_bytes: read,
        };
        let response = crate::http_client::send(request, timeouts).await?;
        let status = response.status();
        if status == http::StatusCode::UNAUTHORIZED || status == http::StatusCode::FORBIDDEN {
            return Err(RemoteError::Unauthorized {
                status,
                configured: self.auth.configured(),
            });
        }
        let sse = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut body = response.into_body();
        let mut pending: Vec<u8> = Vec::new();
        let mut events = SseBuffer::default();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            if !sse {
                pending.extend_from_slice(&data);
                if pending.len() > MAX_EVENT_BYTES {
                    return Err(RemoteError::Limit(PeerLimit::Event));
                }
            } else if self.feed(&mut events, &data, rpc, status, follow)? {
                return Ok(());
            }
        }
        if !sse {
            let answer: Value =
                serde_json::from_slice(&pending).map_err(|_| RemoteError::NotJson(status))?;
            self.take(answer, rpc, status, follow)?;
        }
        Ok(())
    }

    /// A chunk of an event stream: each event it completes taken by
    /// `follow`; `true` once the call has its answer.
    fn feed(
        &self,
        events: &mut SseBuffer,
        data: &[u8],
        rpc: bool,
        status: http::StatusCode,
        follow: &mut Follow,
    ) -> Result<bool, RemoteError> {
        events.push(data);
        while let Some(event) = events.next() {
            if self.take(event?, rpc, status, follow)? {
                return Ok(true);
            }
        }
        if events.pending() > MAX_EVENT_BYTES {
            return Err(RemoteError::Limit(PeerLimit::Event));
        }
        Ok(false)
    }

    /// One answer: a refusal, or what it says taken by `follow`.
    fn take(
        &self,
        answer: Value,
        rpc: bool,
        status: http::StatusCode,
        follow: &mut Follow,
    ) -> Result<bool, RemoteError> {
        if rpc {
            if let Some(error) = answer.get("error") {
                return Err(super::call::refusal(error));
            }
            let result = answer.get("result").cloned().unwrap_or(Value::Null);
            return Ok(follow.take(&self.read(result, true)));
        }
        if !status.is_success() {
            // google.rpc.Status (1.0), or whatever 0.3's server says.
            let error = answer.get("error").unwrap_or(&answer);
            return Err(RemoteError::Refused {
                code: i64::from(status.as_u16()),
                message: error["message"]
                    .as_str()
                    .map_or_else(|| error.to_string(), str::to_string),
            });
        }
        Ok(follow.take(&self.read(answer, false)))
    }

    async fn grpc(&self, follow: &mut Follow) -> Result<(), RemoteError> {
        let target = if self.at.url.contains("://") {
            self.at.url.clone()
        } else {
            format!("http://{}", self.at.url)
        };
        let endpoint = tonic::transport::Channel::from_shared(target.clone())
            .map_err(|e| RemoteError::Grpc(format!("not a gRPC target: {e}")))?
            .connect_timeout(crate::http_client::TIMEOUT);
        let channel = if target.starts_with("https://") {
            // TLS by roostd's own client (its trust store, the peer's CA
            // and client certificate), speaking h2.
            let tls = self.auth.tls.clone();
            endpoint
                .connect_with_connector(tower::service_fn(move |uri: http::Uri| {
                    let tls = tls.clone();
                    async move {
                        let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
                        let port = uri.port_u16().unwrap_or(443);
                        crate::http_client::connect_h2(host, port, tls.as_ref())
                            .await
                            .map(hyper_util::rt::TokioIo::new)
                    }
                }))
                .await
        } else {
            endpoint.connect().await
        }
        .map_err(|e| RemoteError::Grpc(format!("cannot connect: {}", causes(&e))))?;
        let mut params = self.params(false);
        // The same calls on either version's generated client.
        macro_rules! call {
            ($client:expr, $subscribe:ident) => {{
                let mut client = $client.max_decoding_message_size(MAX_EVENT_BYTES);
                match self.op() {
                    Op::Send => one(client.send_message(self.grpc_request(params)?).await),
                    Op::Stream => {
                        let r = client
                            .send_streaming_message(self.grpc_request(params)?)
                            .await;
                        return self.follow_grpc(r, follow).await;
                    }
                    Op::Subscribe => {
                        let r = client.$subscribe(self.grpc_request(params)?).await;
                        return self.follow_grpc(r, follow).await;
                    }
                    Op::Get => one(client.get_task(self.grpc_request(params)?).await),
                    _ => one(client.cancel_task(self.grpc_request(params)?).await),
                }?
            }};
        }
        let answers: Vec<Value> = if self.at.v03 {
            // 0.3 names a task by its resource name.
            if let Some(id) = self.task_id() {
                params = json!({ "name": format!("tasks/{id}") });
            }
            call!(
                pb03::a2a_service_client::A2aServiceClient::new(channel),
                task_subscription
            )
        } else {
            if let Some(tenant) = &self.at.tenant {
                params["tenant"] = json!(tenant);
            }
            call!(
                pb::a2a_service_client::A2aServiceClient::new(channel),
                subscribe_to_task
            )
        };
        for answer in answers {
            follow.take(&self.read(answer, false));
        }
        Ok(())
    }

    /// A gRPC request of JSON `params`, with the call's metadata.
    fn grpc_request<Q: serde::de::DeserializeOwned>(
        &self,
        params: Value,
    ) -> Result<tonic::Request<Q>, RemoteError> {
        let message: Q = serde_json::from_value(params)
            .map_err(|e| RemoteError::Grpc(format!("cannot write the request: {e}")))?;
        let mut request = tonic::Request::new(message);
        for (name, value) in self.headers() {
            if name == "content-type" {
                continue;
            }
            if let (Ok(key), Ok(value)) = (
                tonic::metadata::MetadataKey::from_bytes(name.as_bytes()),
                value.parse(),
            ) {
                request.metadata_mut().insert(key, value);
            }
        }
        Ok(request)
    }

    async fn follow_grpc<E: serde::Serialize>(
        &self,
        answer: Result<tonic::Response<tonic::Streaming<E>>, tonic::Status>,
        follow: &mut Follow,
    ) -> Result<(), RemoteError> {
        let mut stream = answer.map_err(grpc_refusal)?.into_inner();
        while let Some(event) = stream.next().await {
            let event = serde_json::to_value(event.map_err(grpc_refusal)?)
                .map_err(|e| RemoteError::Grpc(e.to_string()))?;
            if follow.take(&self.read(event, false)) {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// An error and each of its causes, `: `-joined (tonic's "transport
/// error" says nothing alone).
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether a task id can go into a URL's path as one segment, as it is.
fn sendable_task_id(id: &str) -> bool {
    !id.is_empty()
        && !id.contains("..")
        && !id.chars().any(|c| {
            matches!(c, '/' | '?' | '#' | '%' | '\\') || c.is_whitespace() || c.is_control()
        })
}

/// A URL's origin (`scheme://host:port`); `host:port` as `http://host:port`.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    format!("{scheme}://{authority}")
}

/// A unary gRPC answer as JSON.
fn one<R: serde::Serialize>(
    answer: Result<tonic::Response<R>, tonic::Status>,
) -> Result<Vec<Value>, RemoteError> {
    let answer = answer.map_err(grpc_refusal)?.into_inner();
    serde_json::to_value(answer)
        .map(|v| vec![v])
        .map_err(|e| RemoteError::Grpc(e.to_string()))
}

fn grpc_refusal(status: tonic::Status) -> RemoteError {
    if status.code() == tonic::Code::Unauthenticated {
        return RemoteError::Unauthorized {
            status: http::StatusCode::UNAUTHORIZED,
            configured: false,
        };
    }
    RemoteError::Refused {
        code: status.code() as i64,
        message: status.message().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_that_could_reshape_a_path_is_not_sent_and_grpc_tokens_go_by_origin() {
        assert!(sendable_task_id("tsk_01a2-b3"));
        for bad in [
            "", "x/../y", "a/b", "t?x=1", "t#frag", "%2e%2e", "a b", "..", "a\\b",
        ] {
            assert!(!sendable_task_id(bad), "{bad:?}");
        }
        assert_eq!(
            origin("http://gw.example:80/a2a/agentA"),
            "http://gw.example:80"
        );
        assert_eq!(origin("127.0.0.1:9000"), "http://127.0.0.1:9000");
        assert_eq!(origin("https://h/x?y#z"), "https://h");
    }
}
