//! roostctl's A2A client (`roostctl send`): JSON-RPC 1.0 to a session's
//! agent on roostd's A2A gateway, with a streamed reply printed as it comes.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::client::ClientError;

/// What `send` asks for.
pub struct Send<'a> {
    /// `host:port` of the gateway.
    pub addr: &'a str,
    pub route: &'a str,
    pub text: &'a str,
    pub task_id: Option<&'a str>,
    pub stream: bool,
    /// Bearer token, when the gateway wants one (`ROOST_A2A_TOKEN`).
    pub token: Option<&'a str>,
}

/// Sends one message; `on_event` gets each result (one for a plain send,
/// every stream event with `stream`). Errors carry the JSON-RPC error.
pub async fn send(req: &Send<'_>, mut on_event: impl FnMut(&Value)) -> Result<(), ClientError> {
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
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}});
    let stream = tokio::net::TcpStream::connect(req.addr)
        .await
        .map_err(|e| {
            ClientError::Decode(format!("cannot reach the A2A gateway at {}: {e}", req.addr))
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(format!("/a2a/{}", req.route))
        .header("host", req.addr)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0");
    if let Some(token) = req.token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| ClientError::Decode(e.to_string()))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let mut body = response.into_body();
    let mut buffer = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        buffer.extend_from_slice(&data);
        if req.stream && status.is_success() {
            // Server-sent events: one `data:` line per event, blank-line separated.
            while let Some(end) = find(&buffer, b"\n\n") {
                let event: Vec<u8> = buffer.drain(..end + 2).collect();
                for line in String::from_utf8_lossy(&event).lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        handle(&parse(data.as_bytes())?, &mut on_event)?;
                    }
                }
            }
        }
    }
    if !status.is_success() {
        return Err(ClientError::Api {
            status: status.as_u16(),
            code: "a2a".into(),
            message: String::from_utf8_lossy(&buffer).trim().to_string(),
        });
    }
    if !req.stream || !buffer.is_empty() {
        let text = String::from_utf8_lossy(&buffer);
        for chunk in text.split("\n\n").filter(|c| !c.trim().is_empty()) {
            let data = chunk.trim().strip_prefix("data: ").unwrap_or(chunk.trim());
            handle(&parse(data.as_bytes())?, &mut on_event)?;
        }
    }
    Ok(())
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
