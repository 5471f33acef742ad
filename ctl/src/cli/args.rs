//! roostctl's arguments: the verbs and their flags (clap).

use super::*;

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
        /// Take tasks this way, over the manifest's lifecycle.task_acceptance:
        /// none, single or queue.
        #[arg(long, value_name = "MODE")]
        lifecycle: Option<TaskAcceptance>,
        /// After a task, over the manifest's lifecycle.after_task: exit or sleep.
        #[arg(long, value_name = "WHAT")]
        after_task: Option<AfterTask>,
        /// A job id, as MURMUR_JOB_ID in the capsule's, tools' and hooks' environment.
        #[arg(long)]
        job_id: Option<String>,
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
    /// Show one session; without one, the daemon (version, uptime, live
    /// sessions, resuming after a restart).
    Status {
        /// Session id or route name.
        id_or_name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Delete ended sessions with everything they recorded: rows, tasks
    /// (A2A ones too), logs, trace and directories.
    Rm {
        /// Session ids or route names.
        #[arg(required = true)]
        ids_or_names: Vec<String>,
        /// Stop a live session first instead of refusing it.
        #[arg(short, long)]
        force: bool,
        #[arg(long)]
        json: bool,
    },
    /// Delete every ended session and ended A2A task (that ended more than
    /// --older-than ago); sessions roostd will bring back are kept.
    Prune {
        /// Only what ended longer ago than this (e.g. 30m, 12h, 7d).
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Option<std::time::Duration>,
        /// Only print what would be deleted.
        #[arg(long)]
        dry_run: bool,
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
