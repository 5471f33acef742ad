//! A manifest's `inference.api_key: {env: NAME}` reaches only the variables
//! roostd's `inference.key_env_allow` lists, and a bound one only the
//! endpoints listed with it: a capsule author cannot name
//! `{env: <roostd's cloud secret>}` and an endpoint of their own. The
//! controls: the listed key reaches its endpoint, and a key the manifest
//! holds itself goes wherever the manifest says.

use roost_ctl::api::SessionState;

use crate::agents::{KEY, agent, publish_agent_artifacts, run, with_task};
use crate::harness::{AGENT_CONFIG, Daemon};
use crate::mock_llm::{MockLlm, Reply};

const CLOUD_SECRET: &str = "cloud-secret-of-roostds-host-0123";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_sends_only_listed_keys_to_the_endpoints_they_are_bound_to() {
    let model = MockLlm::start(|_| Reply::text("answered")).await;
    let attacker = MockLlm::start(|_| Reply::text("thanks")).await;
    let config = AGENT_CONFIG.replace(
        "inference: {key_env_allow: [ROOST_E2E_KEY]}",
        &format!(
            "inference: {{key_env_allow: [{{name: ROOST_E2E_KEY, endpoints: [\"{}\"]}}]}}",
            model.endpoint()
        ),
    );
    assert_ne!(config, AGENT_CONFIG, "the binding is in the config");
    let daemon = Daemon::start_with(
        &config,
        &[("ROOST_E2E_KEY", KEY), ("ROOST_E2E_CLOUD", CLOUD_SECRET)],
    )
    .await;
    publish_agent_artifacts(&daemon).await;
    let root = daemon.root.path();
    let with_key = |dir: &std::path::Path, key: &str| {
        let path = dir.join("murmur.yaml");
        let text = std::fs::read_to_string(&path).expect("manifest");
        std::fs::write(&path, text.replace("{env: ROOST_E2E_KEY}", key)).expect("write");
    };

    // The attacks: roostd's other variable, to the author's endpoint; and
    // the listed key, to an endpoint it is not bound to.
    let steal = agent(root, "steal", &attacker, "", "");
    with_key(&steal, "{env: ROOST_E2E_CLOUD}");
    let err = daemon
        .client
        .start(&with_task(&steal, "x"))
        .await
        .expect_err("an unlisted variable");
    assert!(
        err.to_string()
            .contains("inference.key_env_allow does not list"),
        "{err}"
    );
    let redirect = agent(root, "redirect", &attacker, "", "");
    let err = daemon
        .client
        .start(&with_task(&redirect, "x"))
        .await
        .expect_err("an endpoint the key is not bound to");
    assert!(err.to_string().contains("is not one of them"), "{err}");
    assert!(
        attacker.seen().is_empty(),
        "the author's endpoint heard nothing"
    );
    assert!(!daemon.log().contains(CLOUD_SECRET));

    // The controls: the listed key goes to its endpoint, and a key the
    // manifest holds itself goes to the endpoint the manifest names.
    let s = run(&daemon, with_task(&agent(root, "ok", &model, "", ""), "hi")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let bearer = format!("Bearer {KEY}");
    assert_eq!(
        model.seen()[0].authorization.as_deref(),
        Some(bearer.as_str())
    );
    let own = agent(root, "own", &attacker, "", "");
    with_key(&own, "the-authors-own-key-0123456789");
    let s = run(&daemon, with_task(&own, "hi")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    assert_eq!(
        attacker.seen()[0].authorization.as_deref(),
        Some("Bearer the-authors-own-key-0123456789")
    );
}
