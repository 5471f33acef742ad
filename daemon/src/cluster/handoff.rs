//! Gateway requests carried between nodes over NATS: the node a client
//! reached publishes the request to `roost.a2a.<node>`, its reply subject
//! one of its own (`<inbox>.<n>`, all under one subscription the node holds,
//! so a request costs no subscription of its own); the node that runs the
//! route serves it as if it had come to
//! its own gateway and publishes the answer back in frames (one `whole`
//! frame for a plain answer; `head`, `body`…, `end` for a stream), with an
//! `alive` frame every 5 s while it works. The asking side gives up after
//! 20 s without a frame, or at once when no node listens (NATS's "no
//! responders"); a client that goes away cancels a stream by its inbox on
//! `roost.a2a.<node>.cancel`. The gateway reaches this through the
//! `Handoff` port.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_nats::{HeaderMap, StatusCode};
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::a2a::routing::{Forward, ForwardHead, Forwarded, HandoffError, Serve};

/// The header that says what a frame is.
const FRAME: &str = "Roost-Frame";
/// How often a node that serves a handed-over request says it still does.
const ALIVE_EVERY: Duration = Duration::from_secs(5);
/// How long the asking node waits for a frame before it gives up.
const SILENCE: Duration = Duration::from_secs(20);
/// Room kept in a message for its headers and the frame's head.
const HEADROOM: usize = 8 * 1024;

fn subject(node: &str) -> String {
    format!("roost.a2a.{node}")
}

fn cancel_subject(node: &str) -> String {
    format!("roost.a2a.{node}.cancel")
}

fn frame(kind: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(FRAME, kind);
    headers
}

/// A head and a body as one payload: the head's length, the head (JSON),
/// the body.
pub fn pack(head: &impl serde::Serialize, body: &[u8]) -> Bytes {
    let head = serde_json::to_vec(head).unwrap_or_default();
    let mut out = BytesMut::with_capacity(4 + head.len() + body.len());
    out.put_u32(u32::try_from(head.len()).unwrap_or(u32::MAX));
    out.put_slice(&head);
    out.put_slice(body);
    out.freeze()
}

/// A payload [`pack`] made, read back; `None` for anything else a node or
/// another NATS client sends. (Fuzzed: `fuzz/fuzz_targets/cluster_records.rs`.)
pub fn unpack<T: serde::de::DeserializeOwned>(payload: &Bytes) -> Option<(T, Bytes)> {
    let len = usize::try_from(u32::from_be_bytes(payload.get(..4)?.try_into().ok()?)).ok()?;
    let head = serde_json::from_slice(payload.get(4..4 + len)?).ok()?;
    Some((head, payload.slice(4 + len..)))
}

/// The largest message the server takes (1 MiB, NATS's default, until it
/// has said).
fn max_payload(client: &async_nats::Client) -> usize {
    match client.server_info().max_payload {
        0 => 1024 * 1024,
        max => max,
    }
}

fn kind(message: &async_nats::Message) -> &str {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(FRAME))
        .map_or("", |v| v.as_str())
}

/// Frames a request may have waiting before its reader is dropped as too
/// slow (a stream's events; a plain answer is one frame).
const WAITING: usize = 1024;

/// The replies to this node's handed-over requests: one subscription to
/// `<inbox>.*`, each reply passed to its request by the last token.
pub(super) struct Replies {
    prefix: String,
    next: std::sync::atomic::AtomicU64,
    open: Mutex<HashMap<u64, tokio::sync::mpsc::Sender<async_nats::Message>>>,
}

