//! Schedules: each tick fires one A2A task, once, across `kill -9` and a
//! restart (`missed: run_once` fires one task for the ticks missed while
//! roostd was down, `skip` none); `overlap: skip` passes a tick over while
//! the previous task runs, `queue` does not; a capsule's own `schedules:`
//! fire from its manifest; pause, resume and rm through roostctl; and bad
//! input (a cron expression that never fires, a time zone that does not
//! exist, `--at` in the past, a route that is not running, a name taken)
//! refused with what to fix, changing nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use roost_ctl::api::{
    Missed, Overlap, RestartPolicy, ScheduleInfo, ScheduleRequest, ScheduleTimes,
};
use serde_json::{Value, json};

use crate::a2a::rpc;
use crate::cli::roostctl;
use crate::harness::{Daemon, code, conformance, request};

const QUEUE: &str = "{task_acceptance: queue, after_task: sleep, concurrency: 4}";

fn every(route: &str, text: &str, period: &str, name: &str) -> ScheduleRequest {
    ScheduleRequest {
        route: route.into(),
        text: text.into(),
        times: ScheduleTimes {
            every: Some(period.into()),
            ..ScheduleTimes::default()
        },
        name: Some(name.into()),
        ..ScheduleRequest::default()
    }
}

async fn schedule(d: &Daemon, id: &str) -> ScheduleInfo {
    d.client
        .schedules(None)
        .await
        .expect("list")
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("schedule {id} is gone"))
}

/// Waits until the schedule has fired `n` tasks.
async fn until_fired(d: &Daemon, id: &str, n: u64) -> ScheduleInfo {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = schedule(d, id).await;
        if s.fired >= n {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{id} fired {} of {n}: {s:?}\n{}",
            s.fired,
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The route's tasks: (message id, state), all pages.
/// A listed task: its message id, its state, and its status message's text
/// (why it failed, for a failed one).
#[derive(Debug)]
struct Listed {
    message_id: String,
    state: String,
    why: String,
}

async fn tasks(addr: &str, route: &str) -> Vec<Listed> {
    let r = rpc(
        addr,
        route,
        Some("1.0"),
        "ListTasks",
        json!({"pageSize": 100, "historyLength": 1}),
    )
    .await;
    r["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {r}"))
        .iter()
        .map(|t| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            Listed {
                message_id: text(&t["history"][0]["messageId"]),
                state: text(&t["status"]["state"]),
                why: text(&t["status"]["message"]["parts"][0]["text"]),
            }
        })
        .collect()
}

/// The ticks (unix ms) of the schedule's tasks, from their message ids.
fn ticks(all: &[Listed], schedule_id: &str) -> Vec<i64> {
    all.iter().filter_map(|t| tick(t, schedule_id)).collect()
}

