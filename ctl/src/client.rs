//! Typed async client of the roostd control API over its Unix socket.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, body::Incoming, header};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use crate::api::{API_PREFIX, ErrorBody, Health, Session, SessionList, StartRequest};

mod schedules;
mod upgrade;

/// What can go wrong talking to roostd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no roostd is listening on {}: start one with `roostd` (or `systemctl start roostd`), \
         or point roostctl at it with --socket or ROOST_SOCKET",
        socket.display()
    )]
    NoDaemon { socket: PathBuf },
    #[error("permission denied on {}: run as a member of the roost group, or as root", socket.display())]
    PermissionDenied { socket: PathBuf },
    #[error("cannot reach roostd on {}: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot reach roostd's A2A gateway at {addr}: {source} (is a2a_listen reachable from here?)"
    )]
    Gateway {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP exchange with roostd failed")]
    Http(#[from] hyper::Error),
    #[error("roostd answered {status}: {message} ({code})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("roostd sent a response roostctl cannot read: {0}")]
    Decode(String),
}

impl ClientError {
    /// The API error code, when roostd answered with one.
    pub fn api_code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Idle connections kept for reuse (HTTP/1.1 keep-alive over the socket).
const MAX_IDLE: usize = 32;

/// A handle on one roostd control socket. Cheap to clone; clones share a small
/// pool of keep-alive connections.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    idle: Arc<Mutex<Vec<Sender>>>,
}

/// A response whose connection goes back to the pool once the body is read.
struct RawResponse {
    status: StatusCode,
    body: Incoming,
    sender: Sender,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            idle: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn checkout(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn checkin(&self, sender: Sender) {
        if !sender.is_closed() {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(sender);
            }
        }
    }

    async fn connect(&self) -> Result<Sender, ClientError> {
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|source| match source.kind() {
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                        ClientError::NoDaemon {
                            socket: self.socket.clone(),
                        }
                    }
                    std::io::ErrorKind::PermissionDenied => ClientError::PermissionDenied {
                        socket: self.socket.clone(),
                    },
                    _ => ClientError::Connect {
                        socket: self.socket.clone(),
                        source,
                    },
                })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the daemon closes the connection or the sender is dropped.
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Reads the whole body and returns the connection to the pool.
    async fn finish(&self, response: RawResponse) -> Result<(StatusCode, Bytes), ClientError> {
        let bytes = response.body.collect().await?.to_bytes();
        self.checkin(response.sender);
        Ok((response.status, bytes))
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<RawResponse, ClientError> {
        self.send_typed(method, path, body, "application/json")
            .await
    }

    /// A request whose body (if any) is of `content_type`.
    async fn send_typed(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> Result<RawResponse, ClientError> {
        let make = || {
            let mut builder = Request::builder()
                .method(method.clone())
                .uri(path)
                .header(header::HOST, "roostd");
            if body.is_some() {
                builder = builder.header(header::CONTENT_TYPE, content_type);
            }
            builder
                .body(Full::new(Bytes::from(body.clone().unwrap_or_default())))
                .map_err(|e| ClientError::Decode(e.to_string()))
        };
        // A pooled connection may have been closed by the daemon meanwhile; the
        // request then goes out on a fresh connection.
        if let Some(mut sender) = self.checkout()
            && sender.ready().await.is_ok()
        {
            match sender.send_request(make()?).await {
                Ok(response) => return Ok(Self::wrap(response, sender)),
                // Not sent: safe to send again, even a POST.
                Err(e) if e.is_canceled() || e.is_closed() => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut sender = self.connect().await?;
        let response = sender.send_request(make()?).await?;
        Ok(Self::wrap(response, sender))
    }

    fn wrap(response: hyper::Response<Incoming>, sender: Sender) -> RawResponse {
        let status = response.status();
        RawResponse {
            status,
            body: response.into_body(),
            sender,
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        self.call_typed(method, path, body, "application/json")
            .await
    }

    /// A request whose body is of `content_type`, answered with JSON.
    async fn call_typed<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> Result<T, ClientError> {
        let response = self.send_typed(method, path, body, content_type).await?;
        let (status, bytes) = self.finish(response).await?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode(e.to_string()))
    }

    pub async fn health(&self) -> Result<Health, ClientError> {
        self.call(Method::GET, &format!("{API_PREFIX}/health"), None)
            .await
    }

    /// Starts a session; `path` and `workdir` must be absolute (see [`absolutize`]).
    pub async fn start(&self, request: &StartRequest) -> Result<Session, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.call(Method::POST, &format!("{API_PREFIX}/sessions"), Some(body))
            .await
    }

    /// [`Self::start`], hearing each staging step (`step`, `what`) as it
    /// starts: fetching, verifying and compiling artifacts, compiling the
    /// component.
    pub async fn start_with_progress(
        &self,
        request: &StartRequest,
        mut on_step: impl FnMut(&str, &str),
    ) -> Result<Session, ClientError> {
        use crate::api::StartProgress;
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        let path = format!("{API_PREFIX}/sessions?progress=true");
        let mut pending = Vec::new();
        let mut outcome = None;
        self.stream(Method::POST, &path, Some(body), |chunk| {
            pending.extend_from_slice(chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let event = serde_json::from_slice(&line)
                    .map_err(|e| ClientError::Decode(format!("a start progress line: {e}")));
                match event {
                    Ok(StartProgress::Step { step, what }) => on_step(&step, &what),
                    Ok(StartProgress::Session(session)) => outcome = Some(Ok(*session)),
                    Ok(StartProgress::Error { status, error }) => {
                        outcome = Some(Err(ClientError::Api {
                            status,
                            code: error.code,
                            message: error.message,
                        }));
                    }
                    Err(e) => outcome = Some(Err(e)),
                }
            }
        })
        .await?;
        outcome.unwrap_or_else(|| {
            Err(ClientError::Decode(
                "roostd ended the start without an outcome".into(),
            ))
        })
    }

    /// The effective policy of a capsule on the daemon's host (absolute path).
    pub async fn policy(
        &self,
        request: &crate::api::PolicyRequest,
    ) -> Result<crate::api::PolicyReport, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.call(Method::POST, &format!("{API_PREFIX}/policy"), Some(body))
            .await
    }

    /// Moves node `node`'s sessions to other nodes of its cluster
    /// (`roostctl drain`).
    pub async fn drain(
        &self,
        request: &crate::api::DrainRequest,
    ) -> Result<crate::api::DrainReport, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.call(
            Method::POST,
            &format!("{API_PREFIX}/cluster/drain"),
            Some(body),
        )
        .await
    }

    /// Every node's sessions, from the cluster's route table (`all`: ended
    /// ones too).
    pub async fn cluster_sessions(
        &self,
        all: bool,
    ) -> Result<Vec<crate::api::ClusterSession>, ClientError> {
        let list: crate::api::ClusterSessionList = self
            .call(
                Method::GET,
                &format!("{API_PREFIX}/cluster/sessions?all={all}"),
                None,
            )
            .await?;
        Ok(list.sessions)
    }

    pub async fn list(&self, all: bool) -> Result<Vec<Session>, ClientError> {
        let list: SessionList = self
            .call(
                Method::GET,
                &format!("{API_PREFIX}/sessions?all={all}"),
                None,
            )
            .await?;
        Ok(list.sessions)
    }

    pub async fn get(&self, id_or_name: &str) -> Result<Session, ClientError> {
        self.call(
            Method::GET,
            &format!("{API_PREFIX}/sessions/{}", encode(id_or_name)),
            None,
        )
        .await
    }

    pub async fn stop(&self, id_or_name: &str) -> Result<Session, ClientError> {
        self.call(
            Method::POST,
            &format!("{API_PREFIX}/sessions/{}/stop", encode(id_or_name)),
            None,
        )
        .await
    }

    /// Deletes a session that has ended (with `force`, a live one is stopped
    /// first); returns its record as it was.
    pub async fn remove(&self, id_or_name: &str, force: bool) -> Result<Session, ClientError> {
        self.call(
            Method::DELETE,
            &format!("{API_PREFIX}/sessions/{}?force={force}", encode(id_or_name)),
            None,
        )
        .await
    }

    /// Deletes ended sessions and A2A tasks (or says which, with `dry_run`).
    pub async fn prune(
        &self,
        request: &crate::api::PruneRequest,
    ) -> Result<crate::api::PruneReport, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.call(Method::POST, &format!("{API_PREFIX}/prune"), Some(body))
            .await
    }

    /// An agent session's tasks, oldest first.
    pub async fn tasks(
        &self,
        id_or_name: &str,
    ) -> Result<Vec<crate::api::TaskRecord>, ClientError> {
        self.call(
            Method::GET,
            &format!("{API_PREFIX}/sessions/{}/tasks", encode(id_or_name)),
            None,
        )
        .await
    }

    /// An agent session's `trace.jsonl` (empty for sessions without one),
    /// read page by page.
    pub async fn trace(&self, id_or_name: &str) -> Result<Bytes, ClientError> {
        let mut whole = Vec::new();
        loop {
            let path = format!(
                "{API_PREFIX}/sessions/{}/trace?offset={}",
                encode(id_or_name),
                whole.len()
            );
            let (status, bytes) = self.raw(Method::GET, &path, None).await?;
            if !status.is_success() {
                return Err(api_error(status, &bytes));
            }
            if bytes.is_empty() {
                return Ok(Bytes::from(whole));
            }
            whole.extend_from_slice(&bytes);
        }
    }

    /// Blocks until the session has ended, then returns its final record.
    pub async fn wait(&self, id_or_name: &str) -> Result<Session, ClientError> {
        loop {
            let session: Session = self
                .call(
                    Method::GET,
                    &format!(
                        "{API_PREFIX}/sessions/{}/wait?timeout_secs=30",
                        encode(id_or_name)
                    ),
                    None,
                )
                .await?;
            if session.state.is_ended() {
                return Ok(session);
            }
        }
    }

    /// Publishes an artifact bundle (a zip packed by [`crate::artifact::bundle::pack`])
    /// into the daemon's own registry, for `platform`.
    pub async fn publish(
        &self,
        bundle: Vec<u8>,
        platform: &str,
        cluster: bool,
    ) -> Result<crate::api::PublishReport, ClientError> {
        let mut path = format!("{API_PREFIX}/registry?platform={}", encode(platform));
        if cluster {
            path.push_str("&cluster=true");
        }
        self.post_zip(&path, bundle).await
    }

    /// Uploads a capsule directory (a zip packed by
    /// [`crate::artifact::tree::pack_tree`]) for roostd to start from its copy.
    pub async fn upload(&self, zip: Vec<u8>) -> Result<crate::api::UploadReport, ClientError> {
        self.post_zip(&format!("{API_PREFIX}/uploads"), zip).await
    }

    async fn post_zip<T: DeserializeOwned>(
        &self,
        path: &str,
        zip: Vec<u8>,
    ) -> Result<T, ClientError> {
        self.call_typed(Method::POST, path, Some(zip), "application/zip")
            .await
    }

    /// Stops a session if it is live, then runs it again from its start
    /// request under the same id; returns the new run's record.
    pub async fn restart(&self, id_or_name: &str) -> Result<Session, ClientError> {
        self.call(
            Method::POST,
            &format!("{API_PREFIX}/sessions/{}/restart", encode(id_or_name)),
            None,
        )
        .await
    }

    /// The session's captured guest output; with `follow`, `on_chunk` keeps
    /// receiving output until the session ends.
    pub async fn logs(
        &self,
        id_or_name: &str,
        follow: bool,
        on_chunk: impl FnMut(&[u8]),
    ) -> Result<(), ClientError> {
        let query = crate::api::LogsQuery {
            follow,
            ..Default::default()
        };
        self.logs_with(id_or_name, &query, on_chunk).await
    }

    /// The session's guest output as `query` asks (whole lines when it asks
    /// for a tail, a start time, timestamps or JSON lines).
    pub async fn logs_with(
        &self,
        id_or_name: &str,
        query: &crate::api::LogsQuery,
        on_chunk: impl FnMut(&[u8]),
    ) -> Result<(), ClientError> {
        let path = format!(
            "{API_PREFIX}/sessions/{}/logs?{}",
            encode(id_or_name),
            query.to_query()
        );
        self.stream(Method::GET, &path, None, on_chunk).await
    }

    /// Session state changes across the daemon as JSON lines
    /// ([`crate::api::SessionEvent`]); with `follow`, until the daemon ends
    /// the stream or the caller stops reading.
    pub async fn events(
        &self,
        follow: bool,
        tail: Option<u64>,
        on_chunk: impl FnMut(&[u8]),
    ) -> Result<(), ClientError> {
        let mut path = format!("{API_PREFIX}/events?follow={follow}");
        if let Some(tail) = tail {
            path.push_str(&format!("&tail={tail}"));
        }
        self.stream(Method::GET, &path, None, on_chunk).await
    }

    /// A request whose answer's body is handed over chunk by chunk as it
    /// arrives.
    async fn stream(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        mut on_chunk: impl FnMut(&[u8]),
    ) -> Result<(), ClientError> {
        let response = self.send(method, path, body).await?;
        if !response.status.is_success() {
            let (status, bytes) = self.finish(response).await?;
            return Err(api_error(status, &bytes));
        }
        let RawResponse {
            mut body, sender, ..
        } = response;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                on_chunk(&data);
            }
        }
        self.checkin(sender);
        Ok(())
    }

    /// `GET /metrics` as Prometheus text.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let response = self.send(Method::GET, "/metrics", None).await?;
        let (status, bytes) = self.finish(response).await?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        String::from_utf8(bytes.to_vec()).map_err(|e| ClientError::Decode(e.to_string()))
    }

    /// A raw request, for callers (and tests) that need the status and body as sent.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let response = self.send(method, path, body).await?;
        self.finish(response).await
    }
}

fn api_error(status: StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => ClientError::Api {
            status: status.as_u16(),
            code: body.error.code,
            message: body.error.message,
        },
        Err(_) => ClientError::Api {
            status: status.as_u16(),
            code: "http_error".into(),
            message: String::from_utf8_lossy(bytes).trim().to_string(),
        },
    }
}

/// Percent-encodes a path segment (ids and names are plain, but user input may not be).
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Makes a user-supplied path absolute against the current directory, as roostd
/// cannot know the caller's working directory.
pub fn absolutize(path: &Path) -> std::io::Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(path))
    }
}
