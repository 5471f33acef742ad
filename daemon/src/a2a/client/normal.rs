//! What roostd says to a peer and reads back, in the version its interface
//! speaks: a call's message and configuration written from 1.0's ProtoJSON
//! into 0.3's (JSON-RPC's `kind` shapes, or `a2a.v1` ProtoJSON), and every
//! answer and event read into 1.0's `StreamResponse` shape, so one follower
//! reads all six binding-and-version pairs.

use serde_json::{Value, json};

use super::super::v03_proto;
use super::super::wire;

/// 1.0's `SendMessageRequest` for a message: `returnImmediately` when only
/// the task as taken is wanted, and the push config.
pub fn send_v10(message: &Value, accepted_only: bool, push: Option<&Value>) -> Value {
    let mut configuration = json!({ "returnImmediately": accepted_only });
    if let Some(push) = push {
        configuration["taskPushNotificationConfig"] = push.clone();
    }
    json!({ "message": message, "configuration": configuration })
}

/// 0.3 JSON-RPC's `MessageSendParams` for a 1.0 message.
pub fn send_v03_rpc(message: &Value, accepted_only: bool, push: Option<&Value>) -> Value {
    let mut m = message.clone();
    m["kind"] = json!("message");
    m["role"] = json!("user");
    if let Some(Value::Array(parts)) = m.get_mut("parts") {
        for p in parts.iter_mut() {
            *p = wire::part_v03(p);
        }
    }
    let mut configuration = json!({ "blocking": !accepted_only });
    if let Some(push) = push {
        configuration["pushNotificationConfig"] = push.clone();
    }
    json!({ "message": m, "configuration": configuration })
}

/// 0.3 ProtoJSON's `SendMessageRequest` (HTTP+JSON under `/v1/`, gRPC).
pub fn send_v03_proto(message: &Value, accepted_only: bool, push: Option<&Value>) -> Value {
    let mut m = message.clone();
    v03_proto::message_out(&mut m);
    let mut configuration = json!({ "blocking": !accepted_only });
    if let Some(push) = push {
        configuration["pushNotification"] = push.clone();
    }
    json!({ "message": m, "configuration": configuration })
}

/// A 1.0 answer (`SendMessageResponse`, a stream event, or a `Task` when
/// `task` says so) as a `StreamResponse`.
pub fn from_v10(v: Value, task: bool) -> Value {
    if task { json!({ "task": v }) } else { v }
}

/// A 0.3 ProtoJSON answer (HTTP+JSON under `/v1/`, gRPC's `a2a.v1`) as
/// 1.0's `StreamResponse`.
pub fn from_v03_proto(v: Value, task: bool) -> Value {
    from_v10(v03_proto::answer_to_v10(v, task), task)
}

/// A 0.3 JSON-RPC result (a task, message or update with its `kind`) as
/// 1.0's `StreamResponse`.
pub fn from_v03_rpc(r: Value) -> Value {
    match r["kind"].as_str() {
        Some("task") => json!({ "task": task_v03(&r) }),
        Some("message") => json!({ "message": message_v03(&r) }),
        Some("status-update") => json!({ "statusUpdate": {
            "taskId": r["taskId"], "contextId": r["contextId"], "status": status_v03(&r["status"]),
        }}),
        Some("artifact-update") => {
            let mut u = json!({
                "taskId": r["taskId"], "contextId": r["contextId"],
                "artifact": artifact_v03(&r["artifact"]),
            });
            for key in ["append", "lastChunk"] {
                if r[key].as_bool() == Some(true) {
                    u[key] = json!(true);
                }
            }
            json!({ "artifactUpdate": u })
        }
        _ => json!({}),
    }
}

fn parts_v03(parts: &Value) -> Value {
    Value::Array(
        parts
            .as_array()
            .map(|ps| ps.iter().filter_map(wire::normal_part).collect())
            .unwrap_or_default(),
    )
}

fn message_v03(m: &Value) -> Value {
    json!({
        "messageId": m["messageId"], "contextId": m["contextId"], "taskId": m["taskId"],
        "role": if m["role"] == "user" { "ROLE_USER" } else { "ROLE_AGENT" },
        "parts": parts_v03(&m["parts"]),
    })
}

fn status_v03(s: &Value) -> Value {
    let state = s["state"].as_str().unwrap_or_default();
    let mut status = json!({
        "state": format!("TASK_STATE_{}", state.to_ascii_uppercase().replace('-', "_")),
    });
    if s["message"].is_object() {
        status["message"] = message_v03(&s["message"]);
    }
    status
}

fn artifact_v03(a: &Value) -> Value {
    json!({ "artifactId": a["artifactId"], "parts": parts_v03(&a["parts"]) })
}

fn task_v03(t: &Value) -> Value {
    let artifacts: Vec<Value> = t["artifacts"]
        .as_array()
        .map(|a| a.iter().map(artifact_v03).collect())
        .unwrap_or_default();
    json!({
        "id": t["id"], "contextId": t["contextId"], "status": status_v03(&t["status"]),
        "artifacts": artifacts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_written_in_each_version_and_answers_read_back_as_1_0() {
        let m = json!({"messageId": "m", "role": "ROLE_USER", "parts": [
            {"text": "hi"}, {"raw": "AAE=", "mediaType": "application/x-protobuf", "filename": "i.bin"}]});
        let rpc = send_v03_rpc(&m, false, None);
        assert_eq!(rpc["message"]["role"], "user");
        assert_eq!(
            rpc["message"]["parts"][1],
            json!({"kind": "file", "file": {"bytes": "AAE=", "mimeType": "application/x-protobuf", "name": "i.bin"}})
        );
        assert_eq!(rpc["configuration"]["blocking"], json!(true));
        let proto = send_v03_proto(&m, true, Some(&json!({"url": "http://h/n"})));
        assert_eq!(
            proto["message"]["content"][1],
            // 0.3's reference SDK reads `fileWithBytes` as base64 text.
            json!({"file": {"fileWithBytes": "QUFFPQ==", "mimeType": "application/x-protobuf", "name": "i.bin"}})
        );
        assert_eq!(proto["configuration"]["blocking"], json!(false));
        assert_eq!(
            proto["configuration"]["pushNotification"]["url"],
            "http://h/n"
        );

        let ended = from_v03_rpc(
            json!({"kind": "status-update", "taskId": "t", "contextId": "c",
            "status": {"state": "input-required", "message": {"kind": "message", "role": "agent",
            "parts": [{"kind": "text", "text": "which?"}]}}}),
        );
        assert_eq!(
            ended["statusUpdate"]["status"]["state"],
            "TASK_STATE_INPUT_REQUIRED"
        );
        assert_eq!(
            ended["statusUpdate"]["status"]["message"]["parts"],
            json!([{"text": "which?"}])
        );
        let task = from_v03_proto(
            json!({"id": "t", "status": {"state": "TASK_STATE_CANCELLED"},
                   "artifacts": [{"artifactId": "a", "parts": [{"data": {"data": {"k": 1}}}]}]}),
            true,
        );
        assert_eq!(task["task"]["status"]["state"], "TASK_STATE_CANCELED");
        assert_eq!(
            task["task"]["artifacts"][0]["parts"],
            json!([{"data": {"k": 1}}])
        );
    }
}