/// The tick that fired `task`, if `schedule_id` fired it.
fn tick(task: &Listed, schedule_id: &str) -> Option<i64> {
    let tick = task.message_id.strip_prefix(&format!("{schedule_id}_"))?;
    Some(tick.parse().expect("a tick"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_fires_once_across_kill_9_and_missed_ticks_follow_their_rule() {
    let mut d = Daemon::start().await;
    let dir = conformance(d.root.path(), "ticker", QUEUE, "");
    d.start_supervised(&dir, RestartPolicy::Always).await;
    let once = d
        .client
        .add_schedule(&every("ticker", "hello", "2s", "once"))
        .await
        .expect("add");
    let skip = d
        .client
        .add_schedule(&ScheduleRequest {
            missed: Some(Missed::Skip),
            ..every("ticker", "hello", "2s", "skip")
        })
        .await
        .expect("add");
    assert!(once.next_tick.is_some(), "{once:?}");
    until_fired(&d, &once.id, 2).await;
    until_fired(&d, &skip.id, 2).await;

    d.kill9();
    let down = now_ms();
    // Three ticks of each fall while roostd is down.
    tokio::time::sleep(Duration::from_millis(6500)).await;
    let up = now_ms();
    d.spawn().await;
    let before = schedule(&d, &once.id).await.fired;
    let after_once = until_fired(&d, &once.id, before + 3).await;
    let after_skip = until_fired(&d, &skip.id, schedule(&d, &skip.id).await.fired + 2).await;

    // A new port after the restart.
    let addr = d.client.health().await.expect("health").a2a_addr;
    let all = tasks(&addr, "ticker").await;
    for (s, missed_tasks) in [(&after_once, 1), (&after_skip, 0)] {
        let mut fired = ticks(&all, &s.id);
        let distinct: BTreeSet<i64> = fired.iter().copied().collect();
        // Exactly once: one task per tick it recorded, no tick twice.
        assert_eq!(distinct.len(), fired.len(), "a tick fired twice: {fired:?}");
        let now = schedule(&d, &s.id).await;
        assert_eq!(
            fired.len() as u64,
            now.fired,
            "tasks vs fired: {fired:?} {now:?}"
        );
        // The ticks that fell while roostd was down: one task for all of
        // them (run_once), or none (skip).
        fired.sort_unstable();
        let in_gap = fired.iter().filter(|t| **t > down && **t <= up).count();
        assert_eq!(
            in_gap, missed_tasks,
            "{} ticks {fired:?} down {down}..{up}",
            s.name
        );
        assert!(fired.windows(2).all(|w| w[1] - w[0] >= 2000), "{fired:?}");
    }
    assert!(after_skip.skipped >= 1, "{after_skip:?}");
    // Every task ran and answered, but one that was running when roostd
    // was killed (a tick just before it), which fails visibly as
    // interrupted rather than running twice.
    let interrupted = |t: &Listed| {
        t.state == "TASK_STATE_FAILED"
            && t.why.starts_with("interrupted")
            && [&after_once, &after_skip]
                .iter()
                .any(|s| tick(t, &s.id).is_some_and(|at| at <= down))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = tasks(&addr, "ticker").await;
        let unended: Vec<_> = all
            .iter()
            .filter(|t| t.state != "TASK_STATE_COMPLETED" && !interrupted(t))
            .collect();
        if unended.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "not completed: {unended:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_passes_a_tick_over_while_the_last_task_runs_and_queue_does_not() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    d.client
        .start(&request(&conformance(d.root.path(), "busy", QUEUE, "")))
        .await
        .expect("start");
    // "sleep" runs until canceled: every tick after the first overlaps.
    let skip = d
        .client
        .add_schedule(&every("busy", "sleep", "1s", "skipper"))
        .await
        .expect("add");
    let queue = d
        .client
        .add_schedule(&ScheduleRequest {
            overlap: Some(Overlap::Queue),
            ..every("busy", "sleep", "1s", "queuer")
        })
        .await
        .expect("add");
    until_fired(&d, &queue.id, 3).await;
    let skipped = schedule(&d, &skip.id).await;
    assert_eq!(skipped.fired, 1, "{skipped:?}");
    assert!(skipped.skipped >= 1, "{skipped:?}");
    assert!(
        skipped
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("overlap: skip"),
        "{skipped:?}"
    );
    let all = tasks(&addr, "busy").await;
    assert_eq!(ticks(&all, &skip.id).len(), 1, "{all:?}");
    assert!(ticks(&all, &queue.id).len() >= 3, "{all:?}");
    // rm stops it; a task it fired goes on.
    d.client.remove_schedule(&queue.id).await.expect("rm");
    d.client.remove_schedule(&skip.id).await.expect("rm");
    let n = tasks(&addr, "busy").await.len();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        tasks(&addr, "busy").await.len(),
        n,
        "a removed schedule fired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsules_own_schedules_fire_and_roostctl_pauses_resumes_and_removes() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let extra = "schedules:\n  - {name: heartbeat, text: hello, every: 1s, context_id: beats}\n";
    let dir = conformance(d.root.path(), "own", QUEUE, extra);
    d.client.start(&request(&dir)).await.expect("start");
    let mine = d.client.schedules(Some("own")).await.expect("list");
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0].origin, "manifest");
    let id = mine[0].id.clone();
    until_fired(&d, &id, 2).await;
    // Its tasks share the context it names.
    let contexts: BTreeSet<String> = {
        let r = rpc(
            &addr,
            "own",
            Some("1.0"),
            "ListTasks",
            json!({"contextId": "beats"}),
        )
        .await;
        r["result"]["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["contextId"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(contexts, BTreeSet::from(["beats".to_string()]));

    let socket = d.socket.display().to_string();
    let ctl = |args: &[&str]| {
        std::process::Command::new(roostctl())
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("roostctl")
    };
    let out = ctl(&["schedule", "pause", &id]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("paused"),
        "{out:?}"
    );
    let paused = schedule(&d, &id).await.fired;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        schedule(&d, &id).await.fired,
        paused,
        "a paused schedule fired"
    );
    let out = ctl(&["schedule", "resume", &id]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    until_fired(&d, &id, paused + 1).await;
    let out = ctl(&["--json", "schedule", "list", "own"]);
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["every"], "1s");
    // roostctl makes one, refuses a bad one with exit 2 and the reason.
    let out = ctl(&["schedule", "add", "own", "hello", "--cron", "0 0 30 2 *"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never fires"),
        "{out:?}"
    );
    let out = ctl(&[
        "-q",
        "schedule",
        "add",
        "own",
        "hi",
        "--cron",
        "0 7 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--name",
        "morning",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let made = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(made.starts_with("sch_"), "{made}");
    let out = ctl(&["schedule", "rm", &made]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = ctl(&["schedule", "rm", &made]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_refused_with_what_to_fix_and_change_nothing() {
    let d = Daemon::start().await;
    d.client
        .start(&request(&conformance(d.root.path(), "calm", QUEUE, "")))
        .await
        .expect("start");
    let kept = d
        .client
        .add_schedule(&every("calm", "hello", "1h", "kept"))
        .await
        .expect("add");
    let cron = |expr: &str, tz: Option<&str>| ScheduleRequest {
        route: "calm".into(),
        text: "hello".into(),
        times: ScheduleTimes {
            cron: Some(expr.into()),
            tz: tz.map(str::to_string),
            ..ScheduleTimes::default()
        },
        ..ScheduleRequest::default()
    };
    let at = |when: &str| ScheduleRequest {
        times: ScheduleTimes {
            at: Some(when.into()),
            ..ScheduleTimes::default()
        },
        ..every("calm", "hello", "1s", "x")
    };
    for (bad, status, says) in [
        (cron("0 0 30 2 *", None), "invalid_schedule", "never fires"),
        (
            cron("0 7 * * 1-5", Some("Europe/Atlantis")),
            "invalid_schedule",
            "does not exist",
        ),
        (cron("every day", None), "invalid_schedule", "not valid"),
        (
            at("2020-01-01T00:00:00Z"),
            "invalid_schedule",
            "in the past",
        ),
        (
            every("gone", "hello", "1m", "y"),
            "no_route",
            "no running session",
        ),
        (
            every("calm", "hello", "1m", "kept"),
            "schedule_exists",
            "already has a schedule",
        ),
        (
            every("calm", "", "1m", "z"),
            "invalid_schedule",
            "text is empty",
        ),
        (
            every("calm", "hello", "10ms", "z"),
            "invalid_schedule",
            "shorter than 1 s",
        ),
        (
            every("calm", "hello", "1m", "no/slash"),
            "invalid_schedule",
            "must be 1 to 63",
        ),
    ] {
        let error = d.client.add_schedule(&bad).await.expect_err("refused");
        assert_eq!(code(&error), status, "{bad:?}: {error}");
        assert!(error.to_string().contains(says), "{bad:?}: {error}");
    }
    // Nothing else changed.
    let all = d.client.schedules(None).await.expect("list");
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].id, kept.id);
    // A manifest whose schedule never fires does not start.
    let dir = conformance(
        d.root.path(),
        "never",
        QUEUE,
        "schedules:\n  - {name: never, text: hi, cron: \"0 0 31 4 *\"}\n",
    );
    let error = d
        .client
        .start(&request(&dir))
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("schedules[0]") && error.contains("never fires"),
        "{error}"
    );
    let unknown = d
        .client
        .remove_schedule("sch_nope")
        .await
        .expect_err("unknown");
    assert_eq!(code(&unknown), "not_found", "{unknown}");
}

/// A capsule declares at most `schedules.max_per_capsule` schedules: more
/// are refused at its start, naming the setting, and nothing is written;
/// the control, at the limit, starts with all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_declares_at_most_the_operators_number_of_schedules() {
    let d = Daemon::start_with(
        &format!(
            "{}schedules: {{max_per_capsule: 3}}\n",
            crate::harness::TEST_CONFIG
        ),
        &[],
    )
    .await;
    let declare = |n: usize| {
        let mut extra = "schedules:\n".to_string();
        for i in 0..n {
            extra.push_str(&format!("  - {{name: s{i}, text: hi, every: 1s}}\n"));
        }
        extra
    };
    let dir = conformance(d.root.path(), "many", QUEUE, &declare(4));
    let error = d.client.start(&request(&dir)).await.expect_err("refused");
    assert_eq!(code(&error), "invalid_manifest", "{error}");
    assert!(
        error.to_string().contains("schedules.max_per_capsule") && error.to_string().contains('3'),
        "{error}"
    );
    assert!(d.client.schedules(None).await.expect("list").is_empty());
    let dir = conformance(d.root.path(), "enough", QUEUE, &declare(3));
    d.client.start(&request(&dir)).await.expect("at the limit");
    let mine = d.client.schedules(Some("enough")).await.expect("list");
    assert_eq!(mine.len(), 3, "{mine:?}");
}
