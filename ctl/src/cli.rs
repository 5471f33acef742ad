//! roostctl's command line: argument parsing and human/JSON rendering over [`Client`].

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::api::{RestartPolicy, Session, StartRequest};
use crate::client::{Client, ClientError, absolutize};
use crate::paths;

mod print;
mod publish;

use print::{print_policy, print_session, print_table, print_usage};
use publish::publish;

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
