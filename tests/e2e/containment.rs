//! The red team: a hostile tool (`attacks/hostile.py`, run through an
//! allow-listed shell tool) tries to break out of the jail and to turn roostd's
//! own writes against the host. Every attack has a control that shows it works
//! outside the jail on this machine (in a roostd with `jail_tools: false`, or
//! run directly by the test process), so no test here can pass because the
//! attack itself was broken.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use roost_ctl::api::{SessionState, StartRequest};
use serde_json::{Value, json};

use crate::harness::{Daemon, TEST_CONFIG, capsule};
use crate::sandbox::{
    data, host_support, jailed_and_control, landlock_or_reported, run_shell, shell_in,
};

const HOSTILE: &str = include_str!("attacks/hostile.py");
const PYTHON: &str = "/usr/bin/python3";

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// What the hostile script reported: attack name → (worked, detail).
fn outcomes(text: &str) -> BTreeMap<String, (bool, String)> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .filter_map(|v| {
            Some((
                v["attack"].as_str()?.to_string(),
                (
                    v["ok"].as_bool()?,
                    v["detail"].as_str().unwrap_or_default().to_string(),
                ),
            ))
        })
        .collect()
}

/// The script's parameters for attacks on `target` (the daemon whose socket,
/// state and gateway are attacked).
fn params(target: &Daemon, attacks: &[&str], extra: Value) -> Value {
    let mut params = json!({
        "attacks": attacks,
        "socket": target.socket,
        "roostd_pid": target.pid(),
        "roostd_file": target.state_dir.join("checkpoint.key"),
    });
    if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
        p.extend(e);
    }
    params
}

/// Runs the script through the `sh` tool of `daemon`, in a fresh workdir.
async fn attack_in(
    daemon: &Daemon,
    params: &Value,
    caps: &str,
) -> BTreeMap<String, (bool, String)> {
    let (result, workdir) = run_shell(daemon, "sh", "true", caps).await;
    assert_eq!(result["status"], "passed", "{result}");
    std::fs::write(workdir.path().join("hostile.py"), HOSTILE).expect("script");
    std::fs::write(workdir.path().join("attack.json"), params.to_string()).expect("params");
    let (result, _w) = run_shell_in(daemon, workdir, &format!("{PYTHON} hostile.py"), caps).await;
    let found = outcomes(data(&result));
    assert!(
        !found.is_empty(),
        "the script ran: {result}\n{}",
        daemon.log()
    );
    found
}

/// Like `run_shell`, in an existing workdir.
async fn run_shell_in(
    daemon: &Daemon,
    workdir: tempfile::TempDir,
    command: &str,
    caps: &str,
) -> (Value, tempfile::TempDir) {
    let (_, result) = shell_in(daemon, workdir.path(), "sh", command, caps).await;
    (result, workdir)
}

/// The same script run by the test process itself: outside any jail.
fn attack_directly(params: &Value) -> BTreeMap<String, (bool, String)> {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("hostile.py"), HOSTILE).expect("script");
    std::fs::write(dir.path().join("attack.json"), params.to_string()).expect("params");
    let out = std::process::Command::new(PYTHON)
        .arg("hostile.py")
        .current_dir(dir.path())
        .output()
        .expect("python3");
    outcomes(&String::from_utf8_lossy(&out.stdout))
}

