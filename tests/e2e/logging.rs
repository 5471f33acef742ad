//! roostd's own log as JSON (`log.format: json`): every line is one JSON
//! object, and a line logged inside a session carries the session's id and
//! capsule at the top level.

use crate::harness::{Daemon, TEST_CONFIG, capsule};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_parse_and_carry_the_session_fields() {
    let daemon = Daemon::start_with(&format!("{TEST_CONFIG}log: {{format: json}}\n"), &[]).await;
    let hello = capsule(daemon.root.path(), "hello", "hello", "");
    let session = daemon.run_to_end(&hello).await;
    assert_eq!(session.state.as_str(), "completed");
    let log = daemon.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    assert!(lines.len() > 3, "{log}");
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
    let of_session: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["session_id"] == session.id.as_str())
        .collect();
    assert!(
        !of_session.is_empty(),
        "no line carries session_id {}:\n{log}",
        session.id
    );
    assert!(of_session.iter().all(|l| l["capsule"] == "hello"), "{log}");
}
