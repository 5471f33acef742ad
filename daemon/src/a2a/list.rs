//! ListTasks: its parameters checked, a page read from the broker, and the
//! page tokens — opaque to clients, each naming the last task of the page
//! before (its last update and id), so the next page starts there however
//! deep in the list it is.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::envelope::{field, int};
use super::error::A2aError;
use super::wire::{self, Dialect, Shape};
use crate::tasks::{A2aTask, Broker, TaskFilter};

/// One page of the route's tasks this client may see.
pub(super) async fn list(
    broker: &Broker,
    (route, owner): (&str, &str),
    params: &Value,
    d: Dialect,
) -> Result<Value, A2aError> {
    let page_size = int(field(params, "pageSize", "page_size")).unwrap_or(50);
    if !(1..=100).contains(&page_size) {
        return Err(A2aError::InvalidParams(
            "pageSize must be between 1 and 100".into(),
        ));
    }
    let after = match field(params, "pageToken", "page_token").and_then(Value::as_str) {
        None | Some("") => None,
        Some(token) => Some(after(token).ok_or_else(|| {
            A2aError::InvalidParams(format!(
                "pageToken '{}' is not one this server issued",
                token.chars().take(64).collect::<String>()
            ))
        })?),
    };
    let state = match field(params, "status", "status").and_then(Value::as_str) {
        None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(
            wire::parse_state(s)
                .ok_or_else(|| A2aError::InvalidParams(format!("unknown task state '{s}'")))?,
        ),
    };
    let context = field(params, "contextId", "context_id").and_then(Value::as_str);
    let include_artifacts = field(params, "includeArtifacts", "include_artifacts")
        .map(|v| v.as_bool().unwrap_or_else(|| v.as_str() == Some("true")))
        .unwrap_or(false);
    let history = int(field(params, "historyLength", "history_length")).map(|n| n.max(0) as usize);
    // One more than the page: whether another page follows.
    let (mut tasks, total) = broker
        .tasks(&TaskFilter {
            route: Some(route),
            context_id: context,
            state,
            limit: page_size as u32 + 1,
            offset: 0,
            after: after.as_ref().map(|(u, id)| (u.as_str(), id.as_str())),
            owner: Some(owner),
        })
        .await?;
    let more = tasks.len() > page_size as usize;
    tasks.truncate(page_size as usize);
    let next = match tasks.last() {
        Some(last) if more => token(last),
        _ => String::new(),
    };
    let shape = Shape {
        history,
        artifacts: include_artifacts,
    };
    Ok(json!({
        "tasks": tasks.iter().map(|t| wire::task(t, d, shape)).collect::<Vec<_>>(),
        "nextPageToken": next,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

/// The token of the page after `last`.
fn token(last: &A2aTask) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}\n{}", last.updated_at, last.id))
}

/// The `(updated_at, id)` a token names; `None` for one this server did
/// not issue.
fn after(token: &str) -> Option<(String, String)> {
    if token.len() > 256 {
        return None;
    }
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(token).ok()?).ok()?;
    let (updated_at, id) = raw.split_once('\n')?;
    let shaped = humantime::parse_rfc3339(updated_at).is_ok()
        && !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    shaped.then(|| (updated_at.to_string(), id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_the_last_task_and_nothing_else_passes() {
        let raw = URL_SAFE_NO_PAD.encode("2026-12-04T16:31:11.123Z\ntsk_0123abcd");
        assert_eq!(
            after(&raw),
            Some(("2026-12-04T16:31:11.123Z".into(), "tsk_0123abcd".into()))
        );
        for bad in [
            "50".to_string(),
            "not base64!".into(),
            URL_SAFE_NO_PAD.encode("yesterday\ntsk_1"),
            URL_SAFE_NO_PAD.encode("2026-12-04T16:31:11.123Z\n"),
            URL_SAFE_NO_PAD.encode("2026-12-04T16:31:11.123Z\ntsk_1' OR 1=1"),
            URL_SAFE_NO_PAD.encode("2026-12-04T16:31:11.123Z"),
            "A".repeat(300),
        ] {
            assert_eq!(after(&bad), None, "{bad}");
        }
    }
}