fn alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).join("stat").exists()
        && !std::fs::read_to_string(Path::new("/proc").join(pid).join("stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn kill(pid: &str) {
    if let Ok(pid) = pid.parse::<i32>() {
        // SAFETY: kill(2) on a process this test's control run left behind.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[tokio::test]
async fn a_hostile_tool_fails_every_attack_in_the_jail_and_succeeds_in_the_control() {
    if !Path::new(PYTHON).exists() {
        eprintln!("no {PYTHON}: the red-team script cannot run here; skipped");
        return;
    }
    let (jailed, control) = jailed_and_control().await;
    if !landlock_or_reported(&jailed) || !host_support().seccomp {
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    // Listeners that stay for the whole test (the kernel completes a connect
    // into the backlog without an accept).
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let (allowed_listener, unlisted_listener) = (bind(), bind());
    let allowed = allowed_listener.local_addr().expect("addr").port();
    let unlisted = unlisted_listener.local_addr().expect("addr").port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let abstract_name = format!("roost-redteam-{}", std::process::id());
    let abstract_addr = {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .expect("abstract name")
    };
    let _abstract = std::os::unix::net::UnixListener::bind_addr(&abstract_addr).expect("abstract");
    let caps = format!(", network: {{allow: [\"http://127.0.0.1:{allowed}\"]}}");
    let attacks = [
        "control_socket",
        "abstract_socket",
        "proc_environ",
        "roostd_files",
        "etc_shadow",
        "write_outside",
        "write_bookkeeping",
        "ptrace",
        "udp",
        "raw_socket",
        "netlink_socket",
        "packet_socket",
        "tcp_unlisted_port",
        "tcp_a2a_gateway",
        "fd_exhaustion",
        "leftover_child",
    ];
    let shared = json!({
        "abstract": abstract_name,
        "outside": outside.path(),
        "udp_port": udp.local_addr().expect("udp addr").port(),
        "unlisted_port": unlisted,
    });
    let extra = async |daemon: &Daemon| {
        let health = daemon.client.health().await.expect("health");
        let a2a_port: u16 = health
            .a2a_addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a2a port");
        let mut extra = shared.clone();
        extra["a2a_port"] = json!(a2a_port);
        extra
    };
    let inside = attack_in(
        &jailed,
        &params(&jailed, &attacks, extra(&jailed).await),
        &caps,
    )
    .await;
    let leftover = inside["leftover_child"].1.clone();
    let uncontained = attack_in(
        &control,
        &params(&control, &attacks, extra(&control).await),
        &caps,
    )
    .await;
    let direct = attack_directly(&params(&jailed, &["control_socket"], json!({})));

    for attack in attacks {
        let (worked, detail) = &inside[attack];
        if attack == "leftover_child" {
            assert!(*worked, "the tool could start a child: {detail}");
            continue;
        }
        assert!(!worked, "{attack} worked inside the jail: {detail}");
    }
    // The child a tool left running dies with the call (its pids cgroup), or
    // at the latest with its session (process group).
    assert!(
        !alive(&leftover),
        "a child left by a jailed tool survived the call: {leftover}"
    );

    // The controls: each attack works outside the jail.
    assert!(
        direct["control_socket"].0,
        "control: the test process reaches the control socket: {:?}",
        direct["control_socket"]
    );
    let control_child = uncontained["leftover_child"].1.clone();
    let child_survived = alive(&control_child);
    kill(&control_child);
    for attack in attacks {
        let (worked, detail) = &uncontained[attack];
        match attack {
            // Refused by the control socket's peer check even unjailed: a
            // tool is no operator, whatever its uid.
            "control_socket" => assert!(
                !worked && detail.contains("403"),
                "an unjailed tool is still refused by the control API: {detail}"
            ),
            // Reading others' files and privileged sockets need root.
            "proc_environ" | "roostd_files" | "etc_shadow" | "raw_socket" | "packet_socket"
            | "write_bookkeeping"
                if !root() =>
            {
                eprintln!("not root: control of {attack} skipped ({detail})")
            }
            "leftover_child" => {}
            _ => assert!(worked, "control: {attack} works outside the jail: {detail}"),
        }
    }
    if !host_support().pids_cgroup {
        assert!(
            child_survived || root(),
            "control: an unjailed child survives"
        );
    } else {
        assert!(
            child_survived,
            "control: an unjailed tool's child outlives the call"
        );
    }
}

#[tokio::test]
async fn unix_sockets_on_request_still_do_not_reach_the_control_api() {
    if !Path::new(PYTHON).exists() {
        eprintln!("no {PYTHON}: skipped");
        return;
    }
    let caps = ", network: {unix_sockets: true}";
    // Tools as root (no tool uid): the socket's mode lets them connect, and
    // the control API's own check must refuse them.
    let as_root = Daemon::start_with(
        &format!("{TEST_CONFIG}sandbox: {{tool_uids: null, unenforceable: warn}}\n"),
        &[],
    )
    .await;
    if !landlock_or_reported(&as_root) || !host_support().seccomp {
        return;
    }
    let found = attack_in(
        &as_root,
        &params(&as_root, &["control_socket"], json!({})),
        caps,
    )
    .await;
    let (worked, detail) = &found["control_socket"];
    assert!(
        !worked && detail.contains("403"),
        "the socket is reachable with unix_sockets, the API refuses the tool: {detail}"
    );
    let log = as_root.log();
    assert!(
        log.contains("control connection from a tool refused") && log.contains("session_id=ses_"),
        "the refusal is logged with the session: {log}"
    );
    assert!(
        log.contains("W-SEC-004"),
        "the capability is warned about: {log}"
    );
    // With a tool uid (the default as root), the socket's mode already keeps
    // the tool out.
    if root() {
        let daemon = Daemon::start().await;
        let found = attack_in(
            &daemon,
            &params(&daemon, &["control_socket"], json!({})),
            caps,
        )
        .await;
        let (worked, detail) = &found["control_socket"];
        assert!(
            !worked && detail.contains("Permission denied"),
            "the tool's uid may not connect to the 0660 socket: {detail}"
        );
    }
}

/// Runs `command` through `sh` in `workdir` (kept), returning the session id.
async fn plant(daemon: &Daemon, workdir: &Path, command: &str) -> (String, Value) {
    shell_in(daemon, workdir, "sh", command, "").await
}

fn guest_log(workdir: &Path, id: &str) -> PathBuf {
    workdir
        .join(".murmur")
        .join(id)
        .join("logs")
        .join("guest.log")
}

#[tokio::test]
async fn roostd_never_writes_through_links_a_tool_planted() {
    let daemon = Daemon::start().await;
    let outside = tempfile::tempdir().expect("outside");
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "precious\n").expect("victim");
    let logs = ".murmur/$MURMUR_SESSION_ID/logs";

    // The guest log, swapped for a symlink before the guest prints.
    let w = tempfile::tempdir().expect("workdir");
    let (id, planted) = plant(
        &daemon,
        w.path(),
        // The bookkeeping dir is roostd's (the tool's uid cannot write in
        // it), but the workdir is the tool's: it moves the whole dir aside.
        &format!(
            "mv .murmur .murmur-moved && mkdir -p {logs} && ln -sf {} {logs}/guest.log",
            victim.display()
        ),
    )
    .await;
    assert!(
        guest_log(w.path(), &id).is_symlink(),
        "the link was planted: {planted}"
    );
    // Control: a regular file planted at the same path gets the output, so
    // roostd does write there after the tool ran.
    let c = tempfile::tempdir().expect("control workdir");
    let (cid, _) = plant(
        &daemon,
        c.path(),
        &format!("mv .murmur .murmur-moved && mkdir -p {logs} && echo planted > {logs}/guest.log"),
    )
    .await;
    let control_log = std::fs::read_to_string(guest_log(c.path(), &cid)).expect("control log");
    assert!(
        control_log.starts_with("planted\n") && control_log.contains("shellrun: sh returned"),
        "control: roostd appends the guest's output at that path: {control_log}"
    );

    // A hard link to the outside file, where the jail lets the tool make one
    // (it does not: the link would cross out of the workdir), else in an
    // unjailed roostd.
    let unjailed = Daemon::start_with(
        &format!("{TEST_CONFIG}sandbox: {{jail_tools: false}}\n"),
        &[],
    )
    .await;
    let h = tempfile::tempdir().expect("workdir");
    let (hid, _) = plant(
        &unjailed,
        h.path(),
        &format!(
            "mkdir -p {logs} && ln {} {logs}/guest.log",
            victim.display()
        ),
    )
    .await;
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(guest_log(h.path(), &hid))
                .expect("link")
                .nlink(),
            2,
            "the hard link was planted"
        );
    }

    // A dangling link where roostd copies the manifest, then the bookkeeping
    // dir itself swapped for a link, before the next session on the same
    // workdir: nothing is created or installed through either.
    let b = tempfile::tempdir().expect("workdir");
    let made = outside.path().join("made-by-roostd.yaml");
    plant(
        &daemon,
        b.path(),
        &format!("rm -f murmur.yaml && ln -s {} murmur.yaml", made.display()),
    )
    .await;
    let elsewhere = outside.path().join("bookkeeping");
    std::fs::create_dir(&elsewhere).expect("elsewhere");
    plant(
        &daemon,
        b.path(),
        &format!(
            "mv .murmur .murmur-old && ln -s {} .murmur",
            elsewhere.display()
        ),
    )
    .await;
    // The next session on that workdir: refused to install through the link.
    let dir = capsule(
        daemon.root.path(),
        "next",
        "shellrun",
        "tools: [sh]\ncapabilities: {shell: {allow: [sh]}}\n",
    );
    std::fs::write(b.path().join("shell-command.txt"), "true").expect("command");
    let next = daemon
        .client
        .start(&StartRequest {
            path: dir.display().to_string(),
            workdir: Some(b.path().display().to_string()),
            ..StartRequest::default()
        })
        .await
        .expect("start");
    let next = daemon.client.wait(&next.id).await.expect("wait");
    assert_eq!(next.state, SessionState::Failed, "{next:?}");
    assert!(
        next.error
            .as_deref()
            .unwrap_or_default()
            .contains("symlink"),
        "the failure says why: {next:?}"
    );

    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n",
        "nothing was written through a link"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("elsewhere").count(),
        0,
        "nothing was installed through the linked bookkeeping dir"
    );
    assert!(
        !made.exists(),
        "the manifest copy did not follow a dangling link"
    );
    assert!(
        daemon.log().contains("refusing") && unjailed.log().contains("hard link"),
        "roostd says what it refused:\n{}\n{}",
        daemon.log(),
        unjailed.log()
    );
}

