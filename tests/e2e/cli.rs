//! roostctl as an operator runs it: the built binary, its exit codes (the
//! table in `roostctl --help`), `--json` and `-q`, `--timeout`, `restart`,
//! `cancel`, `card`, `events -f`, `logs --tail/--since/--timestamps/--json`,
//! `publish --to-daemon`, completions and help.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Daemon, artifact_dir, capsule, conformance, guest, spinner};

/// The roostctl built beside this test's roostd (`scripts/test` builds it).
pub(crate) fn roostctl() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_roostd")).with_file_name("roostctl");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build --workspace --bins`",
        path.display()
    );
    path
}

struct Ctl {
    socket: String,
}

impl Ctl {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(roostctl())
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .env_remove("ROOST_SOCKET")
            .env("NO_COLOR", "1")
            .output()
            .expect("run roostctl")
    }

    /// Runs and checks the exit code; answers stdout.
    fn expect(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "roostctl {args:?}: stdout {} stderr {}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_say_what_happened_before_any_daemon_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nobody = Ctl {
        socket: dir.path().join("none.sock").display().to_string(),
    };
    let out = nobody.run(&["list"]);
    assert_eq!(out.status.code(), Some(5), "unreachable");
    assert!(text(&out.stderr).contains("no roostd is listening"));
    // Usage: a missing argument, --timeout without --wait, a bad duration.
    assert_eq!(nobody.run(&["start"]).status.code(), Some(2));
    assert_eq!(
        nobody.run(&["start", "x", "--timeout", "5s"]).status.code(),
        Some(2)
    );
    let bad = nobody.run(&["logs", "x", "--since", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("such as 30s"),
        "{}",
        text(&bad.stderr)
    );
    let help = nobody.expect(&["--help"], 0);
    assert!(
        help.contains("Exit codes:") && help.contains("7  --timeout"),
        "{help}"
    );
    let start_help = nobody.expect(&["start", "--help"], 0);
    assert!(start_help.contains("Examples:") && start_help.contains("--after-task <WHAT>"));
    let bash = nobody.expect(&["completions", "bash"], 0);
    assert!(
        bash.contains("_roostctl()") && bash.contains("restart"),
        "{bash}"
    );
    let man = dir.path().join("man");
    nobody.expect(&["manpages", man.to_str().expect("utf-8")], 0);
    assert!(man.join("roostctl.1").is_file() && man.join("roostctl-logs.1").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_exit_with_their_end_restart_in_place_and_stream_their_events() {
    let daemon = Daemon::start().await;
    let ctl = Ctl {
        socket: daemon.socket.display().to_string(),
    };
    // A follower of every state change, from now on.
    let mut follower = Command::new(roostctl())
        .args([
            "--socket",
            &ctl.socket,
            "events",
            "-f",
            "--json",
            "--tail",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("events -f");
    let lines = std::io::BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let root = daemon.root.path();
    let panicky = capsule(root, "panicky", "panic", "");
    let failed = ctl.expect(&["start", panicky.to_str().expect("utf-8"), "--wait"], 3);
    assert!(failed.contains("failed"), "{failed}");
    let spin = spinner(root);
    let spin = spin.to_str().expect("utf-8");
    let timed_out = ctl.run(&["start", spin, "--name", "spin", "--wait", "--timeout", "1s"]);
    assert_eq!(timed_out.status.code(), Some(7));
    assert!(
        text(&timed_out.stderr).contains("is still running after 1s"),
        "{}",
        text(&timed_out.stderr)
    );
    // -q and --json.
    let ids = ctl.expect(&["list", "-q"], 0);
    let spin_id = ids.trim().to_string();
    assert_eq!(spin_id.lines().count(), 1, "{ids}");
    let listed: serde_json::Value =
        serde_json::from_str(&ctl.expect(&["list", "--all", "--json"], 0)).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(2));
    let table = ctl.expect(&["list"], 0);
    assert!(table.starts_with("ID") && table.contains(" AGE ") && table.contains("running"));
    // restart: same id and name, one more restart, running again.
    let restarted: serde_json::Value =
        serde_json::from_str(&ctl.expect(&["restart", "spin", "--json"], 0)).expect("json");
    assert_eq!(restarted["id"], spin_id.as_str());
    assert_eq!(restarted["restart_count"], 1);
    // Answered once its row says it runs again (`starting`, then `running`).
    assert!(
        ["starting", "running"].contains(&restarted["state"].as_str().unwrap_or("")),
        "{restarted}"
    );
    ctl.expect(&["stop", "spin"], 0);
    assert_eq!(ctl.run(&["restart", "ghost"]).status.code(), Some(4));

    // The follower saw the spinner run, stop for the restart, start again
    // and stop, in that order.
    let mut seen: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.iter().filter(|s| *s == "stopped").count() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("events -f keeps printing");
        let event: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        if event["session_id"] == spin_id.as_str() {
            seen.push(event["state"].as_str().expect("state").to_string());
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert_eq!(
        seen,
        ["running", "stopped", "starting", "running", "stopped"],
        "{seen:?}"
    );
    let history = ctl.expect(&["events", "--tail", "2"], 0);
    assert_eq!(history.lines().count(), 2, "{history}");
    assert!(
        history.contains("stopped") && history.contains("spin"),
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_by_line_with_times_and_a2a_verbs_exit_with_the_task() {
    let daemon = Daemon::start().await;
    let ctl = Ctl {
        socket: daemon.socket.display().to_string(),
    };
    let root = daemon.root.path();
    let loud = capsule(root, "loud", "loud", "");
    ctl.expect(&["start", loud.to_str().expect("utf-8"), "--wait"], 0);
    let tail = ctl.expect(&["logs", "loud", "--tail", "3"], 0);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 3, "{tail}");
    assert!(lines[2].starts_with("line 20000 "), "{tail}");
    let stamped = ctl.expect(&["logs", "loud", "-n", "1", "--timestamps"], 0);
    let (time, rest) = stamped.trim_end().split_once(' ').expect("time, then line");
    assert!(humantime::parse_rfc3339(time).is_ok(), "{stamped}");
    assert!(rest.starts_with("line 20000 "), "{stamped}");
    let json = ctl.expect(&["logs", "loud", "--tail", "2", "--json"], 0);
    let parsed: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[1]["stream"], "stdout");
    assert!(
        parsed[1]["line"]
            .as_str()
            .expect("line")
            .starts_with("line 20000")
    );
    assert_eq!(
        ctl.expect(&["logs", "loud", "--since", "1h", "-n", "1"], 0)
            .lines()
            .count(),
        1
    );
    // Everything was written before now.
    assert_eq!(ctl.expect(&["logs", "loud", "--since", "0s"], 0), "");

    // A2A: the task's end is the exit code.
    let dir = conformance(
        root,
        "agent",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    ctl.expect(&["start", dir.to_str().expect("utf-8")], 0);
    assert!(
        ctl.expect(&["send", "agent", "hello"], 0)
            .contains("completed")
    );
    ctl.expect(&["send", "agent", "fail"], 3);
    ctl.expect(&["send", "agent", "reject"], 3);
    let waiting = ctl.run(&["send", "agent", "sleep", "--stream", "--timeout", "2s"]);
    assert_eq!(waiting.status.code(), Some(7));
    let said = text(&waiting.stderr);
    let task = said
        .split_whitespace()
        .find(|w| w.starts_with("tsk_"))
        .unwrap_or_else(|| panic!("the timeout names the task: {said}"))
        .to_string();
    let canceled = ctl.expect(&["cancel", "agent", &task], 0);
    assert_eq!(canceled.trim(), format!("task {task} canceled"));
    assert_eq!(
        ctl.run(&["cancel", "agent", "tsk_nope"]).status.code(),
        Some(4)
    );
    let card: serde_json::Value =
        serde_json::from_str(&ctl.expect(&["card", "agent", "--json"], 0)).expect("card");
    assert_eq!(card["name"], "agent");
    assert!(ctl.expect(&["card", "agent"], 0).contains("interfaces"));
    assert_eq!(ctl.run(&["card", "nobody"]).status.code(), Some(4));

    // publish --to-daemon: into roostd's own registry, the same bytes twice.
    let echo = std::fs::read(guest("echo_tool")).expect("echo tool");
    let tool = artifact_dir(
        root,
        "name: echo-tool\nversion: 1.0.0\nruntime: tool\ndescription: Echo\n",
        "component.wasm",
        &echo,
    );
    let tool = tool.to_str().expect("utf-8");
    let first: serde_json::Value =
        serde_json::from_str(&ctl.expect(&["publish", tool, "--to-daemon", "--json"], 0))
            .expect("json");
    let path = PathBuf::from(first["path"].as_str().expect("path"));
    assert!(
        path.starts_with(daemon.state_dir.join("registry")),
        "{path:?}"
    );
    assert_eq!(std::fs::read(&path).map(|b| b.is_empty()).ok(), Some(false));
    assert_eq!(first["unchanged"], false);
    let again = ctl.expect(&["publish", tool, "--to-daemon", "-q"], 0);
    assert_eq!(again.trim(), "echo-tool@1.0.0");
    let not_an_artifact = root.join("empty-dir");
    std::fs::create_dir_all(&not_an_artifact).expect("dir");
    let refused = ctl.run(&[
        "publish",
        not_an_artifact.to_str().expect("utf-8"),
        "--to-daemon",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
}

/// On a terminal (a pty from util-linux's `script`): `start` shows each
/// staging step on one line it rewrites, and `list` colours states; with
/// `NO_COLOR` set, no colour. The controls: the same commands through a pipe
/// (every other test here) print neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_start_shows_its_steps_and_list_colours_unless_no_color() {
    let daemon = Daemon::start().await;
    let hello = capsule(daemon.root.path(), "tty", "hello", "");
    let on_tty = |args: &str, no_color: bool| {
        let line = format!(
            "{} --socket {} {args}",
            roostctl().display(),
            daemon.socket.display()
        );
        let mut command = Command::new("script");
        command
            .args(["-qec", &line, "/dev/null"])
            .env("TERM", "xterm")
            .env_remove("ROOST_SOCKET")
            .env_remove("NO_COLOR");
        if no_color {
            command.env("NO_COLOR", "1");
        }
        let out = command.output().expect("run script(1)");
        assert!(out.status.success(), "{args}: {}", text(&out.stdout));
        text(&out.stdout)
    };
    let started = on_tty(&format!("start {} --wait", hello.display()), false);
    assert!(
        started.contains("\x1b[2Kcompile ") && started.contains("\x1b[2Kread "),
        "{started:?}"
    );
    let listed = on_tty("list --all", false);
    assert!(listed.contains("\x1b[2mcompleted\x1b[0m"), "{listed:?}");
    let plain = on_tty("list --all", true);
    assert!(
        plain.contains("completed") && !plain.contains("\x1b["),
        "{plain:?}"
    );
    let piped = Command::new(roostctl())
        .args([
            "--socket",
            &daemon.socket.display().to_string(),
            "list",
            "--all",
        ])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .expect("roostctl through a pipe");
    let piped = text(&piped.stdout);
    assert!(
        piped.contains("completed") && !piped.contains("\x1b["),
        "{piped:?}"
    );
}
