//! A route's own token holds however a client spells the route: every
//! binding (JSON-RPC, HTTP+JSON, gRPC `tenant`) checks the token against
//! the route the request is served from, percent escapes decoded once; a
//! segment that decodes to no route name is refused; and a caller without a
//! token learns nothing of which routes exist (the token is checked before
//! not-found). Each refusal has its control: the same request with the
//! route's own token succeeds.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, message};
use crate::a2a_grpc::{call, send_request};
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

const GLOBAL: &str = "global-token-0123456789abcdef";
const BILLING: &str = "billing-token-0123456789abcdef";

pub(crate) fn token_file(dir: &std::path::Path, name: &str, token: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, token).expect("token");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path.display().to_string()
}

/// A2A 1.0 JSON headers, with `auth` as the Authorization header unless it
/// is empty.
fn with(auth: &str) -> Vec<(&str, &str)> {
    let mut h = vec![V1, JSON];
    if !auth.is_empty() {
        h.push(("Authorization", auth));
    }
    h
}

fn send(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
           "params": {"message": message(id, "hello")}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_token_holds_however_the_route_is_spelled_in_every_binding() {
    let secrets = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "{TEST_CONFIG}a2a: {{token_file: \"{}\", routes: {{billing: {{token_file: \"{}\"}}}}}}\n",
        token_file(secrets.path(), "global", GLOBAL),
        token_file(secrets.path(), "billing", BILLING),
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    for name in ["billing", "other"] {
        let dir = conformance(
            daemon.root.path(),
            name,
            "{task_acceptance: queue, after_task: sleep}",
            "",
        );
        daemon.client.start(&request(&dir)).await.expect("start");
    }
    let global = &format!("Bearer {GLOBAL}");
    let own = &format!("Bearer {BILLING}");

    // JSON-RPC: the route spelled plainly and encoded, with and without a
    // trailing slash.
    let mut n = 0;
    for path in [
        "/a2a/billing",
        "/a2a/bill%69ng",
        "/a2a/bill%69ng/",
        "/a2a/%62%69%6c%6c%69%6e%67",
    ] {
        for auth in ["", global.as_str()] {
            n += 1;
            let (status, _, body) =
                http(&addr, "POST", path, &with(auth), &send(&format!("r-{n}"))).await;
            assert_eq!(status, 401, "{path} without its token: {body}");
        }
        n += 1;
        let (status, _, body) =
            http(&addr, "POST", path, &with(own), &send(&format!("r-{n}"))).await;
        assert_eq!(status, 200, "the control, {path} with its token: {body}");
        let v: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{v}"
        );
    }
    // Spellings that name no route are refused before any token is
    // looked at (even the right one does not open them).
    for path in [
        "/a2a/BILLING",
        "/a2a/Bill%69ng",
        "/a2a/billing%2F",
        "/a2a/billing%2fx",
        "/a2a/bill%zzng",
        "/a2a/%2e%2e",
    ] {
        let (status, _, body) = http(&addr, "POST", path, &with(own), &send("bad")).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("not a valid route"), "{path}: {body}");
    }

    // HTTP+JSON: a send and a list through the encoded route.
    let rest_send = json!({"message": message("rest-1", "hello")}).to_string();
    for (auth, expect) in [("", 401), (global.as_str(), 401), (own.as_str(), 200)] {
        let (status, _, body) = http(
            &addr,
            "POST",
            "/a2a/bill%69ng/message:send",
            &with(auth),
            &rest_send,
        )
        .await;
        assert_eq!(status, expect, "HTTP+JSON send, {auth:?}: {body}");
        let (status, _, body) = http(&addr, "GET", "/a2a/bill%69ng/tasks", &with(auth), "").await;
        assert_eq!(status, expect, "HTTP+JSON list, {auth:?}: {body}");
    }
    // The card stays public, however spelled; nothing else passes as a
    // card path.
    let (status, _, _) = http(
        &addr,
        "GET",
        "/a2a/bill%69ng/.well-known/agent-card.json",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "the card is public");
    let (status, _, _) = http(
        &addr,
        "POST",
        "/a2a/billing/.well-known/agent-card.json",
        &with(""),
        "{}",
    )
    .await;
    assert_eq!(status, 401, "only a GET of the card goes without a token");

    // gRPC: the tenant is the route, checked the same way.
    for (tenant, auth, status) in [
        ("billing", "", "16"),
        ("billing", global.as_str(), "16"),
        ("bill%69ng", global.as_str(), "16"),
        ("billing", own.as_str(), "0"),
        ("bill%69ng", own.as_str(), "0"),
        ("Billing", own.as_str(), "3"),
    ] {
        n += 1;
        let meta: Vec<(&str, &str)> = if auth.is_empty() {
            vec![]
        } else {
            vec![("authorization", auth)]
        };
        let a = call(
            &addr,
            "SendMessage",
            send_request(tenant, &format!("g-{n}")),
            &meta,
        )
        .await;
        assert_eq!(a.status, status, "gRPC tenant {tenant:?} {auth:?}: {a:?}");
    }
    // A caller without a token hears UNAUTHENTICATED for a route that
    // exists and for one that does not; the control: with roostd's token,
    // the unknown route is NOT_FOUND.
    for tenant in ["other", "nobody-here"] {
        let a = call(&addr, "SendMessage", send_request(tenant, "x"), &[]).await;
        assert_eq!(a.status, "16", "{tenant}: {a:?}");
    }
    let a = call(
        &addr,
        "SendMessage",
        send_request("nobody-here", "y"),
        &[("authorization", global.as_str())],
    )
    .await;
    assert_eq!(a.status, "5", "{a:?}");
    let a = call(
        &addr,
        "SendMessage",
        send_request("other", "z"),
        &[("authorization", global.as_str())],
    )
    .await;
    assert_eq!(
        a.status, "0",
        "the control: roostd's token opens 'other': {a:?}"
    );

    // Every refusal was logged, and no token reached the log.
    let log = daemon.log();
    assert!(
        log.contains("A2A request naming no valid route refused"),
        "{log}"
    );
    assert!(!log.contains(BILLING) && !log.contains(GLOBAL));
}