#[tokio::test]
async fn a_renamed_roostd_still_jails_its_tools() {
    let bin = tempfile::tempdir().expect("bin");
    let renamed = bin.path().join("roostd-wrapped");
    // Copied by another process: a descriptor open for writing in this one
    // could leak into a concurrent test's fork and make the exec ETXTBSY.
    let copied = std::process::Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_roostd"))
        .arg(&renamed)
        .status()
        .expect("cp");
    assert!(copied.success(), "copy roostd");
    let daemon = Daemon::start_binary(&renamed, TEST_CONFIG, &[]).await;
    let health = daemon.client.health().await.expect("health");
    assert_eq!(
        health.jail_helper.as_deref(),
        Some(renamed.to_str().expect("utf-8")),
        "no roost-jail beside it: the renamed binary plays the helper"
    );
    if !landlock_or_reported(&daemon) {
        return;
    }
    let (result, _w) = run_shell(&daemon, "sh", "cat /etc/shadow", "").await;
    assert_eq!(result["status"], "failed", "{result}");
    assert!(
        data(&result).contains("Permission denied"),
        "the renamed roostd jails the tool: {result}"
    );
    let tier = health.tool_jail.unwrap_or_default();
    assert!(
        !tier.starts_with("none") && !tier.starts_with("unjailed"),
        "{tier}"
    );
}

