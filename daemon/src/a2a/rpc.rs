//! The A2A operations behind both bindings: JSON-RPC 2.0 (1.0 method names,
//! and 0.3's `message/send`… without `A2A-Version`) and HTTP+JSON (1.0's
//! paths, and 0.3's under `/v1/`), each with its own error shape; one
//! implementation of each operation.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::envelope::{self, Op, field, int};
use super::error::A2aError;
use super::routing::Route;
use super::wire::{self, Dialect, Shape};
use super::{At, Gateway, own_task, task_stream, wait_until_ended};
use crate::ids::TaskId;
use crate::tasks::{A2aTask, Broker, NewTask, ResumeError, SubmitError, TaskState};

fn rpc_ok(id: &Value, result: Value) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

fn rpc_err(id: &Value, e: &A2aError, d: Dialect) -> Response {
    e.log_refusal("jsonrpc");
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "error": e.rpc(d)})).into_response()
}

/// What an operation answers: a JSON value, or a stream.
pub(super) enum Answer {
    Value(Value),
    /// A task's stream from the log position; `true`: it stays open while
    /// the task waits for input (a subscription), else it ends there.
    Stream(Box<A2aTask>, u64, bool),
}

/// `POST /a2a/<route>`: one JSON-RPC request.
pub(super) async fn jsonrpc(
    gw: &Gateway,
    at: At<'_>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let session = at.route;
    let null = Value::Null;
    let d = match super::dialect(headers) {
        Ok(d) => d,
        Err(m) => return rpc_err(&null, &A2aError::Version(m.to_string()), Dialect::V10),
    };
    let request = match envelope::jsonrpc(d, content_type(headers), body) {
        Ok(r) => r,
        Err((id, e)) => return rpc_err(&id, &e, d),
    };
    let id = request.id;
    let slot = match stream_slot(gw, session, request.op) {
        Ok(slot) => slot,
        Err(e) => return rpc_err(&id, &e, d),
    };
    match run(gw, at, d, request.op, &request.params, headers).await {
        Ok(Answer::Value(v)) => rpc_ok(&id, v),
        Ok(Answer::Stream(task, after, through_input)) => {
            let id = id.clone();
            let Some(slot) = slot else {
                return rpc_err(
                    &id,
                    &A2aError::Internal("a stream without a slot".into()),
                    d,
                );
            };
            task_stream(
                Arc::clone(&gw.tasks),
                *task,
                (after, through_input),
                (d, slot),
                move |v| json!({"jsonrpc": "2.0", "id": id, "result": v}),
            )
        }
        Err(e) => rpc_err(&id, &e, d),
    }
}

/// The HTTP+JSON binding under `/a2a/<route>/`: 1.0's paths, and 0.3's
/// under `v1/`.
pub(super) async fn rest(
    gw: &Gateway,
    at: At<'_>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    // The header is checked, so an unsupported version is refused.
    if let Err(m) = super::dialect(headers) {
        return A2aError::Version(m.to_string()).http();
    }
    // 0.3's paths (`/v1/…`, 0.3's ProtoJSON): each the 1.0 operation it
    // names, its body read into 1.0's and its answer written back.
    type Out = (fn(Op, Value) -> Value, fn(Value) -> Value);
    let read = match path.strip_prefix("v1/") {
        Some(v03) => rest_v03(method, v03, query, headers, body).map(|(r, d)| {
            let out: Out = (super::v03_proto::answer_out, super::v03_proto::event_out);
            (r, d, out)
        }),
        None => {
            envelope::rest(method.as_str(), path, query, content_type(headers), body).map(|r| {
                let out: Out = (|_, v| v, |v| v);
                (r, Dialect::V10, out)
            })
        }
    };
    let (request, d, (out, frame)) = match read {
        Ok(read) => read,
        Err(e) => return e.http(),
    };
    let slot = match stream_slot(gw, at.route, request.op) {
        Ok(slot) => slot,
        Err(e) => return e.http(),
    };
    match run(gw, at, d, request.op, &request.params, headers).await {
        Ok(Answer::Value(v)) => axum::Json(out(request.op, v)).into_response(),
        Ok(Answer::Stream(task, after, through_input)) => match slot {
            Some(slot) => task_stream(
                Arc::clone(&gw.tasks),
                *task,
                (after, through_input),
                (d, slot),
                frame,
            ),
            None => A2aError::Internal("a stream without a slot".into()).http(),
        },
        Err(e) => e.http(),
    }
}