impl Replies {
    /// Subscribes and passes replies on until `stop`.
    pub(super) async fn start(
        client: &async_nats::Client,
        stop: CancellationToken,
    ) -> Result<Arc<Self>, String> {
        let prefix = client.new_inbox();
        let mut replies = client
            .subscribe(format!("{prefix}.*"))
            .await
            .map_err(|e| e.to_string())?;
        let this = Arc::new(Self {
            prefix,
            next: std::sync::atomic::AtomicU64::new(1),
            open: Mutex::default(),
        });
        let weak = Arc::downgrade(&this);
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    () = stop.cancelled() => return,
                    message = replies.next() => message,
                };
                let (Some(message), Some(this)) = (message, weak.upgrade()) else {
                    return;
                };
                let id = message
                    .subject
                    .rsplit('.')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok());
                let mut open = this.open.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(id) = id
                    && let Some(tx) = open.get(&id)
                    && tx.try_send(message).is_err()
                {
                    // Gone, or too slow to keep up: its reader sees the
                    // end of the channel.
                    open.remove(&id);
                }
            }
        });
        Ok(this)
    }

    /// A reply subject of its own for one request, and where its frames come.
    fn open(self: &Arc<Self>) -> (Reply, tokio::sync::mpsc::Receiver<async_nats::Message>) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = tokio::sync::mpsc::channel(WAITING);
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let reply = Reply {
            replies: Arc::clone(self),
            id,
            subject: format!("{}.{id}", self.prefix),
        };
        (reply, rx)
    }
}

/// One request's reply subject, given back when dropped.
struct Reply {
    replies: Arc<Replies>,
    id: u64,
    subject: String,
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.replies
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Asks node `node` to serve `request`; its answer as it comes.
pub(super) async fn forward(
    client: &async_nats::Client,
    replies: &Arc<Replies>,
    node: &str,
    request: Forward,
) -> Result<Forwarded, HandoffError> {
    let unreachable = |why: String| HandoffError::Unreachable {
        node: node.to_string(),
        why,
    };
    let transport = |e: &dyn std::fmt::Display| HandoffError::Transport(e.to_string());
    let payload = pack(&request, &request.body);
    let max = max_payload(client);
    if payload.len() + HEADROOM > max {
        return Err(HandoffError::TooLarge {
            size: payload.len(),
            max,
        });
    }
    let (reply, mut frames) = replies.open();
    client
        .publish_with_reply(subject(node), reply.subject.clone(), payload)
        .await
        .map_err(|e| transport(&e))?;
    // Up to the head: `alive` frames while the other node works.
    loop {
        let message = match tokio::time::timeout(SILENCE, frames.recv()).await {
            Ok(Some(message)) => message,
            Ok(None) => return Err(transport(&"the reply could not be kept up with")),
            Err(_) => return Err(unreachable(format!("no word from it in {SILENCE:?}"))),
        };
        if message.status == Some(StatusCode::NO_RESPONDERS) {
            return Err(unreachable(
                "it has left the cluster or lost its NATS connection".into(),
            ));
        }
        let bad = || transport(&"a frame that does not parse");
        match kind(&message) {
            "alive" => {}
            "whole" => {
                let (head, body) = unpack::<ForwardHead>(&message.payload).ok_or_else(bad)?;
                return Ok(Forwarded {
                    head,
                    body: futures::stream::once(async move { Ok(body) }).boxed(),
                });
            }
            "head" => {
                let (head, _) = unpack::<ForwardHead>(&message.payload).ok_or_else(bad)?;
                let body = Body {
                    frames,
                    cancel: Some((client.clone(), cancel_subject(node))),
                    reply,
                    node: node.to_string(),
                };
                return Ok(Forwarded {
                    head,
                    body: body.stream().boxed(),
                });
            }
            "error" => return Err(transport(&String::from_utf8_lossy(&message.payload))),
            other => return Err(transport(&format!("an unknown frame '{other}'"))),
        }
    }
}

/// A streamed answer's body frames; dropped before its end (the client
/// went away), it tells the serving node to stop.
struct Body {
    frames: tokio::sync::mpsc::Receiver<async_nats::Message>,
    /// The client and the serving node's cancel subject, until the end.
    cancel: Option<(async_nats::Client, String)>,
    reply: Reply,
    node: String,
}

impl Body {
    fn stream(self) -> impl futures::Stream<Item = Result<Bytes, HandoffError>> + Send {
        futures::stream::unfold(Some(self), |body| async move {
            let mut body = body?;
            loop {
                let message = match tokio::time::timeout(SILENCE, body.frames.recv()).await {
                    Ok(Some(message)) => message,
                    Ok(None) | Err(_) => {
                        let error = HandoffError::Unreachable {
                            node: body.node.clone(),
                            why: "it stopped answering mid-stream (or the client could not \
                                  keep up)"
                                .into(),
                        };
                        return Some((Err(error), None));
                    }
                };
                match kind(&message) {
                    "body" => return Some((Ok(message.payload), Some(body))),
                    "alive" => {}
                    _ => {
                        // `end` (or anything else): the answer is over.
                        body.cancel = None;
                        return None;
                    }
                }
            }
        })
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some((client, subject)) = self.cancel.take() {
            let inbox = self.reply.subject.clone();
            tokio::spawn(async move {
                let _ = client.publish(subject, inbox.into()).await;
            });
        }
    }
}

/// What serves handed-over requests, and how many at once.
pub(super) struct Server {
    serve: Serve,
    slots: Arc<tokio::sync::Semaphore>,
    most: usize,
}

impl Server {
    pub(super) fn new(serve: Serve, most: usize) -> Self {
        Self {
            serve,
            slots: Arc::new(tokio::sync::Semaphore::new(most)),
            most,
        }
    }
}

/// Serves the requests other nodes hand to `node` with `serve` (once the
/// gateway has set it), until `stop`.
pub(super) async fn serve(
    client: async_nats::Client,
    node: String,
    serve: Arc<OnceLock<Server>>,
    stop: CancellationToken,
) -> Result<(), String> {
    let mut requests = client
        .subscribe(subject(&node))
        .await
        .map_err(|e| e.to_string())?;
    let mut cancels = client
        .subscribe(cancel_subject(&node))
        .await
        .map_err(|e| e.to_string())?;
    let open: Arc<Mutex<HashMap<String, CancellationToken>>> = Arc::default();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                request = requests.next() => {
                    let Some(request) = request else { return };
                    let (client, serve, open) =
                        (client.clone(), Arc::clone(&serve), Arc::clone(&open));
                    tokio::spawn(answer(client, request, serve, open));
                }
                cancel = cancels.next() => {
                    let Some(cancel) = cancel else { return };
                    let inbox = String::from_utf8_lossy(&cancel.payload).into_owned();
                    let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(token) = open.remove(&inbox) {
                        token.cancel();
                    }
                }
            }
        }
    });
    Ok(())
}

