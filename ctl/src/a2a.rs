//! roostctl's A2A client (`send`, `cancel`, `card`): JSON-RPC 1.0 to a
//! session's agent on roostd's A2A gateway, with a streamed reply handed
//! over event by event as it comes.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::client::ClientError;

/// roostd's A2A gateway, as a client of one route.
pub struct Gateway<'a> {
    /// `host:port` of the gateway.
    pub addr: &'a str,
    pub route: &'a str,
    /// Bearer token, when the gateway wants one (`ROOST_A2A_TOKEN`).
    pub token: Option<&'a str>,
}

/// What `send` asks for.
pub struct Send<'a> {
    pub text: &'a str,
    pub task_id: Option<&'a str>,
    pub stream: bool,
}

impl Gateway<'_> {
    /// Sends one message; `on_event` gets each result (one for a plain send,
    /// every stream event with `stream`). Errors carry the JSON-RPC error.
    pub async fn send(
        &self,
        req: &Send<'_>,
        on_event: impl FnMut(&Value),
    ) -> Result<(), ClientError> {
        let mut message = json!({
            "messageId": format!("roostctl-{}", std::process::id()) + &format!("-{}", nanos()),
            "role": "ROLE_USER",
            "parts": [{"text": req.text}],
        });
        if let Some(task) = req.task_id {
            message["taskId"] = json!(task);
        }
        let method = if req.stream {
            "SendStreamingMessage"
        } else {
            "SendMessage"
        };
        self.rpc(method, json!({"message": message}), req.stream, on_event)
            .await
    }

    /// Cancels a task; returns the task as it is after the request.
    pub async fn cancel(&self, task_id: &str) -> Result<Value, ClientError> {
        let mut task = Value::Null;
        self.rpc("CancelTask", json!({"id": task_id}), false, |v| {
            task = v.clone();
        })
        .await?;
        Ok(task)
    }

    /// The route's public agent card.
    pub async fn card(&self) -> Result<Value, ClientError> {
        let path = format!("/a2a/{}/.well-known/agent-card.json", self.route);
        let (status, body) = self.exchange(Method::GET, &path, None).await?;
        if !status.is_success() {
            return Err(http_error(status, &body));
        }
        parse(&body)
    }

    async fn rpc(
        &self,
        method: &str,
        params: Value,
        stream: bool,
        mut on_event: impl FnMut(&Value),
    ) -> Result<(), ClientError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let path = format!("/a2a/{}", self.route);
        let mut sse = Vec::new();
        let mut failed = None;
        let mut on_data = |data: &[u8]| {
            // Server-sent events: one `data:` line per event, blank-line separated.
            sse.extend_from_slice(data);
            while let Some(end) = find(&sse, b"\n\n") {
                let event: Vec<u8> = sse.drain(..end + 2).collect();
                for line in String::from_utf8_lossy(&event).lines() {
                    if let Some(data) = line.strip_prefix("data: ")
                        && failed.is_none()
                        && let Err(e) =
                            parse(data.as_bytes()).and_then(|v| handle(&v, &mut on_event))
                    {
                        failed = Some(e);
                    }
                }
            }
        };
        let (status, rest) = self
            .exchange_streaming(
                Method::POST,
                &path,
                Some(body.to_string()),
                stream,
                &mut on_data,
            )
            .await?;
        if let Some(e) = failed {
            return Err(e);
        }
        if !status.is_success() {
            return Err(http_error(status, &rest));
        }
        let text = String::from_utf8_lossy(&rest);
        for chunk in text.split("\n\n").filter(|c| !c.trim().is_empty()) {
            let data = chunk.trim().strip_prefix("data: ").unwrap_or(chunk.trim());
            handle(&parse(data.as_bytes())?, &mut on_event)?;
        }
        Ok(())
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(hyper::StatusCode, Vec<u8>), ClientError> {
        self.exchange_streaming(method, path, body, false, &mut |_| {})
            .await
    }

    /// One request; with `stream` (and a success status) the body goes to
    /// `on_data` as it arrives, otherwise it is returned whole.
    async fn exchange_streaming(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
        stream: bool,
        on_data: &mut dyn FnMut(&[u8]),
    ) -> Result<(hyper::StatusCode, Vec<u8>), ClientError> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| ClientError::Gateway {
                addr: self.addr.to_string(),
                source: e,
            })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr)
            .header("a2a-version", "1.0");
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        if let Some(token) = self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let mut incoming = response.into_body();
        let mut whole = Vec::new();
        while let Some(frame) = incoming.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            if stream && status.is_success() {
                on_data(&data);
            } else {
                whole.extend_from_slice(&data);
            }
        }
        Ok((status, whole))
    }
}

/// The state a result or stream event leaves its task in (`completed`,
/// `failed`, `input-required`…), when it says.
pub fn task_state(result: &Value) -> Option<String> {
    let status = result
        .get("task")
        .map(|t| &t["status"])
        .or_else(|| result.get("statusUpdate").map(|u| &u["status"]))
        .or_else(|| result.get("status"))?;
    let state = status["state"].as_str()?;
    Some(
        state
            .trim_start_matches("TASK_STATE_")
            .to_ascii_lowercase()
            .replace('_', "-"),
    )
}

fn http_error(status: hyper::StatusCode, body: &[u8]) -> ClientError {
    // The gateway's errors are JSON ({"error": {"code", "message"}}) or text.
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    ClientError::Api {
        status: status.as_u16(),
        code: "a2a".into(),
        message,
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse(bytes: &[u8]) -> Result<Value, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::Decode(format!("A2A response: {e}")))
}

fn handle(envelope: &Value, on_event: &mut impl FnMut(&Value)) -> Result<(), ClientError> {
    if let Some(error) = envelope.get("error") {
        return Err(ClientError::Api {
            status: 200,
            code: error["code"].to_string(),
            message: error["message"].as_str().unwrap_or("A2A error").to_string(),
        });
    }
    on_event(&envelope["result"]);
    Ok(())
}

/// A readable line for a result or stream event.
pub fn describe(result: &Value) -> String {
    let text = |v: &Value| {
        v["parts"]
            .as_array()
            .map(|p| {
                p.iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("")
            })
            .unwrap_or_default()
    };
    let state = |s: &Value| {
        s["state"]
            .as_str()
            .unwrap_or("?")
            .trim_start_matches("TASK_STATE_")
            .to_ascii_lowercase()
    };
    if let Some(task) = result.get("task") {
        let mut line = format!(
            "task {} {}",
            task["id"].as_str().unwrap_or("?"),
            state(&task["status"])
        );
        if let Some(a) = task["artifacts"].get(0) {
            line.push_str(&format!("\n{}", text(a)));
        }
        if let Some(m) = task["status"].get("message") {
            line.push_str(&format!("\n{}", text(m)));
        }
        return line;
    }
    if let Some(u) = result.get("statusUpdate") {
        let mut line = format!("status {}", state(&u["status"]));
        if let Some(m) = u["status"].get("message") {
            line.push_str(&format!(": {}", text(m)));
        }
        return line;
    }
    if let Some(u) = result.get("artifactUpdate") {
        return text(&u["artifact"]);
    }
    result.to_string()
}
