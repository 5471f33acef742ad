//! roostctl's command line: argument parsing and human/JSON rendering over [`Client`].

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::api::{RestartPolicy, Session, StartRequest};
use crate::client::{Client, ClientError, absolutize};
use crate::paths;

#[derive(Debug, Parser)]
#[command(name = "roostctl", version, about = "Drive a roostd daemon")]
pub struct Cli {
    /// Control socket of the daemon (default: $ROOST_SOCKET, then the system or XDG default).
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a capsule session from a capsule directory or its murmur.yaml.
    Start {
        path: PathBuf,
        /// Route name (default: the capsule name, if no live session has it).
        #[arg(long)]
        name: Option<String>,
        /// Existing directory the capsule sees as its workdir.
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Restart policy: no, on-failure or always.
        #[arg(long, default_value = "no")]
        restart: RestartPolicy,
        /// Wait until the session ends; exit 0 only if it completed.
        #[arg(long)]
        wait: bool,
        /// A task for an agent capsule, written to task.md in its workdir.
        #[arg(long, conflicts_with = "task_file")]
        task: Option<String>,
        /// Read the task from a file (`-` for stdin).
        #[arg(long)]
        task_file: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Stop a session (final until it is started again).
    Stop {
        id_or_name: String,
        #[arg(long)]
        json: bool,
    },
    /// List live sessions (with --all, ended ones too).
    List {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show one session.
    Status {
        id_or_name: String,
        #[arg(long)]
        json: bool,
    },
    /// Pack an artifact directory (murmur.yaml + payload) and publish it to a registry.
    Publish {
        dir: PathBuf,
        /// Registry directory (default: $ROOST_REGISTRY, then `registry/` in the default state dir).
        #[arg(long)]
        registry: Option<PathBuf>,
        /// Platform of the bundle: `any`, or `<os>-<arch>` (default: this host's
        /// platform for native tools, `any` for everything else).
        #[arg(long)]
        platform: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The effective policy a capsule would run under on the daemon's host.
    Policy {
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// What this host can enforce, and whether roostd's files and unit are safe.
    Doctor {
        /// State dir to check (default: the system or XDG default).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// systemd unit to check.
        #[arg(long, default_value = "/etc/systemd/system/roostd.service")]
        unit: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Send a message to an agent session over A2A (its reply, or the stream with --stream).
    Send {
        route: String,
        text: String,
        /// Print each event as it streams (SendStreamingMessage).
        #[arg(long)]
        stream: bool,
        /// Continue this task.
        #[arg(long)]
        task_id: Option<String>,
        /// Print the JSON results.
        #[arg(long)]
        json: bool,
    },
    /// An agent session's tasks: states, times and token use.
    Tasks {
        id_or_name: String,
        #[arg(long)]
        json: bool,
    },
    /// Show an agent session's trace (inference calls, tool calls, tasks).
    Trace {
        id_or_name: String,
        /// Pass trace.jsonl through as written.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's captured guest output.
    Logs {
        id_or_name: String,
        /// Keep printing until the session ends.
        #[arg(short, long)]
        follow: bool,
    },
}

/// What a failed command reports; every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Bundle(#[from] crate::artifact::BundleError),
    #[error(transparent)]
    Registry(#[from] crate::artifact::RegistryError),
}

/// Runs one command, printing to `out`; returns the process exit code.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<i32, CliError> {
    let client = Client::new(paths::resolve_socket(cli.socket));
    match cli.command {
        Command::Start {
            path,
            name,
            workdir,
            restart,
            wait,
            task,
            task_file,
            json,
        } => {
            let task = match (task, task_file) {
                (Some(text), _) => Some(text),
                (None, Some(file)) => Some(read_task(&file)?),
                (None, None) => None,
            };
            let path = absolutize(&path).map_err(|e| CliError::Usage(e.to_string()))?;
            let workdir = workdir
                .map(|w| absolutize(&w))
                .transpose()
                .map_err(|e| CliError::Usage(e.to_string()))?;
            let request = StartRequest {
                path: path.display().to_string(),
                name,
                workdir: workdir.map(|w| w.display().to_string()),
                restart,
                task,
            };
            let mut session = client.start(&request).await?;
            if wait {
                session = client.wait(&session.id).await?;
            }
            print_session(out, &session, json)?;
            Ok(
                if wait && session.state != crate::api::SessionState::Completed {
                    1
                } else {
                    0
                },
            )
        }
        Command::Stop { id_or_name, json } => {
            let session = client.stop(&id_or_name).await?;
            print_session(out, &session, json)?;
            Ok(0)
        }
        Command::List { all, json } => {
            let sessions = client.list(all).await?;
            if json {
                serde_json::to_writer_pretty(&mut *out, &sessions)
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                writeln!(out)?;
            } else {
                print_table(out, &sessions)?;
            }
            Ok(0)
        }
        Command::Status { id_or_name, json } => {
            let session = client.get(&id_or_name).await?;
            print_session(out, &session, json)?;
            if !json {
                let tasks = client.tasks(&session.id).await?;
                print_usage(out, &session, &tasks)?;
            }
            Ok(0)
        }
        Command::Send {
            route,
            text,
            stream,
            task_id,
            json,
        } => {
            let health = client.health().await?;
            let token = std::env::var("ROOST_A2A_TOKEN").ok();
            let mut failed = None;
            crate::a2a::send(
                &crate::a2a::Send {
                    addr: &health.a2a_addr,
                    route: &route,
                    text: &text,
                    task_id: task_id.as_deref(),
                    stream,
                    token: token.as_deref(),
                },
                |event| {
                    let line = if json {
                        event.to_string()
                    } else if event.get("artifactUpdate").is_some() {
                        // Streamed text is printed as it comes, without newlines.
                        let chunk = crate::a2a::describe(event);
                        let last = event["artifactUpdate"]["lastChunk"] == true;
                        let write = if last { "\n".to_string() } else { chunk };
                        if failed.is_none()
                            && let Err(e) =
                                out.write_all(write.as_bytes()).and_then(|()| out.flush())
                        {
                            failed = Some(e);
                        }
                        return;
                    } else {
                        crate::a2a::describe(event)
                    };
                    if failed.is_none()
                        && let Err(e) = writeln!(out, "{line}")
                    {
                        failed = Some(e);
                    }
                },
            )
            .await?;
            match failed {
                Some(e) => Err(e.into()),
                None => Ok(0),
            }
        }
        Command::Tasks { id_or_name, json } => {
            let tasks = client.tasks(&id_or_name).await?;
            if json {
                serde_json::to_writer_pretty(&mut *out, &tasks)
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                writeln!(out)?;
            } else {
                writeln!(
                    out,
                    "{:<36} {:<10} {:<8} {:<24} {:<24} {:>8} {:>8} {:>5}",
                    "TASK", "STATE", "SOURCE", "CREATED", "ENDED", "IN", "OUT", "TURNS"
                )?;
                for t in &tasks {
                    writeln!(
                        out,
                        "{:<36} {:<10} {:<8} {:<24} {:<24} {:>8} {:>8} {:>5}",
                        t.id,
                        t.state,
                        t.source,
                        t.created_at,
                        t.ended_at.as_deref().unwrap_or("-"),
                        t.input_tokens,
                        t.output_tokens,
                        t.turns
                    )?;
                }
            }
            Ok(0)
        }
        Command::Trace { id_or_name, json } => {
            let bytes = client.trace(&id_or_name).await?;
            if json {
                out.write_all(&bytes)?;
            } else {
                crate::trace::render(out, &bytes)?;
            }
            Ok(0)
        }
        Command::Publish {
            dir,
            registry,
            platform,
            json,
        } => publish(out, &dir, registry, platform, json),
        Command::Policy { path, json } => {
            let path = absolutize(&path).map_err(|e| CliError::Usage(e.to_string()))?;
            let report = client
                .policy(&crate::api::PolicyRequest {
                    path: path.display().to_string(),
                })
                .await?;
            if json {
                serde_json::to_writer_pretty(&mut *out, &report)
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                writeln!(out)?;
            } else {
                print_policy(out, &report)?;
            }
            Ok(i32::from(report.refused.is_some()))
        }
        Command::Doctor {
            state_dir,
            unit,
            json,
        } => {
            let state_dir = state_dir.unwrap_or_else(paths::default_state_dir);
            let mut checks = crate::doctor::run(&state_dir, client.socket(), &unit);
            let health = client.health().await.ok();
            checks.push(crate::doctor::tool_jail(health.as_ref()));
            checks.extend(health.as_ref().map(crate::doctor::a2a_exposure));
            let failed = checks
                .iter()
                .any(|c| c.verdict == crate::doctor::Verdict::Fail);
            if json {
                serde_json::to_writer_pretty(&mut *out, &checks)
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                writeln!(out)?;
            } else {
                for c in &checks {
                    let verdict = match c.verdict {
                        crate::doctor::Verdict::Ok => "ok",
                        crate::doctor::Verdict::Warn => "WARN",
                        crate::doctor::Verdict::Fail => "FAIL",
                    };
                    writeln!(out, "{verdict:<5} {:<20} {}", c.name, c.detail)?;
                    if let Some(fix) = &c.fix {
                        writeln!(out, "{:<26} fix: {fix}", "")?;
                    }
                }
            }
            Ok(i32::from(failed))
        }
        Command::Logs { id_or_name, follow } => {
            let mut failed = None;
            client
                .logs(&id_or_name, follow, |chunk| {
                    if failed.is_none()
                        && let Err(e) = out.write_all(chunk).and_then(|()| out.flush())
                    {
                        failed = Some(e);
                    }
                })
                .await?;
            match failed {
                Some(e) => Err(e.into()),
                None => Ok(0),
            }
        }
    }
}

fn read_task(file: &std::path::Path) -> Result<String, CliError> {
    let text = if file == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| CliError::Usage(format!("cannot read the task from stdin: {e}")))?;
        text
    } else {
        std::fs::read_to_string(file).map_err(|e| {
            CliError::Usage(format!("cannot read --task-file {}: {e}", file.display()))
        })?
    };
    Ok(text)
}

/// Token use and tasks of an agent session (nothing for script capsules).
fn print_usage(
    out: &mut impl Write,
    session: &Session,
    tasks: &[crate::api::TaskRecord],
) -> Result<(), CliError> {
    if tasks.is_empty() && session.usage.turns == 0 {
        return Ok(());
    }
    let u = &session.usage;
    writeln!(
        out,
        "{:<12} {} in, {} out, {} turns",
        "tokens", u.input_tokens, u.output_tokens, u.turns
    )?;
    writeln!(out, "tasks")?;
    for t in tasks {
        writeln!(
            out,
            "  {:<36} {:<9} {:<8} {:>8} in {:>7} out {:>3} turns {}",
            t.id,
            t.state,
            t.source,
            t.input_tokens,
            t.output_tokens,
            t.turns,
            t.error.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

fn publish(
    out: &mut impl Write,
    dir: &std::path::Path,
    registry: Option<PathBuf>,
    platform: Option<String>,
    json: bool,
) -> Result<i32, CliError> {
    use crate::artifact::{GENERIC_PLATFORM, LocalRegistry, PayloadKind, bundle};
    let registry = registry
        .or_else(|| std::env::var_os(paths::REGISTRY_ENV).map(PathBuf::from))
        .unwrap_or_else(paths::default_registry);
    if registry.to_str().is_some_and(|r| r.contains("://")) {
        return Err(CliError::Usage(format!(
            "publish writes to a registry directory; '{}' is a URL (HTTP registries are read-only)",
            registry.display()
        )));
    }
    let (manifest, bytes) = bundle::pack(dir)?;
    let platform = match platform {
        Some(p) => {
            let valid = p == GENERIC_PLATFORM
                || p.split_once('-').is_some_and(|(os, arch)| {
                    !os.is_empty()
                        && !arch.is_empty()
                        && p.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
            if !valid {
                return Err(CliError::Usage(format!(
                    "--platform '{p}' must be `any` or `<os>-<arch>` such as {}",
                    crate::artifact::current_platform()
                )));
            }
            p
        }
        None if manifest.payload_kind() == PayloadKind::Native => {
            crate::artifact::current_platform()
        }
        None => GENERIC_PLATFORM.to_string(),
    };
    let published = LocalRegistry::new(&registry).publish(&manifest, &bytes, &platform)?;
    if json {
        let value = serde_json::json!({
            "name": manifest.name,
            "version": manifest.version,
            "runtime": manifest.runtime,
            "platform": published.bundle.platform,
            "path": registry.join(&published.bundle.path),
            "sha256": published.bundle.sha256,
            "size": published.bundle.size,
            "unchanged": published.unchanged,
        });
        serde_json::to_writer_pretty(&mut *out, &value)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        writeln!(out)?;
    } else {
        let verb = if published.unchanged {
            "already published (same bytes)"
        } else {
            "published"
        };
        writeln!(
            out,
            "{}@{} ({} {}, {}) {verb}\n  sha256 {}\n  {}",
            manifest.name,
            manifest.version,
            manifest.runtime,
            manifest.payload_kind_label(),
            published.bundle.platform,
            published.bundle.sha256,
            registry.join(&published.bundle.path).display()
        )?;
    }
    Ok(0)
}

fn print_policy(out: &mut impl Write, r: &crate::api::PolicyReport) -> Result<(), CliError> {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    let ports = match &r.tool_tcp_ports {
        None => "any".to_string(),
        Some(p) if p.is_empty() => "none".to_string(),
        Some(p) => p.iter().map(u16::to_string).collect::<Vec<_>>().join(", "),
    };
    let l = &r.limits;
    let rows = [
        (
            "capsule",
            format!("{} {} ({})", r.capsule, r.version, r.manifest),
        ),
        ("tools", list(&r.tools)),
        ("artifacts", list(&r.artifacts)),
        ("network", list(&r.network_allow)),
        ("tool tcp ports", ports),
        (
            "tool udp",
            if r.tool_udp { "allowed" } else { "refused" }.to_string(),
        ),
        (
            "tool unix sockets",
            if r.tool_unix_sockets {
                "allowed (network.unix_sockets)"
            } else {
                "refused"
            }
            .to_string(),
        ),
        ("read-only", list(&r.read_only)),
        (
            "read-write",
            format!("the workdir; {}", list(&r.read_write)),
        ),
        ("shell", list(&r.shell_allow)),
        ("strip env", list(&r.shell_strip_env)),
        ("env", list(&r.env_allow)),
        (
            "limits",
            format!("timeout {} s, memory {} MiB", l.timeout_secs, l.memory_mb),
        ),
        (
            "tool limits",
            format!(
                "cpu {} s, {} processes, {} open files, files up to {} bytes",
                l.tool_cpu_secs, l.tool_processes, l.tool_open_files, l.tool_output_bytes
            ),
        ),
        ("guests", r.guests.clone()),
        ("native tools", r.native_tools.clone()),
        (
            "verdict",
            r.refused.clone().unwrap_or_else(|| "would start".into()),
        ),
    ];
    for (key, value) in rows {
        writeln!(out, "{key:<15} {value}")?;
    }
    Ok(())
}

fn print_session(out: &mut impl Write, session: &Session, json: bool) -> Result<(), CliError> {
    if json {
        serde_json::to_writer_pretty(&mut *out, session)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        writeln!(out)?;
        return Ok(());
    }
    let rows: [(&str, String); 13] = [
        ("id", session.id.clone()),
        ("name", session.name.clone()),
        (
            "capsule",
            format!("{} {}", session.capsule, session.version),
        ),
        ("state", session.state.to_string()),
        ("error", session.error.clone().unwrap_or_else(|| "-".into())),
        ("restart", session.restart_policy.as_str().into()),
        (
            "sandbox",
            if session.sandbox.is_empty() {
                "-".into()
            } else {
                session.sandbox.clone()
            },
        ),
        ("restarts", session.restart_count.to_string()),
        ("workdir", session.workdir.clone()),
        ("bookkeeping", session.bookkeeping_dir.clone()),
        ("created", session.created_at.clone()),
        (
            "started",
            session.started_at.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "ended",
            session.ended_at.clone().unwrap_or_else(|| "-".into()),
        ),
    ];
    for (key, value) in rows {
        writeln!(out, "{key:<12} {value}")?;
    }
    if session.artifacts.is_empty() {
        writeln!(out, "{:<12} -", "artifacts")?;
        return Ok(());
    }
    writeln!(out, "artifacts")?;
    for a in &session.artifacts {
        let kind = match &a.implementation {
            Some(i) => format!("{} {}", a.runtime, i),
            None => a.runtime.clone(),
        };
        let sha = a.sha256.as_deref().unwrap_or("-");
        writeln!(
            out,
            "  {:<20} {:<10} {:<12} {:<9} {sha}",
            a.name, a.version, kind, a.origin
        )?;
    }
    Ok(())
}

fn print_table(out: &mut impl Write, sessions: &[Session]) -> Result<(), CliError> {
    let headers = [
        "ID", "NAME", "CAPSULE", "STATE", "RESTARTS", "CREATED", "ERROR",
    ];
    let rows: Vec<[String; 7]> = sessions
        .iter()
        .map(|s| {
            [
                s.id.clone(),
                s.name.clone(),
                format!("{}@{}", s.capsule, s.version),
                s.state.to_string(),
                s.restart_count.to_string(),
                s.created_at.clone(),
                s.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| -> String {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        s.trim_end().to_string()
    };
    writeln!(out, "{}", line(&headers))?;
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    if rows.is_empty() {
        writeln!(
            out,
            "(no sessions; `roostctl list --all` includes ended ones)"
        )?;
    }
    Ok(())
}
