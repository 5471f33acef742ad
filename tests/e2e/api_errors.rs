//! Control API errors: JSON `{"error": {"code", "message"}}` with the right status.

use hyper::{Method, StatusCode};
use serde_json::Value;

use crate::harness::Daemon;

async fn error_of(
    d: &Daemon,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> (StatusCode, Value) {
    let (status, bytes) = d.client.raw(method, path, body).await.expect("request");
    let json: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{path}: not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    assert!(json["error"]["code"].is_string(), "{json}");
    assert!(json["error"]["message"].is_string(), "{json}");
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_json_with_the_right_status() {
    let d = Daemon::start().await;
    let (status, json) = error_of(&d, Method::GET, "/v1/sessions/ses_nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json["error"]["code"], "not_found");

    let (status, _) = error_of(&d, Method::POST, "/v1/sessions/nobody/stop", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, json) = error_of(
        &d,
        Method::POST,
        "/v1/sessions",
        Some(b"{not json".to_vec()),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("invalid JSON")
    );

    let (status, json) = error_of(
        &d,
        Method::POST,
        "/v1/sessions",
        Some(br#"{"path": "/x", "colour": 1}"#.to_vec()),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("colour")
    );

    let big = format!(r#"{{"path": "/{}"}}"#, "a".repeat(100 * 1024));
    let (status, json) = error_of(&d, Method::POST, "/v1/sessions", Some(big.into_bytes())).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(json["error"]["code"], "body_too_large");

    let (status, _) = error_of(&d, Method::GET, "/v1/sessions?all=maybe", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, _) = error_of(&d, Method::GET, "/v2/whatever", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, body) = d
        .client
        .raw(Method::GET, "/metrics", None)
        .await
        .expect("metrics");
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body.to_vec()).expect("utf8");
    assert!(text.contains("# TYPE roost_live_sessions gauge"), "{text}");
    assert!(
        d.client.list(true).await.expect("list").is_empty(),
        "nothing created"
    );
}
