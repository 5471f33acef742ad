//! Upgrades in place: under continuous A2A load (16 clients), an upgrade
//! and a rollback drop no request, and no answer comes from the old
//! version after the switch is acknowledged; a task running on the old
//! version finishes there, or is canceled saying why when the drain time
//! is up; the session keeps its id and name and its history shows each
//! version; bad upgrades (another capsule, an older or equal version, a
//! capsule that does not stage, a second upgrade during one) change
//! nothing; `roostctl upgrade S name@version` goes to a version the session
//! has run; an agent's conversation and its route's schedule carry over.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roost_ctl::api::UpgradeRequest;
use serde_json::{Value, json};

use crate::a2a::rpc;
use crate::harness::{Daemon, code, conformance, request};

const LIFECYCLE: &str =
    "{task_acceptance: queue, after_task: sleep, concurrency: 4, queue_depth: 64}";

/// The conformance capsule as `name` at `version`.
fn capsule(root: &Path, name: &str, version: &str) -> PathBuf {
    let dir = conformance(root, name, LIFECYCLE, "");
    let manifest = dir.join("murmur.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(
        &manifest,
        text.replace("version: 0.1.0", &format!("version: {version}")),
    )
    .expect("write");
    dir
}

fn to(dir: &Path) -> UpgradeRequest {
    UpgradeRequest {
        path: Some(dir.display().to_string()),
        ..UpgradeRequest::default()
    }
}

/// One blocking send: (sent, answered, its answer or error).
async fn ask(addr: &str, route: &str, id: &str, text: &str) -> (Instant, Instant, String) {
    let sent = Instant::now();
    let r = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]}}),
    )
    .await;
    let task = &r["result"]["task"];
    let said = if task["status"]["state"] == "TASK_STATE_COMPLETED" {
        task["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        format!("NOT COMPLETED: {r}")
    };
    (sent, Instant::now(), said)
}