#[tokio::test]
async fn tools_of_a_root_roostd_run_as_an_unprivileged_uid_per_workdir() {
    if !root() {
        eprintln!("roostd is not root here: tools already run as its unprivileged user; skipped");
        return;
    }
    let (jailed, control) = jailed_and_control().await;
    let ids = "id -u; id -g; id -G; touch mine; stat -c %u mine";
    let (first, workdir) = run_shell(&jailed, "sh", ids, "").await;
    let text = data(&first).to_string();
    let numbers: Vec<u64> = text
        .lines()
        .skip_while(|l| !l.starts_with("Stdout:"))
        .skip(1)
        .take(4)
        .flat_map(|l| l.split_whitespace().map(|n| n.parse::<u64>().unwrap_or(0)))
        .collect();
    let range = roostd::sandbox::identity::UidRange::default();
    let uid = numbers.first().copied().unwrap_or(0);
    assert!(
        uid > u64::from(range.first) && uid < u64::from(range.first + range.count),
        "a jailed tool runs as a uid of sandbox.tool_uids: {text}"
    );
    assert_eq!(
        numbers,
        [uid, uid, uid, u64::from(range.first), uid],
        "uid, gid, groups (its own and the tool group), and what it creates is its own: {text}"
    );
    // The same workdir keeps its uid; another gets another.
    let (again, workdir) = run_shell_in(&jailed, workdir, "id -u", "").await;
    assert!(data(&again).contains(&format!("\n{uid}\n")), "{again}");
    let (other, _w) = run_shell(&jailed, "sh", "id -u", "").await;
    assert!(!data(&other).contains(&format!("\n{uid}\n")), "{other}");
    drop(workdir);
    // An operator's existing tree is the tool's to work in (ACL entries),
    // roostd's bookkeeping in it is not.
    let tree = tempfile::tempdir().expect("workdir");
    std::fs::create_dir_all(tree.path().join("src/deep")).expect("dirs");
    std::fs::write(tree.path().join("src/deep/notes.txt"), "old\n").expect("file");
    let (edited, tree) = run_shell_in(
        &jailed,
        tree,
        "echo new >> src/deep/notes.txt && mkdir src/deep/made && \
         (touch .murmur/$MURMUR_SESSION_ID/forged 2>/dev/null && echo forged || echo kept-out)",
        "",
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(tree.path().join("src/deep/notes.txt")).expect("notes"),
        "old\nnew\n",
        "{edited}"
    );
    assert!(data(&edited).contains("kept-out"), "{edited}");
    // Control: without the jail, the tool is root.
    let (root_tool, _w) = run_shell(&control, "sh", "id -u", "").await;
    assert!(data(&root_tool).contains("\n0\n"), "{root_tool}");
}

