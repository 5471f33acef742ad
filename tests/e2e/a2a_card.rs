//! Agent cards from the manifest and per-route credentials, end to end: a
//! conformance capsule whose `murmur.yaml` has an `a2a:` section, behind
//! roostd's token and a token of its own, at a configured public URL; the
//! authenticated extended card on both bindings.

use std::path::Path;

use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, message};
use crate::a2a_script::sdk_python;
use crate::harness::{Daemon, TEST_CONFIG, conformance, repo, request};

const GLOBAL: &str = "global-a2a-token-0123456789";
const BILLING: &str = "billing-a2a-token-0123456789";

fn secret(dir: &Path, name: &str, token: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, token).expect("token");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path.display().to_string()
}

const CARD: &str = "description: Looks up invoices.
a2a:
  provider: {organization: Example Billing, url: 'https://billing.example'}
  documentation_url: https://billing.example/docs
  output_modes: [text/plain, application/json]
  skills:
    - id: lookup
      name: Invoice lookup
      description: Finds an invoice by its number.
      tags: [billing]
      examples: [Find invoice 42]
  extended_skills:
    - id: refund
      name: Refund
      description: Refunds an invoice (for authenticated clients).
      tags: [billing, admin]
";

pub(crate) async fn card(addr: &str, route: &str) -> Value {
    let path = format!("/a2a/{route}/.well-known/agent-card.json");
    let (status, _, body) = http(addr, "GET", &path, &[], "").await;
    assert_eq!(status, 200, "the card is public: {body}");
    serde_json::from_str(&body).expect("card json")
}

fn ids(skills: &Value) -> Vec<&str> {
    skills
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["id"].as_str()).collect())
        .unwrap_or_default()
}