/// Within a route, callers are isolated: each client's token
/// (`a2a.routes.<name>.clients`) makes it the owner of its tasks and
/// contexts; another client's are "not found" to it (get, list, cancel,
/// subscribe, push configs), its contextId is not joined, and its messageId
/// is no retry of the other's. The controls: the owner does all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_within_a_route_see_and_continue_only_their_own_tasks() {
    let secrets = tempfile::tempdir().expect("tempdir");
    let (alice, bob) = ("alice-token-0123456789abcdef", "bob-token-0123456789abcdef");
    let config = format!(
        "{TEST_CONFIG}a2a: {{push: {{allow: [127.0.0.1]}}, routes: {{shared: {{clients: {{\
         alice: {{token_file: \"{}\"}}, bob: {{token_file: \"{}\"}}}}}}}}}}\n",
        token_file(secrets.path(), "alice", alice),
        token_file(secrets.path(), "bob", bob),
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "shared",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let (a, b) = (format!("Bearer {alice}"), format!("Bearer {bob}"));
    let call = |auth: &str, method: &str, params: Value| {
        let (addr, auth) = (addr.clone(), auth.to_string());
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        async move {
            let (status, _, body) = http(
                &addr,
                "POST",
                "/a2a/shared",
                &with(&auth),
                &body.to_string(),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            serde_json::from_str::<Value>(&body).expect("json")
        }
    };
    let msg = |id: &str, ctx: Option<&str>| {
        let mut m = message(id, "hello");
        if let Some(c) = ctx {
            m["contextId"] = json!(c);
        }
        json!({"message": m})
    };
    let sent = call(&a, "SendMessage", msg("m-alice", Some("ctx-alice"))).await;
    let task = sent["result"]["task"]["id"]
        .as_str()
        .expect("task")
        .to_string();
    let by_id = json!({"id": task});
    let not_found = |v: &Value| v["error"]["code"] == -32001;

    // Get, cancel, subscribe, push configs: not found to bob; alice's own.
    assert!(not_found(&call(&b, "GetTask", by_id.clone()).await));
    assert!(call(&a, "GetTask", by_id.clone()).await["result"]["id"] == task.as_str());
    assert!(not_found(&call(&b, "CancelTask", by_id.clone()).await));
    let push = json!({"taskId": task, "id": "p", "url": "http://127.0.0.1:9/hook"});
    assert!(not_found(
        &call(&b, "CreateTaskPushNotificationConfig", push.clone()).await
    ));
    let made = call(&a, "CreateTaskPushNotificationConfig", push).await;
    assert_eq!(made["result"]["id"], "p", "{made}");
    let listed = json!({"taskId": task});
    assert!(not_found(
        &call(&b, "ListTaskPushNotificationConfigs", listed.clone()).await
    ));
    let (status, _, body) = http(
        &addr,
        "POST",
        &format!("/a2a/shared/tasks/{task}:subscribe"),
        &with(&b),
        "",
    )
    .await;
    assert_eq!(status, 404, "bob cannot follow alice's task: {body}");

    // Lists: each sees its own.
    let ids = |v: Value| -> Vec<String> {
        v["result"]["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .filter_map(|t| t["id"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(ids(call(&a, "ListTasks", json!({})).await), [task.as_str()]);
    assert!(ids(call(&b, "ListTasks", json!({})).await).is_empty());

    // Contexts: bob cannot join alice's; alice continues it.
    let joined = call(&b, "SendMessage", msg("m-bob", Some("ctx-alice"))).await;
    assert_eq!(joined["error"]["code"], -32602, "{joined}");
    let again = call(&a, "SendMessage", msg("m-alice-2", Some("ctx-alice"))).await;
    assert_eq!(again["result"]["task"]["contextId"], "ctx-alice", "{again}");

    // Message ids: bob's m-alice is his own message; alice's retry is hers.
    let bobs = call(&b, "SendMessage", msg("m-alice", None)).await;
    let bobs = bobs["result"]["task"]["id"].as_str().expect("bob's task");
    assert_ne!(bobs, task, "not alice's task");
    let retry = call(&a, "SendMessage", msg("m-alice", Some("ctx-alice"))).await;
    assert_eq!(retry["result"]["task"]["id"], task.as_str(), "{retry}");
    assert_eq!(
        ids(call(&b, "ListTasks", json!({})).await),
        [bobs.to_string()]
    );
}