fn p99(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms.get((ms.len() * 99 / 100).min(ms.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_and_a_rollback_under_load_drop_nothing_and_switch_when_acknowledged() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let v1 = capsule(d.root.path(), "svc", "0.1.0");
    let v2 = capsule(d.root.path(), "svc", "0.2.0");
    let first = d.client.start(&request(&v1)).await.expect("start");
    let answers = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..16 {
        let (addr, answers, stop) = (addr.clone(), Arc::clone(&answers), Arc::clone(&stop));
        clients.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let answer = ask(&addr, "svc", &format!("c{c}-{n}"), "version").await;
                answers.lock().expect("answers").push(answer);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked_up = Instant::now();
    let upgraded = d.client.upgrade("svc", &to(&v2)).await.expect("upgrade");
    let acked_up = Instant::now();
    assert_eq!(upgraded.id, first.id, "the same session");
    assert_eq!(upgraded.name, "svc");
    assert_eq!(upgraded.version, "0.2.0");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked_back = Instant::now();
    let back = d
        .client
        .upgrade(
            "svc",
            &UpgradeRequest {
                rollback: true,
                ..UpgradeRequest::default()
            },
        )
        .await
        .expect("rollback");
    let acked_back = Instant::now();
    assert_eq!(back.version, "0.1.0");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.await.expect("client");
    }
    let answers = answers.lock().expect("answers").clone();
    assert!(answers.len() > 100, "{} requests", answers.len());
    let mut wrong = Vec::new();
    for (sent, got, said) in &answers {
        // Sent after a switch was acknowledged: the new version answers.
        // (One sent before the rollback was asked for may wait in the
        // queue through it and run on the version after.)
        let expected = if *sent >= acked_back {
            Some("version 0.1.0")
        } else if *sent >= acked_up && *got < asked_back {
            Some("version 0.2.0")
        } else {
            None
        };
        let ok = match expected {
            Some(e) => said == e,
            None => said == "version 0.1.0" || said == "version 0.2.0",
        };
        if !ok {
            wrong.push((expected, said.clone()));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {}: {:?}",
        wrong.len(),
        answers.len(),
        &wrong[..wrong.len().min(5)]
    );
    let ms = |from: Instant, until: Instant| -> Vec<f64> {
        answers
            .iter()
            .filter(|(sent, _, _)| *sent >= from && *sent < until)
            .map(|(sent, got, _)| got.duration_since(*sent).as_secs_f64() * 1000.0)
            .collect()
    };
    let start = answers.iter().map(|a| a.0).min().expect("one");
    eprintln!(
        "upgrade under 16 clients: {} requests, 0 failed; p99 before {:.1} ms, during the upgrade {:.1} ms, during the rollback {:.1} ms",
        answers.len(),
        p99(ms(start, asked_up)),
        p99(ms(asked_up, acked_up + Duration::from_millis(200))),
        p99(ms(asked_back, acked_back + Duration::from_millis(200))),
    );
    let versions = d.client.versions("svc").await.expect("versions");
    let seen: Vec<(&str, &str)> = versions
        .iter()
        .map(|v| (v.version.as_str(), v.why.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("0.1.0", "start"),
            ("0.2.0", "upgrade"),
            ("0.1.0", "rollback")
        ]
    );
}

/// `roostctl upgrade SESSION NAME@VERSION`, the real binary: the version
/// named from the session's history is staged again and answers; one it has
/// not run, or one that is not newer, is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_to_name_at_version_goes_to_a_version_the_session_has_run() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let v1 = capsule(d.root.path(), "svc", "0.1.0");
    let v2 = capsule(d.root.path(), "svc", "0.2.0");
    let session = d.client.start(&request(&v1)).await.expect("start");
    d.client.upgrade("svc", &to(&v2)).await.expect("upgrade");
    let back = UpgradeRequest {
        rollback: true,
        ..UpgradeRequest::default()
    };
    d.client.upgrade("svc", &back).await.expect("rollback");
    let ctl = |args: &[&str]| {
        std::process::Command::new(crate::cli::roostctl())
            .arg("--socket")
            .arg(&d.socket)
            .args(args)
            .env_remove("ROOST_SOCKET")
            .output()
            .expect("run roostctl")
    };
    // Refused, nothing changed: a version it has not run, the one it runs.
    for (target, says) in [
        ("svc@0.9.0", "has not run svc@0.9.0"),
        ("svc@0.1.0", "not newer"),
    ] {
        let out = ctl(&["upgrade", "svc", target]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{target}: {stderr}");
        assert!(stderr.contains(says), "{target}: {stderr}");
    }
    let (_, _, said) = ask(&addr, "svc", "before", "version").await;
    assert_eq!(said, "version 0.1.0");
    assert_eq!(d.client.versions("svc").await.expect("versions").len(), 3);
    // Forward again by name@version.
    let out = ctl(&["upgrade", "svc", "svc@0.2.0", "-q"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), session.id);
    let (_, _, said) = ask(&addr, "svc", "after", "version").await;
    assert_eq!(said, "version 0.2.0");
    let versions = d.client.versions("svc").await.expect("versions");
    let seen: Vec<(&str, &str)> = versions
        .iter()
        .map(|v| (v.version.as_str(), v.why.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("0.1.0", "start"),
            ("0.2.0", "upgrade"),
            ("0.1.0", "rollback"),
            ("0.2.0", "upgrade")
        ]
    );
    // Over the API, a directory and a version at once are refused.
    let both = UpgradeRequest {
        version: Some("svc@0.1.0".into()),
        ..to(&v1)
    };
    let error = d.client.upgrade("svc", &both).await.expect_err("both");
    assert!(error.to_string().contains("give one of"), "{error}");
}

async fn get(addr: &str, id: &str) -> Value {
    rpc(addr, "svc", Some("1.0"), "GetTask", json!({"id": id})).await["result"].clone()
}

async fn until_ended(addr: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = get(addr, id).await;
        let state = task["status"]["state"].as_str().unwrap_or_default();
        if [
            "TASK_STATE_COMPLETED",
            "TASK_STATE_CANCELED",
            "TASK_STATE_FAILED",
        ]
        .contains(&state)
        {
            return task;
        }
        assert!(Instant::now() < deadline, "{id} never ended: {task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start_task(addr: &str, id: &str, text: &str) -> String {
    let r = rpc(
        addr,
        "svc",
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]},
               "configuration": {"returnImmediately": true}}),
    )
    .await;
    r["result"]["task"]["id"]
        .as_str()
        .expect("task id")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_tasks_finish_on_the_old_version_or_are_canceled_when_the_drain_time_is_up() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let v1 = capsule(d.root.path(), "svc", "0.1.0");
    let v2 = capsule(d.root.path(), "svc", "0.2.0");
    let v3 = capsule(d.root.path(), "svc", "0.3.0");
    d.client.start(&request(&v1)).await.expect("start");
    // "slow" takes a second: it finishes on 0.1.0 within the drain time.
    let slow = start_task(&addr, "slow-1", "slow").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let upgraded = d
        .client
        .upgrade(
            "svc",
            &UpgradeRequest {
                drain_timeout_secs: Some(30),
                ..to(&v2)
            },
        )
        .await
        .expect("upgrade");
    assert_eq!(upgraded.version, "0.2.0");
    let slow = until_ended(&addr, &slow).await;
    assert_eq!(slow["status"]["state"], "TASK_STATE_COMPLETED", "{slow}");
    // "sleep" runs until canceled: the drain time (1 s) runs out on it.
    let sleeper = start_task(&addr, "sleep-1", "sleep").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let took = Instant::now();
    let upgraded = d
        .client
        .upgrade(
            "svc",
            &UpgradeRequest {
                drain_timeout_secs: Some(1),
                ..to(&v3)
            },
        )
        .await
        .expect("upgrade");
    assert_eq!(upgraded.version, "0.3.0");
    assert!(
        took.elapsed() < Duration::from_secs(20),
        "{:?}",
        took.elapsed()
    );
    let sleeper = until_ended(&addr, &sleeper).await;
    assert_eq!(
        sleeper["status"]["state"], "TASK_STATE_CANCELED",
        "{sleeper}"
    );
    let why = sleeper["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("upgraded") && why.contains("drain timeout"),
        "{sleeper}"
    );
    let (_, _, said) = ask(&addr, "svc", "after", "version").await;
    assert_eq!(said, "version 0.3.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_upgrades_are_refused_with_the_reason_and_change_nothing() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let v1 = capsule(d.root.path(), "svc", "0.2.0");
    let session = d.client.start(&request(&v1)).await.expect("start");
    let other = capsule(d.root.path(), "other", "0.3.0");
    let older = capsule(d.root.path(), "svc", "0.1.0");
    let same = capsule(d.root.path(), "svc", "0.2.0");
    let broken = capsule(d.root.path(), "svc", "0.4.0");
    std::fs::write(
        broken.join("murmur.yaml"),
        "name: svc\nversion: 0.4.0\ncomponent: [\n",
    )
    .expect("write");
    for (dir, status, says) in [
        (&other, "upgrade_refused", "keeps the capsule"),
        (&older, "upgrade_refused", "not newer"),
        (&same, "upgrade_refused", "not newer"),
        (&broken, "invalid_manifest", "murmur.yaml"),
    ] {
        let error = d
            .client
            .upgrade("svc", &to(dir))
            .await
            .expect_err("refused");
        assert_eq!(code(&error), status, "{error}");
        assert!(error.to_string().contains(says), "{error}");
    }
    let error = d
        .client
        .upgrade(
            "svc",
            &UpgradeRequest {
                rollback: true,
                ..UpgradeRequest::default()
            },
        )
        .await
        .expect_err("nothing to roll back to");
    assert!(error.to_string().contains("no earlier version"), "{error}");
    // Nothing changed: the same version answers, its history is one entry.
    let (_, _, said) = ask(&addr, "svc", "still", "version").await;
    assert_eq!(said, "version 0.2.0");
    assert_eq!(d.client.versions("svc").await.expect("versions").len(), 1);
    // A second upgrade while one drains is refused.
    let sleeper = start_task(&addr, "sleep-2", "sleep").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let v3 = capsule(d.root.path(), "svc", "0.3.0");
    let first = {
        let client = roost_ctl::client::Client::new(&d.socket);
        let request = UpgradeRequest {
            drain_timeout_secs: Some(3),
            ..to(&v3)
        };
        tokio::spawn(async move { client.upgrade("svc", &request).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = d
        .client
        .upgrade("svc", &to(&v3))
        .await
        .expect_err("in progress");
    assert_eq!(code(&second), "upgrade_in_progress", "{second}");
    // --force installs another capsule or an older version.
    let done = first.await.expect("join").expect("the first upgrade");
    assert_eq!(done.version, "0.3.0");
    let _ = until_ended(&addr, &sleeper).await;
    let forced = d
        .client
        .upgrade(
            "svc",
            &UpgradeRequest {
                force: true,
                ..to(&older)
            },
        )
        .await
        .expect("forced");
    assert_eq!(
        (forced.id.as_str(), forced.version.as_str()),
        (session.id.as_str(), "0.1.0")
    );
}

/// An agent upgraded in place keeps what belongs to its route: the
/// conversation of a context (the new version's model is given the earlier
/// exchange) and the route's schedule (same id, firing into the new
/// version).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_conversation_and_its_routes_schedule_carry_over_an_upgrade() {
    use roost_ctl::api::{ScheduleRequest, ScheduleTimes};
    let d = Daemon::start_with(
        crate::harness::AGENT_CONFIG,
        &[("ROOST_E2E_KEY", crate::agents::KEY)],
    )
    .await;
    crate::agents::publish_agent_artifacts(&d).await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let mock = crate::mock_llm::MockLlm::start(crate::hibernate::model).await;
    let extra = "lifecycle: {task_acceptance: queue, after_task: sleep}\n";
    let v1 = crate::agents::agent(d.root.path(), "keeper", &mock, "", extra);
    let v2 = d.root.path().join("keeper-0.2.0");
    std::fs::create_dir_all(&v2).expect("mkdir");
    let manifest = std::fs::read_to_string(v1.join("murmur.yaml")).expect("manifest");
    std::fs::write(
        v2.join("murmur.yaml"),
        manifest.replacen("\nversion: 0.1.0", "\nversion: 0.2.0", 1),
    )
    .expect("write");
    let session = d.client.start(&request(&v1)).await.expect("start");
    let ask = |id: &'static str, text: &'static str| {
        let addr = addr.clone();
        async move {
            let answer = rpc(
                &addr,
                "keeper",
                Some("1.0"),
                "SendMessage",
                json!({"message": {"messageId": id, "role": "ROLE_USER", "contextId": "ctx-keep",
                       "parts": [{"text": text}]}}),
            )
            .await;
            crate::hibernate::said_agent(&answer)
        }
    };
    assert_eq!(ask("k1", "one").await, "heard one");
    let schedule = d
        .client
        .add_schedule(&ScheduleRequest {
            route: "keeper".into(),
            text: "tick".into(),
            times: ScheduleTimes {
                every: Some("2s".into()),
                ..ScheduleTimes::default()
            },
            name: Some("ticker".into()),
            ..ScheduleRequest::default()
        })
        .await
        .expect("schedule");
    let upgraded = d.client.upgrade("keeper", &to(&v2)).await.expect("upgrade");
    assert_eq!(
        (upgraded.id.as_str(), upgraded.version.as_str()),
        (session.id.as_str(), "0.2.0")
    );
    let fired_at_switch = fired(&d, &schedule.id).await;
    // The conversation: the new version's model sees the earlier exchange.
    assert_eq!(ask("k2", "two").await, "heard two");
    let call = mock
        .seen()
        .into_iter()
        .rev()
        .find(|s| s.body["messages"].to_string().contains("two"))
        .expect("the model call of the second task");
    let messages = call.body["messages"].to_string();
    assert!(
        messages.contains("one") && messages.contains("heard one"),
        "the upgraded agent was not given the context's earlier exchange: {messages}"
    );
    // The schedule: the same one fires again, into the new version.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fired(&d, &schedule.id).await <= fired_at_switch {
        assert!(
            Instant::now() < deadline,
            "the schedule stopped firing\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now = d.client.get(&session.id).await.expect("get");
    assert_eq!(now.version, "0.2.0");
}

/// How many tasks schedule `id` has fired (panics if it is gone).
async fn fired(d: &Daemon, id: &str) -> u64 {
    d.client
        .schedules(Some("keeper"))
        .await
        .expect("schedules")
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("schedule {id} is gone after the upgrade"))
        .fired
}