#[tokio::test]
async fn a_setuid_binary_gives_a_jailed_tool_no_privilege() {
    if !root() {
        eprintln!("not root: cannot make a setuid-root binary; skipped");
        return;
    }
    let daemon = Daemon::start().await;
    let workdir = tempfile::tempdir().expect("workdir");
    let suid = workdir.path().join("suid-id");
    let copied = std::process::Command::new("cp")
        .arg("/usr/bin/id")
        .arg(&suid)
        .status()
        .expect("cp");
    assert!(copied.success());
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        std::fs::set_permissions(workdir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let (result, workdir) = run_shell_in(&daemon, workdir, "id -u; ./suid-id -u", "").await;
    let out: Vec<u32> = data(&result)
        .lines()
        .skip_while(|l| !l.starts_with("Stdout:"))
        .skip(1)
        .take(2)
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(out.len(), 2, "{result}");
    assert_ne!(out[0], 0, "the tool has its own uid: {result}");
    assert_eq!(
        out[1], out[0],
        "no_new_privs: the setuid bit gives the tool nothing: {result}"
    );
    // Control: the same binary run by that uid outside the jail is root.
    use std::os::unix::process::CommandExt;
    let control = std::process::Command::new(workdir.path().join("suid-id"))
        .arg("-u")
        .uid(out[0])
        .gid(out[0])
        .output()
        .expect("run suid-id as the tool uid");
    assert_eq!(
        String::from_utf8_lossy(&control.stdout).trim(),
        "0",
        "control: outside the jail the setuid bit works: {control:?}"
    );
}

#[tokio::test]
async fn a_flood_of_output_is_cut_and_saved_not_held() {
    let daemon = Daemon::start().await;
    let flood = "head -c 104857600 /dev/zero | tr '\\0' x";
    let (result, workdir) = run_shell(&daemon, "sh", flood, "").await;
    let text = data(&result);
    assert!(
        text.len() < 20 * 1024 && text.contains("Output truncated. Full output written to"),
        "the inline result is cut: {} bytes",
        text.len()
    );
    let saved = text
        .rsplit("written to ")
        .next()
        .map(str::trim)
        .expect("a path");
    let size = std::fs::metadata(workdir.path().join(saved))
        .expect("the saved output")
        .len();
    assert!(
        size > 1 << 20 && size < 9 << 20,
        "at most the capture bound (8 MiB) is kept: {size}"
    );
    let health = daemon.client.health().await.expect("roostd is still there");
    assert_eq!(health.status, "ok");
    // Control: the command does write 100 MiB.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{flood} | wc -c"))
        .output()
        .expect("sh");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "104857600");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_trace_and_checkpoint_signatures_are_not_written_through_links() {
    use crate::agents::{agent, agent_daemon, with_task};
    use crate::mock_llm::{MockLlm, Reply};
    let daemon = agent_daemon().await;
    let outside = tempfile::tempdir().expect("outside");
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "precious\n").expect("victim");
    // The model's one tool call plants links where roostd writes at the end
    // of the task (the trace) and of the session (checkpoint signatures).
    let links = |target: &str| {
        format!(
            "rm -f trace.jsonl && ln -s {target} trace.jsonl && mkdir -p .murmur checkpoints \
             && echo notes > checkpoints/goals.md \
             && ln -s {target} .murmur/checkpoint-signatures.json"
        )
    };
    let command = links(&victim.display().to_string());
    let mock = MockLlm::start(move |seen| {
        if seen.messages().len() == 1 {
            Reply::tools(&[("sh", &serde_json::json!({ "command": command }).to_string())])
        } else {
            Reply::text("done")
        }
    })
    .await;
    let dir = agent(daemon.root.path(), "linker", &mock, "", "");
    let session = daemon
        .client
        .start(&with_task(&dir, "Plant the links."))
        .await
        .expect("start");
    let session = daemon.client.wait(&session.id).await.expect("wait");
    assert_eq!(
        session.state,
        SessionState::Completed,
        "{session:?}\n{}",
        daemon.log()
    );
    let workdir = PathBuf::from(&session.workdir);
    assert!(
        workdir.join("trace.jsonl").is_symlink()
            && workdir.join(".murmur/checkpoint-signatures.json").exists(),
        "the tool ran and planted its links"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n",
        "neither the trace nor the signatures went through a link"
    );
    assert!(
        !workdir
            .join(".murmur/checkpoint-signatures.json")
            .is_symlink(),
        "the signatures replaced the link instead of following it"
    );
    assert!(
        daemon.client.trace(&session.id).await.is_err(),
        "roostctl trace does not follow the link either"
    );

    // Control: a regular file planted in the trace's place gets the trace.
    let control_mock = MockLlm::start(|seen| {
        if seen.messages().len() == 1 {
            Reply::tools(&[(
                "sh",
                r#"{"command":"rm -f trace.jsonl && echo planted > trace.jsonl"}"#,
            )])
        } else {
            Reply::text("done")
        }
    })
    .await;
    let dir = agent(daemon.root.path(), "planter", &control_mock, "", "");
    let session = daemon
        .client
        .start(&with_task(&dir, "Plant a file."))
        .await
        .expect("start");
    let session = daemon.client.wait(&session.id).await.expect("wait");
    let trace = std::fs::read_to_string(PathBuf::from(&session.workdir).join("trace.jsonl"))
        .expect("control trace");
    assert!(
        trace.starts_with("planted\n") && trace.contains("task_end"),
        "control: roostd appends the trace at that path: {trace}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_a_lock_write_and_restarts_do_not_follow_planted_links() {
    use crate::harness::{artifact_dir, guest, publish};
    let daemon = Daemon::start_with(
        &format!("{TEST_CONFIG}{}", crate::supervision::FAST_RESTARTS),
        &[],
    )
    .await;
    let registry = daemon.state_dir.join("registry");
    let echo = std::fs::read(guest("echo_tool")).expect("echo tool");
    for manifest in [
        "name: echo-tool\nversion: 1.0.0\nruntime: tool\ndescription: Echo\n",
        "name: late-tool\nversion: 1.0.0\nruntime: tool\ndescription: A late echo\n",
    ] {
        let dir = artifact_dir(daemon.root.path(), manifest, "component.wasm", &echo);
        publish(&registry, &dir).await;
    }
    let outside = tempfile::tempdir().expect("outside");
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "precious\n").expect("victim");
    let made = outside.path().join("made.lock");
    let pulled = outside.path().join("pulled");
    std::fs::create_dir(&pulled).expect("pulled");
    // The capsule dir is the workdir: its murmur.lock is where tools write.
    let dir = capsule(
        daemon.root.path(),
        "puller",
        "shellrun",
        "artifacts:\n  - {name: echo-tool, version: 1.0.0, runtime: tool}\n\
         tools: [sh, echo-tool]\ncapabilities: {shell: {allow: [sh]}}\n",
    );
    let tools = ".murmur/$MURMUR_SESSION_ID/tools";
    std::fs::write(dir.join("shell-pull.txt"), "late-tool 1.0.0").expect("pull spec");
    let (_, result) = shell_in(
        &daemon,
        &dir,
        "sh",
        &format!(
            "rm -f murmur.lock && ln -s {} murmur.lock && mv .murmur .murmur-moved \
             && mkdir -p {tools} && ln -s {} {tools}/late-tool",
            made.display(),
            pulled.display()
        ),
        "",
    )
    .await;
    assert_eq!(
        result["status"], "passed",
        "the links were planted: {result}"
    );
    let pull: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("shell-pull-result.json")).expect("pull result"),
    )
    .expect("json");
    assert_eq!(pull["ok"], false, "{pull}");
    assert!(
        pull["error"]
            .as_str()
            .unwrap_or_default()
            .contains("symlink"),
        "{pull}"
    );
    assert_eq!(
        std::fs::read_dir(&pulled).expect("pulled").count(),
        0,
        "nothing was installed through the link"
    );

    // The next session on that dir writes a new lock (the planted one is a
    // dangling link): over the link, not through it. Its guest then fails
    // after each tool call, and every restart opens the log the tool
    // swapped for a link again.
    std::fs::remove_file(dir.join("shell-pull.txt")).expect("no pull");
    std::fs::write(dir.join("shell-then-panic.txt"), "").expect("panic");
    std::fs::write(
        dir.join("shell-command.txt"),
        format!(
            "mkdir -p .moved && mv .murmur .moved/$(date +%s%N) && mkdir -p {logs} \
             && ln -sf {} {logs}/guest.log",
            victim.display(),
            logs = ".murmur/$MURMUR_SESSION_ID/logs"
        ),
    )
    .expect("command");
    let session = daemon
        .client
        .start(&StartRequest {
            path: dir.display().to_string(),
            workdir: Some(dir.display().to_string()),
            restart: roost_ctl::api::RestartPolicy::OnFailure,
            ..StartRequest::default()
        })
        .await
        .expect("start");
    let end = daemon.client.wait(&session.id).await.expect("wait");
    assert_eq!(end.state, SessionState::Failed, "{end:?}");
    assert_eq!(end.restart_count, 3, "restarted, then gave up: {end:?}");
    assert!(
        dir.join("murmur.lock").is_file() && !dir.join("murmur.lock").is_symlink(),
        "the lock replaced the link"
    );
    assert!(!made.exists(), "no lock was written through the link");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n",
        "no restart appended the guest's output through the link"
    );
    let refusals = daemon
        .log()
        .matches("guest output is not written to the log")
        .count();
    assert!(
        refusals >= 4,
        "each run refused the planted log ({refusals})"
    );
}

