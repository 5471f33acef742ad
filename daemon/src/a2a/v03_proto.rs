//! A2A 0.3's ProtoJSON (`a2a.v1`, the messages of 0.3's HTTP+JSON binding
//! under `/v1/…`) read into 1.0's and written back: a request's body in, an
//! answer or stream event out. One translation, so every 0.3 operation is
//! the 1.0 operation it names (`rpc::run`), not a second implementation.
//!
//! What differs: a message's parts are its `content`; a file part is
//! `{file: {fileWithBytes | fileWithUri, mimeType, name}}` and a data part
//! `{data: {data: {…}}}`; the canceled state is `TASK_STATE_CANCELLED`; a
//! status update says whether it is `final`; `SendMessageConfiguration`
//! has `blocking` (false when absent, as in proto) and `pushNotification`;
//! a push config is `{name: "tasks/T/pushNotificationConfigs/C",
//! pushNotificationConfig: {…}}`.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::envelope::Op;

/// A 0.3 `SendMessageRequest` body as 1.0's.
pub fn send_request_in(mut body: Value) -> Value {
    if let Some(m) = body.get_mut("message") {
        message_in(m);
    }
    if let Some(c) = body.get_mut("configuration").and_then(Value::as_object_mut) {
        // Proto's default: a request that does not say `blocking: true`
        // returns at once (what 0.3's reference server does too).
        let blocking = c
            .remove("blocking")
            .and_then(|b| b.as_bool())
            .unwrap_or(false);
        c.insert("returnImmediately".into(), json!(!blocking));
        if let Some(push) = c.remove("pushNotification") {
            c.insert("pushNotificationConfig".into(), push);
        }
    }
    body
}

