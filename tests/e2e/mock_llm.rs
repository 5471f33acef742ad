//! A scripted OpenAI-compatible Chat Completions server on loopback: it answers
//! each request with what the test's script returns (text, tool calls, usage,
//! an optional delay), streamed as server-sent events when asked, and records
//! every request it was sent. Like a strict HTTP/1.1 server, it refuses a
//! request body without `Content-Length` (411).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Default)]
pub struct Reply {
    pub text: Option<String>,
    /// `(name, arguments JSON)`.
    pub tool_calls: Vec<(String, String)>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub delay: Duration,
    /// The response `id` (what a continuation-keeping server returns).
    pub id: Option<String>,
}

impl Reply {
    pub fn text(text: &str) -> Self {
        Self {
            text: Some(text.to_string()),
            input_tokens: 10,
            output_tokens: 5,
            ..Self::default()
        }
    }

    pub fn tools(calls: &[(&str, &str)]) -> Self {
        Self {
            tool_calls: calls
                .iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect(),
            input_tokens: 10,
            output_tokens: 5,
            ..Self::default()
        }
    }

    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.input_tokens = input;
        self.output_tokens = output;
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn id(mut self, id: &str) -> Self {
        self.id = Some(id.to_string());
        self
    }
}

/// What a request looked like.
#[derive(Clone, Debug)]
pub struct Seen {
    pub body: Value,
    pub authorization: Option<String>,
}

impl Seen {
    /// Messages without the system message.
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m["role"] != "system")
            .collect()
    }

    pub fn system(&self) -> String {
        self.body["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "system"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_string()
    }

    /// Contents of `tool` messages, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

type Script = dyn Fn(&Seen) -> Reply + Send + Sync;

struct Inner {
    script: Box<Script>,
    seen: Mutex<Vec<Seen>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// The running server (stops when dropped).
pub struct MockLlm {
    pub port: u16,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockLlm {
    /// Serves `script` on a free loopback port.
    pub async fn start(script: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        let inner = Arc::new(Inner {
            script: Box::new(script),
            seen: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/v1/responses", post(respond))
            .with_state(Arc::clone(&inner));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind mock");
        let port = listener.local_addr().expect("addr").port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { port, inner, task }
    }

    /// `http://127.0.0.1:<port>/v1`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.seen.lock().expect("lock").clone()
    }

    /// Requests being answered now.
    #[allow(dead_code)]
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Most requests that were being answered at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }
}

/// The request as recorded, once it is one a strict server reads: a
/// body with its `Content-Length`, of JSON.
fn received(headers: &HeaderMap, body: &Bytes) -> Result<Seen, (StatusCode, &'static str)> {
    // Strict, as many servers and proxies are: a request body must say its
    // length (one sent chunked is refused, not read as empty).
    if !headers.contains_key(header::CONTENT_LENGTH) {
        return Err((
            StatusCode::LENGTH_REQUIRED,
            "send the request body with Content-Length",
        ));
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return Err((StatusCode::BAD_REQUEST, "request body is not JSON"));
    };
    Ok(Seen {
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body,
    })
}

async fn complete(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let seen = match received(&headers, &body) {
        Ok(seen) => seen,
        Err(refused) => return refused.into_response(),
    };
    let reply = (inner.script)(&seen);
    let stream = seen.body["stream"] == true;
    inner.seen.lock().expect("lock").push(seen);
    let now = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(reply.delay).await;
    inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    if stream {
        ([(header::CONTENT_TYPE, "text/event-stream")], sse(&reply)).into_response()
    } else {
        axum::Json(whole(&reply)).into_response()
    }
}

/// The Responses API (`POST /v1/responses`): the same script, answered as
/// `output` items; the request is recorded as it came (its `input` items,
/// `previous_response_id`).
async fn respond(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let seen = match received(&headers, &body) {
        Ok(seen) => seen,
        Err(refused) => return refused.into_response(),
    };
    let reply = (inner.script)(&seen);
    inner.seen.lock().expect("lock").push(seen);
    let mut output: Vec<Value> = Vec::new();
    if let Some(text) = &reply.text {
        output.push(json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}));
    }
    for (i, (name, arguments)) in reply.tool_calls.iter().enumerate() {
        output.push(
            json!({"type": "function_call", "call_id": format!("call_{i}"),
            "name": name, "arguments": arguments}),
        );
    }
    axum::Json(json!({
        "id": reply.id.clone().unwrap_or_else(|| "resp-mock".into()),
        "object": "response",
        "status": "completed",
        "output": output,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                  "total_tokens": reply.input_tokens + reply.output_tokens},
    }))
    .into_response()
}

fn finish_reason(reply: &Reply) -> &'static str {
    if reply.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn usage(reply: &Reply) -> Value {
    json!({
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
    })
}

fn whole(reply: &Reply) -> Value {
    json!({
        "id": reply.id.clone().unwrap_or_else(|| "chatcmpl-mock".into()),
        "object": "chat.completion",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": reply.text,
                "tool_calls": reply.tool_calls.iter().enumerate().map(|(i, (n, a))| json!({
                    "id": format!("call_{i}"), "type": "function",
                    "function": {"name": n, "arguments": a},
                })).collect::<Vec<_>>(),
            },
            "finish_reason": finish_reason(reply),
        }],
        "usage": usage(reply),
    })
}

/// The answer as Chat Completions stream chunks: text in pieces, each tool
/// call's arguments in two fragments, then the finish reason, usage and `[DONE]`.
fn sse(reply: &Reply) -> String {
    let id = reply.id.clone().unwrap_or_else(|| "chatcmpl-mock".into());
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut events = vec![chunk(json!({"role": "assistant"}), Value::Null)];
    if let Some(text) = &reply.text {
        let mid = text
            .char_indices()
            .nth(text.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        for piece in [&text[..mid], &text[mid..]] {
            events.push(chunk(json!({"content": piece}), Value::Null));
        }
    }
    for (i, (name, args)) in reply.tool_calls.iter().enumerate() {
        let mid = args.len() / 2;
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                   "function": {"name": name, "arguments": &args[..mid]}}]}),
            Value::Null,
        ));
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": &args[mid..]}}]}),
            Value::Null,
        ));
    }
    events.push(chunk(json!({}), json!(finish_reason(reply))));
    events.push(
        json!({"id": id, "object": "chat.completion.chunk", "choices": [], "usage": usage(reply)}),
    );
    let mut body = String::new();
    for event in events {
        body.push_str(&format!("data: {event}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body
}
