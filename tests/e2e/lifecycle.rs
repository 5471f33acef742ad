//! Session lifecycle through the control API and the CLI: list, status, stop,
//! names, logs -f.

use roost_ctl::api::{SessionState, StartRequest};
use roost_ctl::cli::{Cli, Command, run};

use crate::harness::{Daemon, capsule, code, request, spinner};

fn with_name(cap: &std::path::Path, name: &str) -> StartRequest {
    StartRequest {
        name: Some(name.into()),
        ..request(cap)
    }
}

fn cli(d: &Daemon, command: Command) -> Cli {
    Cli {
        socket: Some(d.socket.clone()),
        json: false,
        quiet: false,
        command,
    }
}

fn cli_json(d: &Daemon, command: Command) -> Cli {
    Cli {
        json: true,
        ..cli(d, command)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_interrupts_a_running_guest_and_is_final() {
    let d = Daemon::start().await;
    let cap = spinner(d.root.path());
    let s = d.start_capsule(&cap).await;
    d.wait_running(&s.id).await;
    let listed = d.client.list(false).await.expect("list");
    assert_eq!(listed.len(), 1);
    let stopped = d.client.stop("spin").await.expect("stop by name");
    assert_eq!(stopped.state, SessionState::Stopped);
    assert_eq!(stopped.error, None);
    assert!(d.client.list(false).await.expect("list").is_empty());
    // Stopping again is harmless and reports the same final record.
    let again = d.client.stop(&s.id).await.expect("stop again");
    assert_eq!(again.state, SessionState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_default_to_the_capsule_and_stay_unique_among_live_sessions() {
    let d = Daemon::start().await;
    let cap = spinner(d.root.path());
    let first = d.start_capsule(&cap).await;
    let second = d.start_capsule(&cap).await;
    assert_eq!(first.name, "spin");
    assert!(
        second.name.starts_with("spin-") && second.name.len() == 13,
        "{}",
        second.name
    );
    let named = d
        .client
        .start(&with_name(&cap, "worker-1"))
        .await
        .expect("named");
    assert_eq!(named.name, "worker-1");
    let err = d
        .client
        .start(&with_name(&cap, "worker-1"))
        .await
        .expect_err("duplicate live name");
    assert_eq!(code(&err), "name_in_use");
    let err = d
        .client
        .start(&with_name(&cap, "Bad Name"))
        .await
        .expect_err("invalid name");
    assert_eq!(code(&err), "bad_request");
    for s in [&first, &second, &named] {
        d.client.stop(&s.id).await.expect("stop");
    }
    // Once stopped, the name is free again.
    let reused = d
        .client
        .start(&with_name(&cap, "worker-1"))
        .await
        .expect("name free after stop");
    d.client.stop(&reused.id).await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_start_wait_list_status_and_logs() {
    let d = Daemon::start().await;
    let cap = capsule(d.root.path(), "hello", "hello", "");
    let mut out = Vec::new();
    let code = run(
        cli_json(
            &d,
            Command::Start {
                path: cap.clone(),
                name: None,
                workdir: None,
                restart: Default::default(),
                wait: true,
                timeout: None,
                task: None,
                task_file: None,
                lifecycle: None,
                after_task: None,
                job_id: None,
                node: None,
                labels: Vec::new(),
            },
        ),
        &mut out,
    )
    .await
    .expect("start --wait");
    assert_eq!(code, 0);
    let session: serde_json::Value = serde_json::from_slice(&out).expect("json");
    for key in [
        "id",
        "name",
        "capsule",
        "version",
        "state",
        "error",
        "workdir",
        "created_at",
        "ended_at",
    ] {
        assert!(session.get(key).is_some(), "missing {key}");
    }
    assert_eq!(session["state"], "completed");
    let id = session["id"].as_str().expect("id").to_string();

    let mut out = Vec::new();
    run(
        cli(
            &d,
            Command::List {
                all: true,
                cluster: false,
            },
        ),
        &mut out,
    )
    .await
    .expect("list");
    let table = String::from_utf8(out).expect("utf8");
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains(&id) && table.contains("completed"),
        "{table}"
    );

    let mut out = Vec::new();
    run(
        cli(
            &d,
            Command::Status {
                id_or_name: Some("hello".into()),
            },
        ),
        &mut out,
    )
    .await
    .expect("status");
    assert!(String::from_utf8(out).expect("utf8").contains("completed"));

    let mut out = Vec::new();
    run(
        cli(
            &d,
            Command::Logs {
                id_or_name: id.clone(),
                follow: true,
                tail: None,
                since: None,
                timestamps: false,
            },
        ),
        &mut out,
    )
    .await
    .expect("logs -f of an ended session returns");
    assert!(
        String::from_utf8(out)
            .expect("utf8")
            .contains("hello from hello")
    );

    // A failing session makes `start --wait` exit non-zero.
    let panic = capsule(d.root.path(), "panic", "panic", "");
    let mut out = Vec::new();
    let code = run(
        cli(
            &d,
            Command::Start {
                path: panic,
                name: None,
                workdir: None,
                restart: Default::default(),
                wait: true,
                timeout: None,
                task: None,
                task_file: None,
                lifecycle: None,
                after_task: None,
                job_id: None,
                node: None,
                labels: Vec::new(),
            },
        ),
        &mut out,
    )
    .await
    .expect("start --wait");
    // 3: the session did not succeed (`roostctl --help`).
    assert_eq!(code, 3);

    // The daemon itself, then the ended sessions pruned (a dry run first).
    let mut out = Vec::new();
    run(cli(&d, Command::Status { id_or_name: None }), &mut out)
        .await
        .expect("status of the daemon");
    let status = String::from_utf8(out).expect("utf8");
    assert!(
        status.contains("0 live") && status.contains("uptime"),
        "{status}"
    );
    for (dry_run, verb) in [(true, "would delete 2 ended"), (false, "deleted 2 ended")] {
        let mut out = Vec::new();
        let code = run(
            cli(
                &d,
                Command::Prune {
                    older_than: None,
                    dry_run,
                },
            ),
            &mut out,
        )
        .await
        .expect("prune");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(code, 0);
        assert!(text.contains(verb) && text.contains(&id), "{text}");
    }
    let mut out = Vec::new();
    let code = run(
        cli(
            &d,
            Command::Rm {
                ids_or_names: vec![id.clone()],
                force: false,
            },
        ),
        &mut out,
    )
    .await
    .expect("rm");
    assert_eq!(code, 4, "already pruned: rm fails, not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_streams_until_the_session_ends() {
    let d = Daemon::start().await;
    let cap = capsule(d.root.path(), "loud", "loud", "");
    let s = d.start_capsule(&cap).await;
    let mut received = Vec::new();
    d.client
        .logs(&s.id, true, |chunk| received.extend_from_slice(chunk))
        .await
        .expect("follow");
    let end = d.client.get(&s.id).await.expect("get");
    assert_eq!(
        end.state,
        SessionState::Completed,
        "follow returned only after the end"
    );
    let text = String::from_utf8(received).expect("utf8");
    assert!(
        text.contains("line 20000 "),
        "followed output reached the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roostctl_says_plainly_when_no_daemon_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let client = roost_ctl::Client::new(dir.path().join("nothing.sock"));
    let err = client.list(false).await.expect_err("no daemon");
    let text = err.to_string();
    assert!(text.contains("no roostd is listening"), "{text}");
    assert!(text.contains("start one with `roostd`"), "{text}");
}