/// A 0.3 gRPC request of `op` (its ProtoJSON) as the params of 1.0's
/// operation: resource names (`tasks/T`, `tasks/T/pushNotificationConfigs/C`)
/// become the ids 1.0 names.
pub fn grpc_request_in(op: Op, v: Value) -> Value {
    let name = |key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let task_of = |resource: &str| {
        resource
            .strip_prefix("tasks/")
            .map(|rest| rest.split('/').next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    match op {
        Op::Send | Op::Stream => send_request_in(v),
        Op::Get => {
            let mut p = json!({ "id": task_of(&name("name")) });
            if let Some(n) = v.get("historyLength") {
                p["historyLength"] = n.clone();
            }
            p
        }
        Op::Cancel | Op::Subscribe => json!({ "id": task_of(&name("name")) }),
        Op::PushCreate => {
            let task = task_of(&name("parent"));
            let mut p = push_create_in(v);
            p["taskId"] = json!(task);
            p
        }
        Op::PushGet | Op::PushDelete => {
            let full = name("name");
            let id = full
                .split_once("/pushNotificationConfigs/")
                .map(|(_, id)| id.to_string())
                .unwrap_or_default();
            json!({ "taskId": task_of(&full), "id": id })
        }
        Op::PushList => json!({ "taskId": task_of(&name("parent")) }),
        Op::List | Op::ExtendedCard => json!({}),
    }
}

/// A 0.3 `CreateTaskPushNotificationConfigRequest` body (`{parent,
/// configId, config: {name, pushNotificationConfig}}`) as the config
/// 1.0's create reads (`{pushNotificationConfig}`, its id `configId` unless
/// it names its own).
pub fn push_create_in(body: Value) -> Value {
    let config_id = body.get("configId").cloned();
    // The proto's HTTP mapping makes `config` the body; a client that puts
    // the whole request there is read too.
    let mut inner = body
        .get("config")
        .and_then(|c| c.get("pushNotificationConfig"))
        .or_else(|| body.get("pushNotificationConfig"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let (Some(inner), Some(id)) = (inner.as_object_mut(), config_id) {
        inner.entry("id").or_insert(id);
    }
    json!({ "pushNotificationConfig": inner })
}

fn message_in(m: &mut Value) {
    let Some(obj) = m.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(content)) = obj.remove("content") {
        let parts = content.into_iter().map(part_in).collect();
        obj.entry("parts").or_insert(Value::Array(parts));
    }
}

fn part_in(p: Value) -> Value {
    let Value::Object(mut p) = p else {
        return p;
    };
    let mut out = Map::new();
    if let Some(Value::Object(mut file)) = p.remove("file") {
        for (from, to) in [
            ("fileWithBytes", "raw"),
            ("fileWithUri", "url"),
            ("mimeType", "mediaType"),
            ("name", "filename"),
        ] {
            if let Some(v) = file.remove(from) {
                let v = if from == "fileWithBytes" {
                    sdk_bytes_in(v)
                } else {
                    v
                };
                out.insert(to.into(), v);
            }
        }
    } else if let Some(data) = p.remove("data") {
        // `DataPart { Struct data }`.
        let inner = match data {
            Value::Object(mut d) if d.len() == 1 && d.contains_key("data") => {
                d.remove("data").unwrap_or_default()
            }
            other => other,
        };
        out.insert("data".into(), inner);
    } else if let Some(text) = p.remove("text") {
        out.insert("text".into(), text);
    }
    if let Some(meta) = p.remove("metadata") {
        out.insert("metadata".into(), meta);
    }
    Value::Object(out)
}

/// A 1.0 answer of `op` (its ProtoJSON) as 0.3's.
pub fn answer_out(op: Op, mut v: Value) -> Value {
    match op {
        Op::Send => {
            if let Some(t) = v.get_mut("task") {
                task_out(t);
            }
            if let Some(m) = v.get_mut("message") {
                message_out(m);
            }
            v
        }
        Op::Get | Op::Cancel => {
            task_out(&mut v);
            v
        }
        Op::PushCreate | Op::PushGet => push_out(v),
        Op::PushList => {
            if let Some(Value::Array(configs)) = v.get_mut("configs") {
                for c in configs.iter_mut() {
                    *c = push_out(std::mem::take(c));
                }
            }
            v
        }
        Op::Stream | Op::Subscribe => event_out(v),
        Op::List | Op::ExtendedCard | Op::PushDelete => v,
    }
}

/// A 1.0 `StreamResponse` as 0.3's.
pub fn event_out(mut v: Value) -> Value {
    if let Some(t) = v.get_mut("task") {
        task_out(t);
    }
    if let Some(m) = v.get_mut("message") {
        message_out(m);
    }
    if let Some(u) = v.get_mut("statusUpdate") {
        if let Some(s) = u.get_mut("status") {
            status_out(s);
        }
        let state = u["status"]["state"].as_str().unwrap_or_default();
        // The last event of a stream: the task has ended or waits for input.
        let last = matches!(
            state,
            "TASK_STATE_COMPLETED"
                | "TASK_STATE_FAILED"
                | "TASK_STATE_CANCELLED"
                | "TASK_STATE_REJECTED"
                | "TASK_STATE_INPUT_REQUIRED"
                | "TASK_STATE_AUTH_REQUIRED"
        );
        if let Some(u) = u.as_object_mut() {
            u.insert("final".into(), json!(last));
        }
    }
    if let Some(a) = v
        .get_mut("artifactUpdate")
        .and_then(|u| u.get_mut("artifact"))
    {
        artifact_out(a);
    }
    v
}

fn task_out(t: &mut Value) {
    if let Some(s) = t.get_mut("status") {
        status_out(s);
    }
    if let Some(Value::Array(history)) = t.get_mut("history") {
        history.iter_mut().for_each(message_out);
    }
    if let Some(Value::Array(artifacts)) = t.get_mut("artifacts") {
        artifacts.iter_mut().for_each(artifact_out);
    }
}

fn status_out(s: &mut Value) {
    if s["state"] == "TASK_STATE_CANCELED" {
        s["state"] = json!("TASK_STATE_CANCELLED");
    }
    if let Some(m) = s.get_mut("message") {
        message_out(m);
    }
}

/// A 0.3 answer (a `Task` when `task`, else a `SendMessageResponse` or
/// `StreamResponse`) as 1.0's: what a peer said, read.
pub fn answer_to_v10(mut v: Value, task: bool) -> Value {
    if task {
        task_in(&mut v);
        return v;
    }
    for key in ["task", "message", "statusUpdate", "artifactUpdate"] {
        let Some(inner) = v.get_mut(key) else {
            continue;
        };
        match key {
            "task" => task_in(inner),
            "message" => message_in(inner),
            "statusUpdate" => {
                if let Some(s) = inner.get_mut("status") {
                    status_in(s);
                }
            }
            _ => {
                if let Some(a) = inner.get_mut("artifact") {
                    artifact_in(a);
                }
            }
        }
    }
    v
}

fn task_in(t: &mut Value) {
    if let Some(s) = t.get_mut("status") {
        status_in(s);
    }
    if let Some(Value::Array(history)) = t.get_mut("history") {
        history.iter_mut().for_each(message_in);
    }
    if let Some(Value::Array(artifacts)) = t.get_mut("artifacts") {
        artifacts.iter_mut().for_each(artifact_in);
    }
}

fn status_in(s: &mut Value) {
    if s.get("state").and_then(Value::as_str) == Some("TASK_STATE_CANCELLED") {
        s["state"] = json!("TASK_STATE_CANCELED");
    }
    if let Some(m) = s.get_mut("message") {
        message_in(m);
    }
}

fn artifact_in(a: &mut Value) {
    if let Some(Value::Array(parts)) = a.get_mut("parts") {
        for p in parts.iter_mut() {
            *p = part_in(std::mem::take(p));
        }
    }
}

/// A 1.0 message as 0.3's (`content`, 0.3's parts): an answer's, or a
/// call's to a peer.
pub fn message_out(m: &mut Value) {
    let Some(obj) = m.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(parts)) = obj.remove("parts") {
        let content = parts.into_iter().map(part_out).collect();
        obj.insert("content".into(), Value::Array(content));
    }
}

fn artifact_out(a: &mut Value) {
    if let Some(Value::Array(parts)) = a.get_mut("parts") {
        for p in parts.iter_mut() {
            *p = part_out(std::mem::take(p));
        }
    }
}

fn part_out(p: Value) -> Value {
    let Value::Object(mut p) = p else {
        return p;
    };
    let mut out = Map::new();
    if let Some(text) = p.remove("text") {
        out.insert("text".into(), text);
    } else if let Some(data) = p.remove("data") {
        // A Struct holds an object; anything else is wrapped in one.
        let data = if data.is_object() {
            data
        } else {
            json!({ "value": data })
        };
        out.insert("data".into(), json!({ "data": data }));
    } else {
        let mut file = Map::new();
        for (from, to) in [
            ("raw", "fileWithBytes"),
            ("url", "fileWithUri"),
            ("mediaType", "mimeType"),
            ("filename", "name"),
        ] {
            if let Some(v) = p.remove(from) {
                let v = if from == "raw" { sdk_bytes_out(v) } else { v };
                file.insert(to.into(), v);
            }
        }
        out.insert("file".into(), Value::Object(file));
    }
    if let Some(meta) = p.remove("metadata") {
        out.insert("metadata".into(), meta);
    }
    Value::Object(out)
}

/// 0.3's reference SDK (a2a-sdk 0.3.x) keeps a file's bytes as base64 text
/// and puts that text, not the bytes, in the proto's `file_with_bytes`: on
/// its ProtoJSON wire the bytes are base64 twice. A file's `fileWithBytes`
/// is read as the SDK writes it — decoded once, it is the base64 of the
/// file — and, from a writer that sent the bytes themselves (decoded once,
/// not base64 text), as those bytes.
fn sdk_bytes_in(v: Value) -> Value {
    let Some(once) = v.as_str().and_then(|s| B64.decode(s).ok()) else {
        return v;
    };
    let base64_text = !once.is_empty()
        && once.len() % 4 == 0
        && once
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        && B64.decode(&once).is_ok();
    if base64_text {
        Value::String(String::from_utf8_lossy(&once).into_owned())
    } else {
        Value::String(B64.encode(once))
    }
}

/// A file's base64 bytes as 0.3's reference SDK reads `fileWithBytes`: the
/// base64 text, base64 again ([`sdk_bytes_in`]).
fn sdk_bytes_out(v: Value) -> Value {
    match v.as_str() {
        Some(text) => Value::String(B64.encode(text.as_bytes())),
        None => v,
    }
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn push_out(c: Value) -> Value {
    let task = c["taskId"].as_str().unwrap_or_default().to_string();
    let id = c["id"].as_str().unwrap_or_default().to_string();
    let mut inner = c;
    if let Some(obj) = inner.as_object_mut() {
        obj.remove("taskId");
        obj.remove("tenant");
        // 0.3 names its schemes in a list.
        if let Some(auth) = obj.get_mut("authentication").and_then(Value::as_object_mut)
            && let Some(scheme) = auth.remove("scheme")
        {
            auth.insert("schemes".into(), json!([scheme]));
        }
    }
    json!({
        "name": format!("tasks/{task}/pushNotificationConfigs/{id}"),
        "pushNotificationConfig": inner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_0_3_send_reads_as_1_0_and_its_task_writes_back_as_0_3() {
        let sent = json!({
            "message": {"messageId": "m", "role": "ROLE_USER", "content": [
                {"text": "hi"},
                {"file": {"fileWithBytes": "AAE=", "mimeType": "application/x-protobuf",
                          "name": "instruction.bin"}},
                {"data": {"data": {"k": 1}}, "metadata": {"x": "y"}},
            ]},
            "configuration": {"blocking": true, "pushNotification": {"url": "http://h/n"}},
        });
        let read = send_request_in(sent);
        assert_eq!(
            read["message"]["parts"],
            json!([
                {"text": "hi"},
                {"raw": "AAE=", "mediaType": "application/x-protobuf", "filename": "instruction.bin"},
                {"data": {"k": 1}, "metadata": {"x": "y"}},
            ])
        );
        assert_eq!(read["configuration"]["returnImmediately"], json!(false));
        assert_eq!(
            read["configuration"]["pushNotificationConfig"]["url"],
            "http://h/n"
        );
        // Proto's default for an absent `blocking` is false.
        let absent = send_request_in(json!({"message": {}, "configuration": {}}));
        assert_eq!(absent["configuration"]["returnImmediately"], json!(true));

        let answer = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_CANCELED",
            "message": {"role": "ROLE_AGENT", "parts": [{"url": "http://x", "filename": "f"}]}},
            "artifacts": [{"artifactId": "a", "parts": [{"data": [1, 2]}]}],
            "history": [{"role": "ROLE_USER", "parts": [{"text": "hi"}]}]}});
        let out = answer_out(Op::Send, answer);
        assert_eq!(out["task"]["status"]["state"], "TASK_STATE_CANCELLED");
        assert_eq!(
            out["task"]["status"]["message"]["content"],
            json!([{"file": {"fileWithUri": "http://x", "name": "f"}}])
        );
        assert_eq!(
            out["task"]["artifacts"][0]["parts"],
            json!([{"data": {"data": {"value": [1, 2]}}}])
        );
        assert_eq!(
            out["task"]["history"][0]["content"],
            json!([{"text": "hi"}])
        );
        assert!(out["task"]["history"][0].get("parts").is_none());
    }

    #[test]
    fn file_bytes_are_read_as_0_3s_sdk_writes_them_and_written_as_it_reads_them() {
        // The SDK's double base64 (`AAE=` as text, base64 again) and a
        // writer's single one read alike; written back as the SDK reads.
        for sent in ["QUFFPQ==", "AAE="] {
            let read = part_in(json!({"file": {"fileWithBytes": sent}}));
            assert_eq!(read["raw"], "AAE=", "{sent}");
        }
        assert_eq!(
            part_out(json!({"raw": "AAE="}))["file"]["fileWithBytes"],
            "QUFFPQ=="
        );
    }

    #[test]
    fn grpc_resource_names_become_the_ids_1_0_names() {
        assert_eq!(
            grpc_request_in(Op::Get, json!({"name": "tasks/t1", "historyLength": 3})),
            json!({"id": "t1", "historyLength": 3})
        );
        assert_eq!(
            grpc_request_in(Op::Subscribe, json!({"name": "tasks/t1"})),
            json!({"id": "t1"})
        );
        assert_eq!(
            grpc_request_in(
                Op::PushGet,
                json!({"name": "tasks/t1/pushNotificationConfigs/c1"})
            ),
            json!({"taskId": "t1", "id": "c1"})
        );
        assert_eq!(
            grpc_request_in(
                Op::PushCreate,
                json!({"parent": "tasks/t1", "configId": "c",
                "config": {"pushNotificationConfig": {"url": "http://h/n"}}})
            ),
            json!({"taskId": "t1", "pushNotificationConfig": {"url": "http://h/n", "id": "c"}})
        );
        // A name that is not a task's names none: the task is not found.
        assert_eq!(
            grpc_request_in(Op::Cancel, json!({"name": "../x"})),
            json!({"id": ""})
        );
    }

    #[test]
    fn a_status_update_says_final_and_a_push_config_has_its_name() {
        let ended =
            event_out(json!({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}}));
        assert_eq!(ended["statusUpdate"]["final"], json!(true));
        let working =
            event_out(json!({"statusUpdate": {"status": {"state": "TASK_STATE_WORKING"}}}));
        assert_eq!(working["statusUpdate"]["final"], json!(false));

        let made = push_create_in(json!({"parent": "tasks/t", "configId": "c",
            "config": {"pushNotificationConfig": {"url": "http://h/n"}}}));
        assert_eq!(
            made,
            json!({"pushNotificationConfig": {"url": "http://h/n", "id": "c"}})
        );
        let out = answer_out(
            Op::PushGet,
            json!({"taskId": "t", "id": "c", "url": "http://h/n",
                   "authentication": {"scheme": "Bearer", "credentials": "k"}}),
        );
        assert_eq!(
            out,
            json!({"name": "tasks/t/pushNotificationConfigs/c", "pushNotificationConfig": {
                "id": "c", "url": "http://h/n",
                "authentication": {"schemes": ["Bearer"], "credentials": "k"}}})
        );
    }
}