/// A JSON-RPC request with an optional bearer token: (status, body).
async fn call(
    addr: &str,
    route: &str,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![V1, JSON];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    let (status, _, body) = http(addr, "POST", &format!("/a2a/{route}"), &headers, &body).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_says_what_the_manifest_says_and_each_route_takes_its_own_token() {
    let secrets = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "{TEST_CONFIG}a2a: {{token_file: \"{}\", public_url: \"https://agents.example/\", routes: {{billing: {{token_file: \"{}\"}}}}}}\n",
        secret(secrets.path(), "global", GLOBAL),
        secret(secrets.path(), "billing", BILLING),
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let lifecycle = "{task_acceptance: queue, after_task: sleep}";
    for (name, extra) in [("billing", CARD), ("plain", "")] {
        let dir = conformance(daemon.root.path(), name, lifecycle, extra);
        daemon.client.start(&request(&dir)).await.expect("start");
    }

    // The card: what the manifest says, at the public URL, and the token.
    let c = card(&addr, "billing").await;
    assert_eq!(c["description"], "Looks up invoices.");
    assert_eq!(c["provider"]["organization"], "Example Billing");
    assert_eq!(c["documentationUrl"], "https://billing.example/docs");
    assert_eq!(
        c["defaultOutputModes"],
        json!(["text/plain", "application/json"])
    );
    assert_eq!(
        ids(&c["skills"]),
        ["lookup"],
        "extended skills stay out of the public card"
    );
    assert_eq!(c["skills"][0]["examples"], json!(["Find invoice 42"]));
    assert_eq!(c["capabilities"]["extendedAgentCard"], true);
    assert!(
        c["signatures"][0]["protected"].is_string(),
        "signed by default"
    );
    let url = "https://agents.example/a2a/billing";
    assert_eq!(c["supportedInterfaces"][0]["url"], url);
    assert!(
        c.get("url").is_none(),
        "the 1.0 card holds 1.0 members only"
    );
    // 0.3 clients that say so (or read 0.3's older path) get 0.3's card.
    for (path, headers) in [
        (
            "/a2a/billing/.well-known/agent-card.json",
            vec![("A2A-Version", "0.3")],
        ),
        ("/a2a/billing/.well-known/agent.json", vec![]),
    ] {
        let (_, _, old) = http(&addr, "GET", path, &headers, "").await;
        let old: Value = serde_json::from_str(&old).expect("0.3 card");
        assert_eq!(old["url"], url, "{old}");
        assert_eq!(old["protocolVersion"], "0.3.0");
        assert_eq!(old["securitySchemes"]["bearer"]["type"], "http");
        assert_eq!(old["supportsAuthenticatedExtendedCard"], true);
        assert!(old.get("supportedInterfaces").is_none());
    }
    let scheme = &c["securitySchemes"]["bearer"]["httpAuthSecurityScheme"];
    assert_eq!(scheme["scheme"], "Bearer");
    assert!(
        scheme["description"]
            .as_str()
            .unwrap_or_default()
            .contains("routes.billing"),
        "{scheme}"
    );
    // A capsule without an `a2a:` section: one skill, the capsule itself.
    let plain = card(&addr, "plain").await;
    assert_eq!(ids(&plain["skills"]), ["plain"]);
    assert_eq!(plain["capabilities"]["extendedAgentCard"], false);

    // Each route takes its own token; roostd's opens only the others.
    let send = |id: &str| json!({"message": message(id, "hello")});
    for (route, token, want) in [
        ("billing", None, 401),
        ("billing", Some(GLOBAL), 401),
        ("billing", Some(BILLING), 200),
        ("plain", Some(BILLING), 401),
        ("plain", Some(GLOBAL), 200),
    ] {
        let (status, body) = call(
            &addr,
            route,
            token,
            "SendMessage",
            send(&format!("m-{route}-{want}-{}", token.is_some())),
        )
        .await;
        assert_eq!(status, want, "{route} with {token:?}: {body}");
        if want == 200 {
            assert_eq!(
                body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{body}"
            );
        }
    }
    // Addressed by session id, the route is still billing's.
    let id = daemon.client.get("billing").await.expect("status").id;
    let (status, _) = call(&addr, &id, Some(GLOBAL), "GetTask", json!({"id": "x"})).await;
    assert_eq!(status, 401, "a session id is the same route as its name");

    // The extended card: behind the token, on both bindings.
    let (status, _) = call(&addr, "billing", None, "GetExtendedAgentCard", json!({})).await;
    assert_eq!(status, 401);
    let (status, body) = call(
        &addr,
        "billing",
        Some(BILLING),
        "GetExtendedAgentCard",
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body["result"]["skills"]), ["lookup", "refund"]);
    let auth = format!("Bearer {BILLING}");
    let (status, _, rest) = http(
        &addr,
        "GET",
        "/a2a/billing/extendedAgentCard",
        &[V1, ("Authorization", &auth)],
        "",
    )
    .await;
    assert_eq!(status, 200, "{rest}");
    let rest: Value = serde_json::from_str(&rest).expect("json");
    assert_eq!(ids(&rest["skills"]), ["lookup", "refund"]);
    let (_, body) = call(
        &addr,
        "plain",
        Some(GLOBAL),
        "GetExtendedAgentCard",
        json!({}),
    )
    .await;
    assert_eq!(
        body["error"]["code"], -32007,
        "no extended skills, no extended card: {body}"
    );
    assert!(
        !daemon.log().contains(BILLING) && !daemon.log().contains(GLOBAL),
        "no token in the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_a2a_section_or_route_token_is_refused_with_what_to_fix() {
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let bad = "a2a:\n  skills:\n    - {id: x, name: X, description: ''}\n";
    let dir = conformance(
        daemon.root.path(),
        "bad",
        "{task_acceptance: queue, after_task: sleep}",
        bad,
    );
    let e = daemon
        .client
        .start(&request(&dir))
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("a2a.skills[0].description") && e.contains("must not be empty"),
        "{e}"
    );
    drop(daemon);

    // A route token readable by others: roostd does not start.
    let secrets = tempfile::tempdir().expect("tempdir");
    let path = secrets.path().join("open");
    std::fs::write(&path, BILLING).expect("token");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let config = secrets.path().join("roost.yaml");
    let yaml = format!(
        "{TEST_CONFIG}a2a: {{routes: {{billing: {{token_file: \"{}\"}}}}}}\n",
        path.display()
    );
    std::fs::write(&config, yaml).expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roostd"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(secrets.path().join("state"))
        .arg("--socket")
        .arg(secrets.path().join("roostd.sock"))
        .output()
        .expect("run roostd");
    assert!(
        !out.status.success(),
        "roostd started with a token others can read"
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("a2a.routes.billing.token_file") && e.contains("chmod 600"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_are_signed_and_an_independent_jws_library_verifies_them() {
    let python = sdk_python();
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "signed",
        "{task_acceptance: queue, after_task: sleep}",
        CARD,
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let url = format!("http://{addr}/a2a/signed/.well-known/agent-card.json");
    let out = tokio::process::Command::new(&python)
        .arg(repo().join("tests").join("a2a-sdk").join("verify_card.py"))
        .args(["--card", &url])
        .kill_on_drop(true)
        .output()
        .await
        .expect("run verify_card.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("verified") && stdout.contains("forgery refused"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The key is the state dir's, private, and the same after a restart.
    let key = daemon.state_dir.join("keys").join("card-signing.p8");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).expect("key").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (_, _, jwks) = http(&addr, "GET", "/.well-known/jwks.json", &[], "").await;
    let kid = serde_json::from_str::<Value>(&jwks).expect("jwks")["keys"][0]["kid"].clone();
    assert!(kid.is_string(), "{jwks}");

    // Off: no signatures, no key set.
    let unsigned =
        Daemon::start_with(&format!("{TEST_CONFIG}a2a: {{sign_cards: false}}\n"), &[]).await;
    let addr = unsigned.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        unsigned.root.path(),
        "plain",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    unsigned.client.start(&request(&dir)).await.expect("start");
    assert!(card(&addr, "plain").await.get("signatures").is_none());
    let (status, _, _) = http(&addr, "GET", "/.well-known/jwks.json", &[], "").await;
    assert_eq!(status, 404);
}