/// An HTTP+JSON request of A2A 0.3 (`/v1/` and what follows) as the 1.0
/// operation it names ([`super::v03_proto`]), and the dialect it runs in.
fn rest_v03(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(envelope::Request, Dialect), A2aError> {
    use super::v03_proto;
    let (path, d) = match path {
        // 0.3's authenticated extended card is 0.3's card.
        "card" => ("extendedAgentCard", Dialect::V03),
        "extendedAgentCard" | "tasks" => {
            return Err(A2aError::MethodNotFound(format!(
                "no A2A 0.3 operation is {method} /v1/{path}; 1.0's is at /{path} (with \
                 A2A-Version: 1.0)"
            )));
        }
        p => (p, Dialect::V10),
    };
    let read: fn(Value) -> Value = if path.starts_with("message:") {
        v03_proto::send_request_in
    } else if path.ends_with("/pushNotificationConfigs") {
        v03_proto::push_create_in
    } else {
        |v| v
    };
    let body = if body.is_empty() {
        body.clone()
    } else {
        let v = serde_json::from_slice(body)
            .map_err(|e| A2aError::Parse(format!("invalid JSON: {e}")))?;
        Bytes::from(read(v).to_string())
    };
    let request = envelope::rest(method.as_str(), path, query, content_type(headers), &body)?;
    Ok((request, d))
}

/// A stream's slot on its route, taken before its task is made: `Some` for
/// the operations that answer with a stream.
pub(super) fn stream_slot(
    gw: &Gateway,
    session: &Route,
    op: Op,
) -> Result<Option<super::streams::Slot>, A2aError> {
    match op {
        Op::Stream | Op::Subscribe => gw.streams.take(&session.name).map(Some),
        _ => Ok(None),
    }
}

fn content_type(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
}

fn task_id(params: &Value) -> Result<TaskId, A2aError> {
    params
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(TaskId::from)
        .ok_or_else(|| A2aError::InvalidParams("params.id (the task id) is required".into()))
}

pub(super) async fn run(
    gw: &Gateway,
    at: At<'_>,
    d: Dialect,
    op: Op,
    params: &Value,
    headers: &HeaderMap,
) -> Result<Answer, A2aError> {
    let session = at.route;
    let broker = &gw.tasks;
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    match op {
        Op::PushCreate | Op::PushGet | Op::PushList | Op::PushDelete => {
            super::push::op(gw, at, d, op, params)
                .await
                .map(Answer::Value)
        }
        Op::ExtendedCard => {
            // Authenticated by the gateway's token check, as every request
            // but the public card is.
            let agent = gw.routing.agent(&session.name).await.ok_or_else(|| {
                A2aError::Internal(format!("route '{}' has no agent record", session.name))
            })?;
            super::card::extended(gw, &agent, headers, d)
                .map(Answer::Value)
                .ok_or(A2aError::ExtendedCardNotConfigured)
        }
        Op::Send | Op::Stream => {
            let message = params
                .get("message")
                .ok_or_else(|| A2aError::InvalidParams("params.message is required".into()))?;
            let m =
                wire::parse_message(message).map_err(|e| A2aError::InvalidParams(e.to_string()))?;
            if let Some(existing) = &m.task_id {
                let t = own_task(gw, at, &TaskId::from(existing.as_str())).await?;
                if t.state == TaskState::InputRequired {
                    return resume(broker, t, &m, d, op, params).await;
                }
                return Err(A2aError::Unsupported(if t.state.is_terminal() {
                    format!(
                        "task '{existing}' has ended ({}); send a new message without taskId",
                        t.state.as_str()
                    )
                } else {
                    format!(
                        "task '{existing}' is {}; it does not take more messages now",
                        t.state.as_str()
                    )
                }));
            }
            if !session.live {
                return Err(A2aError::Unsupported(format!(
                    "the session at '{}' has ended: it takes no new tasks (GetTask and \
                     ListTasks still answer for its tasks); start it again to send it more",
                    session.name
                )));
            }
            // A context is its first client's: another's (a contextId it
            // learned) is not joined.
            if let Some(context) = m.context_id.as_deref()
                && let Some(owner) = broker.context_owner(&session.name, context).await?
                && owner != at.owner
            {
                return Err(A2aError::InvalidParams(format!(
                    "contextId '{context}' is another client's at this agent: send your own \
                     (or none, for a new one)"
                )));
            }
            let push = super::push::from_send(gw, at.client, params).await?;
            let canonical = m.canonical.to_string();
            let (task, live) = broker
                .submit(NewTask {
                    session_id: &session.id,
                    route: &session.name,
                    owner: at.owner,
                    message_id: &m.message_id,
                    context_id: m.context_id.as_deref(),
                    text: &m.text,
                    message_json: &canonical,
                    parts: m.canonical["parts"].as_array().map_or(&[], Vec::as_slice),
                    traceparent,
                    dedupe: gw.dedupe,
                    tick: None,
                })
                .await
                .map_err(|e| match e {
                    SubmitError::Log(s) => A2aError::from(s),
                    // Withdrawn (nothing runs) or unknown (named, findable).
                    e @ (SubmitError::Withdrawn { .. } | SubmitError::Unknown { .. }) => {
                        A2aError::Internal(e.to_string())
                    }
                    // Names the running task; the client may wait or cancel it.
                    other => A2aError::Unsupported(other.to_string()),
                })?;
            tracing::info!(task_id = %task.id, route = %session.name, "A2A task accepted");
            if let Some(mut config) = push {
                // What the task has logged so far is delivered too.
                config.task_id = task.id.clone();
                if config.id.is_empty() {
                    config.id = task.id.to_string();
                }
                let max = gw.push.as_ref().map_or(0, |p| p.max_configs());
                let made = match broker.create_push_config(&config, true, max).await {
                    Ok(made) => super::push::made(made, &task.id, max),
                    Err(e) => Err(A2aError::from(e)),
                };
                // The task is accepted and runs: its client is not told
                // the send failed. It can set the config again
                // (CreateTaskPushNotificationConfig).
                if let Err(error) = made {
                    tracing::error!(task_id = %task.id, %error, "the push notification config sent with a task could not be kept; the task runs without it");
                }
            }
            if matches!(op, Op::Stream) {
                return Ok(Answer::Stream(Box::new(task), 1, false));
            }
            answer_send(broker, task, live, d, params).await
        }
        Op::Get => {
            let t = own_task(gw, at, &task_id(params)?).await?;
            let history =
                int(field(params, "historyLength", "history_length")).map(|n| n.max(0) as usize);
            let shape = Shape {
                history,
                artifacts: true,
            };
            Ok(Answer::Value(render(broker, &t, d, shape).await?))
        }
        Op::List => Ok(Answer::Value(
            super::list::list(broker, (&session.name, at.owner), params, d).await?,
        )),
        Op::Cancel => {
            let id = task_id(params)?;
            let t = own_task(gw, at, &id).await?;
            if t.state.is_terminal() {
                return Err(A2aError::NotCancelable(format!(
                    "task '{id}' has already ended ({})",
                    t.state.as_str()
                )));
            }
            broker.cancel(&id).await?;
            let (t, _) = wait_until_ended(broker, t, false, None).await;
            Ok(Answer::Value(
                render(broker, &t, d, Shape::default()).await?,
            ))
        }
        Op::Subscribe => {
            let id = task_id(params)?;
            // Where the log stands is read before the snapshot: an event in
            // between is sent again (in order) rather than missed.
            let after = broker.events(&id, 0).await?.last().map_or(0, |e| e.seq);
            let t = own_task(gw, at, &id).await?;
            if t.state.is_terminal() {
                return Err(A2aError::Unsupported(format!(
                    "task '{id}' has ended ({}); GetTask returns its result",
                    t.state.as_str()
                )));
            }
            Ok(Answer::Stream(Box::new(t), after, true))
        }
    }
}

/// Whether SendMessage answers at once rather than when the task has ended
/// or needs input.
fn returns_now(d: Dialect, params: &Value) -> bool {
    let config = params.get("configuration");
    match d {
        Dialect::V10 => config
            .and_then(|c| field(c, "returnImmediately", "return_immediately"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        Dialect::V03 => !config
            .and_then(|c| c.get("blocking"))
            .and_then(Value::as_bool)
            .unwrap_or(true),
    }
}

/// SendMessage's answer: the task now, or once it has ended or needs input
/// (unless the client asked to return immediately).
async fn answer_send(
    broker: &Arc<Broker>,
    task: A2aTask,
    live: Option<crate::tasks::Subscription>,
    d: Dialect,
    params: &Value,
) -> Result<Answer, A2aError> {
    let config = params.get("configuration");
    let (task, log) = if returns_now(d, params) {
        (task, None)
    } else {
        wait_until_ended(broker, task, true, live).await
    };
    let history = config
        .and_then(|c| int(field(c, "historyLength", "history_length")))
        .map(|n| n.max(0) as usize);
    let shape = Shape {
        history,
        artifacts: true,
    };
    let log = match log {
        Some(log) => log,
        None => broker.events(&task.id, 0).await?,
    };
    if task.state == TaskState::Completed
        && let Some(said) = wire::reply(&log)
    {
        return Ok(Answer::Value(wire::reply_result(&task, said, d)));
    }
    let v = wire::task_with_log(&task, &log, d, shape);
    Ok(Answer::Value(match d {
        Dialect::V10 => json!({ "task": v }),
        Dialect::V03 => v,
    }))
}

/// A task with its artifacts and full history (input requests and answers)
/// as its log has them.
async fn render(broker: &Broker, t: &A2aTask, d: Dialect, shape: Shape) -> Result<Value, A2aError> {
    let log = broker.events(&t.id, 0).await?;
    Ok(wire::task_with_log(t, &log, d, shape))
}

/// A message on a task waiting for input: the answer to its request.
async fn resume(
    broker: &Arc<Broker>,
    t: A2aTask,
    m: &wire::InMessage,
    d: Dialect,
    op: Op,
    params: &Value,
) -> Result<Answer, A2aError> {
    if m.context_id.as_ref().is_some_and(|c| *c != t.context_id) {
        return Err(A2aError::InvalidParams(format!(
            "task '{}' belongs to context '{}', not '{}'",
            t.id,
            t.context_id,
            m.context_id.as_deref().unwrap_or_default()
        )));
    }
    // Where the log stands before the answer: a stream replays what follows.
    let after = broker.events(&t.id, 0).await?.last().map_or(0, |e| e.seq);
    let task = broker
        .resume(
            &t.id,
            &m.message_id,
            (
                &m.text,
                m.canonical["parts"].as_array().map_or(&[], Vec::as_slice),
            ),
        )
        .await
        .map_err(|e| match e {
            ResumeError::Log(s) => A2aError::from(s),
            other => A2aError::Unsupported(other.to_string()),
        })?;
    tracing::info!(task_id = %task.id, "A2A task resumed with the client's input");
    if matches!(op, Op::Stream) {
        return Ok(Answer::Stream(Box::new(task), after, false));
    }
    answer_send(broker, task, None, d, params).await
}