/// A request being served, cancelable by its inbox (on
/// `roost.a2a.<node>.cancel`) until it is dropped.
struct Cancelable<'a> {
    open: &'a Mutex<HashMap<String, CancellationToken>>,
    inbox: String,
}

impl<'a> Cancelable<'a> {
    fn new(
        open: &'a Mutex<HashMap<String, CancellationToken>>,
        inbox: String,
        stop: CancellationToken,
    ) -> Self {
        open.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(inbox.clone(), stop);
        Self { open, inbox }
    }
}

impl Drop for Cancelable<'_> {
    fn drop(&mut self) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.inbox);
    }
}

/// Serves one handed-over request and publishes its answer to its inbox.
async fn answer(
    client: async_nats::Client,
    request: async_nats::Message,
    serve: Arc<OnceLock<Server>>,
    open: Arc<Mutex<HashMap<String, CancellationToken>>>,
) {
    let Some(inbox) = request.reply.clone() else {
        return;
    };
    let publish = |headers: HeaderMap, payload: Bytes| {
        let (client, inbox) = (client.clone(), inbox.clone());
        async move {
            client
                .publish_with_headers(inbox, headers, payload)
                .await
                .is_ok()
        }
    };
    let Some(forward) = unpack::<Forward>(&request.payload).map(|(mut f, body)| {
        f.body = body;
        f
    }) else {
        publish(
            frame("error"),
            Bytes::from_static(b"a request that does not parse"),
        )
        .await;
        return;
    };
    let Some(server) = serve.get() else {
        let why = "this node's gateway is not serving yet; try again";
        publish(frame("error"), Bytes::from_static(why.as_bytes())).await;
        return;
    };
    // As many at once as the gateway takes connections of its own.
    let Ok(_slot) = Arc::clone(&server.slots).try_acquire_owned() else {
        let why = format!(
            "this node serves {} requests handed over from other nodes already (its \
             http.max_connections); try again",
            server.most
        );
        publish(frame("error"), Bytes::from(why)).await;
        return;
    };
    let serve = Arc::clone(&server.serve);
    let stop = CancellationToken::new();
    let _cancelable = Cancelable::new(&open, inbox.to_string(), stop.clone());
    let mut alive =
        tokio::time::interval_at(tokio::time::Instant::now() + ALIVE_EVERY, ALIVE_EVERY);
    let mut answering = serve(forward);
    let answer = loop {
        tokio::select! {
            answer = &mut answering => break Some(answer),
            () = stop.cancelled() => break None,
            _ = alive.tick() => {
                if !publish(frame("alive"), Bytes::new()).await {
                    break None;
                }
            }
        }
    };
    let chunk = max_payload(&client).saturating_sub(HEADROOM).max(1024);
    if let Some(Forwarded { head, mut body }) = answer {
        let mut body = if head.streamed {
            body
        } else {
            // A plain answer: collected, and sent in one frame when it fits
            // (else as a stream of its pieces).
            let mut whole = BytesMut::new();
            let mut failed = false;
            while let Some(part) = body.next().await {
                match part {
                    Ok(part) => whole.put_slice(&part),
                    Err(_) => failed = true,
                }
            }
            if !failed && whole.len() <= chunk {
                publish(frame("whole"), pack(&head, &whole)).await;
                return;
            }
            futures::stream::once(async move { Ok(whole.freeze()) }).boxed()
        };
        if publish(frame("head"), pack(&head, &[])).await {
            loop {
                tokio::select! {
                    part = body.next() => match part {
                        Some(Ok(part)) => {
                            let mut sent = true;
                            for piece in part.chunks(chunk) {
                                sent = sent && publish(frame("body"), Bytes::copy_from_slice(piece)).await;
                            }
                            if !sent {
                                break;
                            }
                        }
                        Some(Err(_)) | None => {
                            publish(frame("end"), Bytes::new()).await;
                            break;
                        }
                    },
                    () = stop.cancelled() => break,
                    _ = alive.tick() => {
                        if !publish(frame("alive"), Bytes::new()).await {
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl crate::a2a::routing::Handoff for super::Cluster {
    fn node(&self) -> &str {
        &self.node
    }

    async fn forward(&self, node: &str, request: Forward) -> Result<Forwarded, HandoffError> {
        let Some(joined) = self.joined.get() else {
            return Err(HandoffError::Transport(
                "this node has not joined the cluster".into(),
            ));
        };
        forward(&joined.client, &joined.replies, node, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_round_trips_and_a_broken_one_is_none() {
        let request = Forward {
            method: "POST".into(),
            uri: "/a2a/echo?x=1".into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: Bytes::from_static(b"{\"jsonrpc\":\"2.0\"}"),
        };
        let payload = pack(&request, &request.body);
        let (back, body) = unpack::<Forward>(&payload).expect("round trip");
        assert_eq!(
            (back.method.as_str(), back.uri.as_str()),
            ("POST", "/a2a/echo?x=1")
        );
        assert_eq!(back.headers, request.headers);
        assert_eq!(body, request.body);
        // Short, a head longer than the payload, a head that is not JSON.
        for broken in [
            &b"\x00\x00"[..],
            b"\x00\x00\x00\xffabc",
            b"\x00\x00\x00\x03abcdef",
        ] {
            assert!(unpack::<Forward>(&Bytes::copy_from_slice(broken)).is_none());
        }
    }
}
