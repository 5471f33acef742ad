//! A link a guest plants in what it was given leads nowhere the next time
//! roostd opens it: a file of a `read_only` grant inside a `read_write` one
//! turned into a link to roostd's state dir, and a workdir inside a
//! writable grant swapped for one, are refused at the next task's store
//! (and at the next start's staging), while the same link followed by a
//! process outside the jail reaches roostd's database (the control that
//! shows the attack is real), and links a guest makes and follows within
//! its grants keep working.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use crate::a2a::{message, rpc};
use crate::harness::{Daemon, capsule, request};

const SERVE: &str = "lifecycle: {task_acceptance: queue, after_task: sleep}\n";

/// A relative link from the directory `from` to `to` (both absolute).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let depth = from
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut up = PathBuf::new();
    for _ in 0..depth {
        up.push("..");
    }
    up.join(to.strip_prefix("/").expect("absolute"))
}

/// Sends `steps` to the linker capsule at `route`: the task as it ended.
async fn steps(addr: &str, route: &str, id: &str, steps: &str) -> Value {
    let reply = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message(id, steps)}),
    )
    .await;
    reply["result"]["task"].clone()
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The steps' outcomes, from the task's answer.
fn outcomes(task: &Value) -> Vec<String> {
    let text = task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {task}"));
    serde_json::from_str(text).expect("a JSON array of outcomes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_planted_in_a_grant_leads_nowhere_at_the_next_open() {
    let daemon = Daemon::start().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let srv = tempfile::tempdir().expect("srv");
    let app = srv.path().canonicalize().expect("real").join("app");
    std::fs::create_dir_all(app.join("inner")).expect("app");
    std::fs::write(app.join("inner/f"), "inner file").expect("inner");
    std::fs::write(app.join("x"), "plain").expect("x");
    let dir = capsule(
        daemon.root.path(),
        "linker",
        "linker",
        &format!(
            "{SERVE}capabilities: {{filesystem: {{read_write: [\"{app}\"], read_only: [\"{app}/x\"]}}}}\n",
            app = app.display()
        ),
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let state_dir = daemon.state_dir.canonicalize().expect("state");
    let up = relative(&app, &state_dir);
    let app_s = app.display();

    // The guest replaces x with a link to the state dir; and, the control,
    // makes a link within its grant and reads through it.
    let first = steps(
        &addr,
        "linker",
        "plant",
        &format!(
            "link {app_s} {} x\nlink {app_s} inner within\nread {app_s}/within/f\nread {app_s}/x/roost.db",
            up.display()
        ),
    )
    .await;
    assert_eq!(state(&first), "TASK_STATE_COMPLETED", "{first}");
    let said = outcomes(&first);
    assert_eq!(said[..3], ["ok", "ok", "inner file"], "{said:?}");
    // Through the writable grant the link is not followed out of it.
    assert!(said[3].starts_with("err:"), "{said:?}");
    // The control: the same link, followed outside the jail, reaches
    // roostd's database.
    let db = std::fs::read(app.join("x/roost.db")).expect("through the link");
    assert!(db.starts_with(b"SQLite format 3"), "the link is real");

    // The next task's store opens x again: refused, naming the link, and
    // nothing of the database reaches the guest.
    let second = steps(&addr, "linker", "read", &format!("read {app_s}/x/roost.db")).await;
    assert_eq!(state(&second), "TASK_STATE_FAILED", "{second}");
    let text = second.to_string();
    assert!(text.contains("passes through a link"), "{text}");
    assert!(!text.contains("SQLite format"), "{text}");
    // A new start stages the grant again: refused there too.
    let err = daemon
        .client
        .start(&request(&dir))
        .await
        .expect_err("a grant through a link");
    assert!(err.to_string().contains("passes through a link"), "{err}");

    // The control: with x a file again, the next task is served.
    std::fs::remove_file(app.join("x")).expect("unlink");
    std::fs::write(app.join("x"), "plain").expect("x");
    let third = steps(&addr, "linker", "again", &format!("read {app_s}/inner/f")).await;
    assert_eq!(state(&third), "TASK_STATE_COMPLETED", "{third}");
    assert_eq!(outcomes(&third), ["inner file"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workdir_swapped_for_a_link_is_not_opened_again() {
    let daemon = Daemon::start().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let srv = tempfile::tempdir().expect("srv");
    let app = srv.path().canonicalize().expect("real").join("app");
    std::fs::create_dir_all(app.join("work")).expect("workdir");
    let dir = capsule(
        daemon.root.path(),
        "swapper",
        "linker",
        &format!(
            "{SERVE}capabilities: {{filesystem: {{read_write: [\"{}\"]}}}}\n",
            app.display()
        ),
    );
    let started = daemon
        .client
        .start(&roost_ctl::api::StartRequest {
            workdir: Some(app.join("work").display().to_string()),
            ..request(&dir)
        })
        .await
        .expect("start");
    let up = relative(&app, &daemon.state_dir.canonicalize().expect("state"));
    let app_s = app.display();
    let first = steps(
        &addr,
        "swapper",
        "swap",
        &format!(
            "move {app_s} work work.old\nlink {app_s} {} work\nread ./roost.db",
            up.display()
        ),
    )
    .await;
    assert_eq!(state(&first), "TASK_STATE_COMPLETED", "{first}");
    let said = outcomes(&first);
    assert_eq!(said[..2], ["ok", "ok"], "{said:?}");
    // The store this task ran in had the workdir open already.
    assert!(said[2].starts_with("err:"), "{said:?}");
    // The control: the link is real.
    assert!(
        std::fs::read(app.join("work/roost.db"))
            .expect("through the link")
            .starts_with(b"SQLite format 3")
    );
    let second = steps(&addr, "swapper", "read", "read ./roost.db").await;
    assert_eq!(state(&second), "TASK_STATE_FAILED", "{second}");
    let text = second.to_string();
    assert!(text.contains("passes through a link"), "{text}");
    assert!(!text.contains("SQLite format"), "{text}");
    // roostd wrote none of the session's files through the link.
    assert!(!daemon.state_dir.join(".murmur").exists());
    let _ = started;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_a_tool_plants_in_a_grant_is_refused_at_the_next_call() {
    use crate::sandbox::{data, landlock_or_reported, shell_in};
    // Tools as roostd's own uid, as under a non-root roostd: Landlock alone
    // keeps them off roostd's files.
    let config = format!(
        "{}sandbox: {{tool_uids: null, unenforceable: warn}}\n",
        crate::harness::TEST_CONFIG
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    if !landlock_or_reported(&daemon) {
        return;
    }
    let srv = tempfile::tempdir().expect("srv");
    let app = srv.path().canonicalize().expect("real").join("app");
    std::fs::create_dir_all(app.join("inner")).expect("app");
    std::fs::write(app.join("inner/f"), "inner file").expect("inner");
    std::fs::write(app.join("x"), "plain").expect("x");
    let state_dir = daemon.state_dir.canonicalize().expect("state");
    let workdir = tempfile::tempdir().expect("workdir");
    // The first call plants the link (its rules were made with x a file, so
    // reading through it now is denied) and, the control, a link within its
    // grant that it follows; the second call is jailed afresh.
    std::fs::write(
        workdir.path().join("shell-command-2.txt"),
        format!("head -c 15 {}/x/roost.db", app.display()),
    )
    .expect("second command");
    let caps = format!(
        ", filesystem: {{read_write: [\"{app}\"], read_only: [\"{app}/x\"]}}",
        app = app.display()
    );
    let (_, first) = shell_in(
        &daemon,
        workdir.path(),
        "sh",
        &format!(
            "rm {app}/x && ln -s {state} {app}/x && ln -s inner {app}/within && \
             cat {app}/within/f; echo; head -c 15 {app}/x/roost.db",
            app = app.display(),
            state = state_dir.display()
        ),
        &caps,
    )
    .await;
    assert_eq!(first["ok"], true, "{first}");
    assert!(data(&first).contains("inner file"), "{first}");
    assert!(!data(&first).contains("SQLite format"), "{first}");
    // The control: the link is real.
    let db = std::fs::read(app.join("x/roost.db")).expect("through the link");
    assert!(db.starts_with(b"SQLite format 3"));
    let second: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workdir.path().join("shell-result-2.json")).expect("second"),
    )
    .expect("json");
    let text = second.to_string();
    assert!(!text.contains("SQLite format"), "{text}");
    assert!(text.contains("passes through a link"), "{text}");
}

/// The entries a capsule's guests make in its workdir are bounded
/// (`capabilities.limits.files`), across its tasks, net of those they
/// remove; past it, making one fails with `quota`. The control: the same
/// guest under the default makes them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_makes_at_most_its_limit_of_entries() {
    let daemon = Daemon::start().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    for (name, limits) in [
        ("bounded", "capabilities: {limits: {files: 50}}\n"),
        ("free", ""),
    ] {
        let dir = capsule(
            daemon.root.path(),
            name,
            "linker",
            &format!("{SERVE}{limits}"),
        );
        daemon.client.start(&request(&dir)).await.expect("start");
    }
    let said = |task: Value| outcomes(&task);
    let first = said(steps(&addr, "bounded", "b1", "make . a 30").await);
    assert_eq!(first, ["made 30"]);
    // The next task's store counts what the first made (a file that is
    // there already is no new entry).
    let second = said(steps(&addr, "bounded", "b2", "make . a 30\nmake . b 40").await);
    assert_eq!(second, ["made 30", "made 20 err:quota"], "{second:?}");
    // Removing makes room again.
    let third = said(steps(&addr, "bounded", "b3", "unmake . a 10\nmake . c 15").await);
    assert_eq!(third, ["unmade 10", "made 10 err:quota"], "{third:?}");
    // The control: the default limit.
    let free = said(steps(&addr, "free", "f1", "make . a 80").await);
    assert_eq!(free, ["made 80"]);
    // Made through a dangling link (the link counted, the file it names
    // counted, the link removed): each round one entry more, counted.
    let dir = capsule(
        daemon.root.path(),
        "via",
        "linker",
        &format!("{SERVE}capabilities: {{limits: {{files: 10}}}}\n"),
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let via = said(steps(&addr, "via", "v1", "via . v 20").await);
    assert_eq!(via, ["made 9 err:quota"], "{via:?}");
    // A file saved again and again through a temporary one is one entry
    // (and its temporary one, while it is there).
    let dir = capsule(
        daemon.root.path(),
        "saver",
        "linker",
        &format!("{SERVE}capabilities: {{limits: {{files: 3}}}}\n"),
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let saved = said(steps(&addr, "saver", "s1", "save . notes 50").await);
    assert_eq!(saved, ["saved 50"], "{saved:?}");
}
