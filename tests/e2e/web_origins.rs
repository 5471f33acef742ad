//! A web page open in the operator's browser cannot drive a loopback agent:
//! the gateway refuses a request that carries an `Origin` it does not list
//! (`a2a.cors.allow_origins`), a POST that is not JSON (what a page can
//! send without a preflight), and, on a loopback address, a `Host` that
//! is not loopback (DNS rebinding). Raw HTTP first, then a real headless
//! Chromium page on another origin: its fetch fails and makes no task,
//! while the same fetch from a listed origin succeeds (the control).

use std::time::Duration;

use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, message};
use crate::dashboard::{Driver, browser};
use crate::harness::{Daemon, TEST_CONFIG, conformance, free_port, request};

fn send(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
           "params": {"message": message(id, "hello")}})
    .to_string()
}

/// The message ids in the route's tasks' histories.
async fn task_messages(addr: &str) -> Vec<String> {
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {"pageSize": 100, "historyLength": 10}});
    let (status, _, body) = http(addr, "POST", "/a2a/web", &[V1, JSON], &list.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    v["result"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .flat_map(|t| t["history"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["messageId"].as_str().map(str::to_string))
        .collect()
}

/// A page server: answers every request with a small HTML page (the
/// other origin a browser tab is on).
async fn page_server(port: u16) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("page server");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let page = "<!doctype html><title>elsewhere</title><p>a page elsewhere</p>";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_cannot_drive_a_loopback_agent_and_a_listed_origin_can() {
    let (evil_port, app_port) = (free_port(), free_port());
    let app = format!("http://127.0.0.1:{app_port}");
    let config = format!("{TEST_CONFIG}a2a: {{cors: {{allow_origins: [\"{app}\"]}}}}\n");
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "web",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");

    // An Origin not listed: refused, whatever else the request has right.
    let evil = ("Origin", "http://evil.example");
    let (status, _, body) = http(&addr, "POST", "/a2a/web", &[V1, JSON, evil], &send("o-1")).await;
    assert_eq!(status, 403, "{body}");
    let (status, _, _) = http(&addr, "GET", "/a2a/web/tasks", &[V1, evil], "").await;
    assert_eq!(status, 403, "reads too");
    let preflight = [
        evil,
        ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "content-type"),
    ];
    let (status, head, _) = http(&addr, "OPTIONS", "/a2a/web", &preflight, "").await;
    assert_eq!(status, 403, "{head}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    // The control: the listed origin is answered, with CORS headers.
    let listed = ("Origin", app.as_str());
    let (status, head, body) =
        http(&addr, "POST", "/a2a/web", &[V1, JSON, listed], &send("o-2")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        head.contains(&format!("access-control-allow-origin: {app}")),
        "{head}"
    );
    let preflight = [
        listed,
        ("Access-Control-Request-Method", "POST"),
        (
            "Access-Control-Request-Headers",
            "content-type, a2a-version",
        ),
    ];
    let (status, head, _) = http(&addr, "OPTIONS", "/a2a/web", &preflight, "").await;
    assert_eq!(status, 204, "{head}");
    assert!(head.contains("access-control-allow-methods"), "{head}");

    // What a page sends without a preflight: no Content-Type or a simple
    // one. Refused (415); the control: JSON.
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut headers = vec![V1];
        headers.extend(ct.map(|c| ("Content-Type", c)));
        let (status, _, body) = http(&addr, "POST", "/a2a/web", &headers, &send("c-1")).await;
        assert_eq!(status, 415, "{ct:?}: {body}");
        // In the binding's shape: JSON-RPC's ContentTypeNotSupportedError.
        let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON-RPC error");
        assert_eq!(v["error"]["code"], -32005, "{body}");
    }
    // HTTP+JSON's: google.rpc.Status with the HTTP code.
    let (status, _, body) = http(
        &addr,
        "POST",
        "/a2a/web/message:send",
        &[V1, ("Content-Type", "text/plain")],
        "{}",
    )
    .await;
    assert_eq!(status, 415, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("an error");
    assert_eq!(v["error"]["code"], 415, "{body}");
    let (status, _, _) = http(
        &addr,
        "POST",
        "/a2a/web",
        &[V1, ("Content-Type", "application/a2a+json")],
        &send("c-2"),
    )
    .await;
    assert_eq!(status, 200, "the control: A2A's JSON type");

    // DNS rebinding: a page on attacker.example resolved to 127.0.0.1 names
    // its own host. Refused; the control: a loopback name.
    let port = addr.rsplit(':').next().expect("port");
    let foreign = format!("attacker.example:{port}");
    let (status, _, body) = raw(&addr, &foreign, &send("h-1")).await;
    assert_eq!(status, 421, "{body}");
    let (status, _, body) = raw(&addr, &format!("localhost:{port}"), &send("h-2")).await;
    assert_eq!(status, 200, "the control: {body}");

    let made = task_messages(&addr).await;
    for refused in ["o-1", "c-1", "h-1"] {
        assert!(
            !made.iter().any(|m| m == refused),
            "{refused} made a task: {made:?}"
        );
    }
    for control in ["o-2", "c-2", "h-2"] {
        assert!(
            made.iter().any(|m| m == control),
            "{control} missing: {made:?}"
        );
    }

    // A real browser, on a page of another origin.
    let Some((chromedriver, chromium)) = browser() else {
        assert!(
            std::env::var_os("ROOST_REQUIRE_BROWSER").is_none(),
            "no chromium/chromedriver: install them with scripts/browser"
        );
        eprintln!("browser part skipped: no headless Chromium (scripts/browser installs it)");
        return;
    };
    page_server(evil_port).await;
    page_server(app_port).await;
    let driver = Driver::start(&chromedriver, &chromium).await;
    let fetch = |mode: &str, ct: &str, id: &str| {
        format!(
            "return fetch('http://{addr}/a2a/web', {{method: 'POST', mode: '{mode}', \
             headers: {{'Content-Type': '{ct}', 'A2A-Version': '1.0'}}, body: '{}'}})\
             .then(r => r.type === 'opaque' ? 'opaque' : r.text()).catch(e => 'failed: ' + e)",
            send(id)
        )
    };
    // The attack: a no-cors POST (no preflight, the answer unreadable) and
    // a CORS one, from a page on another origin.
    driver.go(&format!("http://127.0.0.1:{evil_port}/")).await;
    let no_cors = driver
        .script(&fetch("no-cors", "text/plain", "b-evil-1"))
        .await;
    let cors = driver
        .script(&fetch("cors", "application/json", "b-evil-2"))
        .await;
    assert!(
        cors.as_str().is_some_and(|s| s.starts_with("failed")),
        "the CORS fetch fails: {cors}"
    );
    // The control: the listed origin's page reads the answer.
    driver.go(&format!("{app}/")).await;
    let answer = driver
        .script(&fetch("cors", "application/json", "b-app-1"))
        .await;
    driver.quit().await;
    let answer: Value = serde_json::from_str(answer.as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the listed origin reads its answer ({e}): {answer}"));
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
    // Whatever the no-cors fetch resolved to, it made no task.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let made = task_messages(&addr).await;
    assert!(
        !made.iter().any(|m| m.starts_with("b-evil")),
        "a page elsewhere made a task ({no_cors}): {made:?}"
    );
    assert!(made.iter().any(|m| m == "b-app-1"), "{made:?}");
    assert!(
        daemon
            .log()
            .contains("a2a.cors.allow_origins does not list")
    );
}

/// A POST with the given `Host` header (what a rebinding page sends).
async fn raw(addr: &str, host: &str, body: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /a2a/web HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nA2A-Version: 1.0\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), rest.to_string())
}