#[tokio::test]
async fn a_tool_uid_may_pass_the_state_dir_to_its_workdir_but_read_nothing_there() {
    if !root() || !Path::new(PYTHON).exists() {
        eprintln!("needs root and {PYTHON}: skipped");
        return;
    }
    let daemon = Daemon::start().await;
    // A session without --workdir: its workdir is in the state dir.
    let dir = capsule(
        daemon.root.path(),
        "stateful",
        "hello",
        "tools: [sh]\ncapabilities: {shell: {allow: [sh]}}\n",
    );
    let session = daemon.run_to_end(&dir).await;
    let workdir = PathBuf::from(&session.workdir);
    assert!(workdir.starts_with(&daemon.state_dir), "{session:?}");
    let id = roostd::sandbox::identity::UidRange::default().for_workdir(&workdir);
    let probe = |drop: bool| {
        let script = format!(
            "import os, socket, json\n\
             if {drop}:\n    os.setgroups([{group}]); os.setgid({uid}); os.setuid({uid})\n\
             def tryit(fn):\n    try:\n        fn(); return True\n    except OSError:\n        return False\n\
             def connect():\n    s = socket.socket(socket.AF_UNIX); s.connect({socket:?})\n\
             print(json.dumps({{\n\
             'workdir': tryit(lambda: os.listdir({workdir:?})),\n\
             'database': tryit(lambda: open({db:?}, 'rb').read(1)),\n\
             'key': tryit(lambda: open({key:?}, 'rb').read(1)),\n\
             'list_state': tryit(lambda: os.listdir({state:?})),\n\
             'socket': tryit(connect),\n\
             }}))\n",
            drop = if drop { "True" } else { "False" },
            group = id.group,
            uid = id.uid,
            socket = daemon.socket.display().to_string(),
            workdir = workdir.display().to_string(),
            db = daemon.state_dir.join("roost.db").display().to_string(),
            key = daemon
                .state_dir
                .join("checkpoint.key")
                .display()
                .to_string(),
            state = daemon.state_dir.display().to_string(),
        );
        let out = std::process::Command::new(PYTHON)
            .arg("-c")
            .arg(script)
            .output()
            .expect("python3");
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let as_tool = probe(true);
    assert_eq!(
        as_tool["workdir"], true,
        "the tool uid reaches its workdir: {as_tool}"
    );
    for secret in ["database", "key", "list_state", "socket"] {
        assert_eq!(
            as_tool[secret], false,
            "the tool uid gets no {secret}: {as_tool}"
        );
    }
    // Control: roostd's own uid gets all of it.
    let as_roostd = probe(false);
    for what in ["workdir", "database", "key", "list_state", "socket"] {
        assert_eq!(as_roostd[what], true, "control: {what}: {as_roostd}");
    }
}
