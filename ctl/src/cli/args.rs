//! roostctl's arguments: the verbs and their flags (clap), with help text on
//! every argument and an example per command (`help.rs`).

use std::time::Duration;

use super::help;
use super::*;

#[derive(Debug, Parser)]
#[command(
    name = "roostctl",
    version,
    about = "Drive a roostd daemon: start, watch and stop capsule sessions, talk to their agents",
    after_help = help::EXIT_CODES
)]
pub struct Cli {
    /// Control socket of the daemon (default: $ROOST_SOCKET, else your own
    /// roostd's socket if one answers there, else /run/roost/roostd.sock).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print JSON instead of text (JSON lines for streams: `logs`, `events`, `send --stream`).
    #[arg(long, global = true)]
    pub json: bool,
    /// Print only ids (of sessions or tasks), one per line; nothing for commands without ids.
    #[arg(short, long, global = true, conflicts_with = "json")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// `--timeout`: how long roostctl waits before it gives up (exit 7); the
/// session or task goes on.
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}: give a duration such as 30s, 5m or 1h30m"))
}

/// `--label KEY=VALUE`.
fn label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not KEY=VALUE (e.g. zone=eu-1)")),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a capsule session from a capsule directory or its murmur.yaml.
    #[command(after_help = help::START)]
    Start {
        /// Capsule directory (with murmur.yaml), or the manifest itself.
        path: PathBuf,
        /// Route name (default: the capsule name, if no live session has it).
        #[arg(long)]
        name: Option<String>,
        /// Existing directory the capsule sees as its workdir.
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Restart policy: no, on-failure or always.
        #[arg(long, default_value = "no", value_name = "POLICY")]
        restart: RestartPolicy,
        /// Wait until the session ends; the exit code says how it ended.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up waiting after this long (e.g. 90s, 10m); the session goes on.
        #[arg(long, value_parser = duration, value_name = "DURATION", requires = "wait")]
        timeout: Option<Duration>,
        /// A task for an agent capsule, written to task.md in its workdir.
        #[arg(long, conflicts_with = "task_file")]
        task: Option<String>,
        /// Read the task from a file (`-` for stdin).
        #[arg(long, value_name = "FILE")]
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
        /// In a cluster: the node to start it on, or `auto` (the live node
        /// with the most free capacity, a tie going to the node asked: the
        /// default). The capsule's path must resolve on that node.
        #[arg(long, value_name = "NODE")]
        node: Option<String>,
        /// In a cluster: only a node with this label (repeat for more),
        /// e.g. --label zone=eu-1.
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
        labels: Vec<(String, String)>,
    },
    /// Stop a session (final until it is started again).
    #[command(after_help = help::STOP)]
    Stop {
        /// Session id or route name.
        id_or_name: String,
    },
    /// Stop a session if it is live, then run it again from its start request
    /// (same id, name and workdir; its restart count goes up by one).
    #[command(after_help = help::RESTART)]
    Restart {
        /// Session id or route name.
        id_or_name: String,
    },
    /// List live sessions (with --all, ended ones too).
    #[command(after_help = help::LIST)]
    List {
        /// Include ended sessions.
        #[arg(short, long)]
        all: bool,
        /// Every node's sessions, with a NODE column (a node of a cluster).
        #[arg(long)]
        cluster: bool,
    },
    /// The nodes of the cluster this roostd is a node of: heartbeat age,
    /// capacity and load (`cluster:`).
    #[command(after_help = help::NODES)]
    Nodes,
    /// Move a node's sessions to the other nodes of its cluster (before
    /// maintenance): each stops taking tasks, finishes those it runs, and
    /// starts on another node with the tasks still queued.
    #[command(after_help = help::DRAIN)]
    Drain {
        /// The node to drain (any node of the cluster asks it).
        node: String,
        /// How long a session's running tasks may take to finish (then they
        /// are stopped), e.g. 60s, 5m.
        #[arg(long, value_parser = duration, default_value = "60s")]
        timeout: Duration,
    },
    /// Set up a cluster: `cluster nats-config` (what the NATS servers need
    /// for each node's own user).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Show one session; without one, the daemon (version, uptime, live
    /// sessions, resuming after a restart).
    #[command(after_help = help::STATUS)]
    Status {
        /// Session id or route name.
        id_or_name: Option<String>,
    },
    /// Delete ended sessions with everything they recorded: rows, tasks
    /// (A2A ones too), logs, trace and directories.
    #[command(after_help = help::RM)]
    Rm {
        /// Session ids or route names.
        #[arg(required = true)]
        ids_or_names: Vec<String>,
        /// Stop a live session first instead of refusing it.
        #[arg(short, long)]
        force: bool,
    },
    /// Delete every ended session and ended A2A task (that ended more than
    /// --older-than ago); sessions roostd will bring back are kept.
    #[command(after_help = help::PRUNE)]
    Prune {
        /// Only what ended longer ago than this (e.g. 30m, 12h, 7d).
        #[arg(long, value_parser = duration, value_name = "DURATION")]
        older_than: Option<Duration>,
        /// Only print what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
    /// Session state changes across the daemon, oldest first; with -f, as they happen.
    #[command(after_help = help::EVENTS)]
    Events {
        /// Keep printing changes as they happen (until interrupted).
        #[arg(short, long)]
        follow: bool,
        /// Only the last N changes before following (default: all that are kept).
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
    },
    /// Pack an artifact directory (murmur.yaml + payload) and publish it to a registry.
    #[command(after_help = help::PUBLISH)]
    Publish {
        /// Artifact directory (murmur.yaml and its payload).
        dir: PathBuf,
        /// Registry directory (default: $ROOST_REGISTRY, then `registry/` in the default state dir).
        #[arg(long, value_name = "DIR", conflicts_with = "to_daemon")]
        registry: Option<PathBuf>,
        /// Publish into the daemon's own registry over its socket (the default
        /// when the daemon in use is the system one).
        #[arg(long)]
        to_daemon: bool,
        /// Publish into the registry of the cluster the daemon is a node of
        /// (a JetStream object store every node reads).
        #[arg(long, conflicts_with_all = ["registry", "to_daemon"])]
        cluster: bool,
        /// Platform of the bundle: `any`, or `<os>-<arch>` (default: this host's
        /// platform for native tools, `any` for everything else).
        #[arg(long)]
        platform: Option<String>,
    },
    /// The effective policy a capsule would run under on the daemon's host.
    #[command(after_help = help::POLICY)]
    Policy {
        /// Capsule directory (with murmur.yaml), or the manifest itself.
        path: PathBuf,
    },
    /// What this host can enforce, and whether roostd's files and unit are safe.
    #[command(after_help = help::DOCTOR)]
    Doctor {
        /// State dir to check (default: the system or XDG default).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// systemd unit to check.
        #[arg(long, default_value = "/etc/systemd/system/roostd.service")]
        unit: PathBuf,
    },
    /// Send a message to a session's agent over A2A and print its answer (or the stream).
    #[command(after_help = help::SEND)]
    Send {
        /// The session's route name.
        route: String,
        /// The message text.
        text: String,
        /// Print each event as it streams (SendStreamingMessage).
        #[arg(long)]
        stream: bool,
        /// Continue this task (answer its input request).
        #[arg(long, value_name = "TASK_ID")]
        task_id: Option<String>,
        /// Give up waiting for the answer after this long (e.g. 30s); the task goes on.
        #[arg(long, value_parser = duration, value_name = "DURATION")]
        timeout: Option<Duration>,
    },
    /// Cancel an A2A task of a session.
    #[command(after_help = help::CANCEL)]
    Cancel {
        /// The session's route name.
        route: String,
        /// The task's id (`roostctl tasks ROUTE` lists them).
        task_id: String,
    },
    /// Print a session's A2A agent card (what peers see at /.well-known/agent-card.json).
    #[command(after_help = help::CARD)]
    Card {
        /// The session's route name.
        route: String,
    },
    /// A session's tasks: states, times and token use.
    #[command(after_help = help::TASKS)]
    Tasks {
        /// Session id or route name.
        id_or_name: String,
    },
    /// Show an agent session's trace (inference calls, tool calls, tasks).
    #[command(after_help = help::TRACE)]
    Trace {
        /// Session id or route name.
        id_or_name: String,
    },
    /// Print a session's captured guest output.
    #[command(after_help = help::LOGS)]
    Logs {
        /// Session id or route name.
        id_or_name: String,
        /// Keep printing until the session ends.
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines (before following).
        #[arg(short = 'n', long, value_name = "N")]
        tail: Option<u64>,
        /// Only lines written in the last DURATION (e.g. 10m, 2h).
        #[arg(long, value_parser = duration, value_name = "DURATION")]
        since: Option<Duration>,
        /// Prefix each line with the time it was written (RFC 3339, UTC).
        #[arg(short, long)]
        timestamps: bool,
    },
    /// Run a new version of a live session's capsule in place: same id,
    /// name and route, no task dropped (or --rollback to the one before).
    #[command(after_help = help::UPGRADE)]
    Upgrade {
        /// Session id or route name.
        id_or_name: String,
        /// The new version's capsule directory (or its murmur.yaml), or
        /// NAME@VERSION of a version the session has run (roostctl versions).
        #[arg(
            required_unless_present = "rollback",
            conflicts_with = "rollback",
            value_name = "DIR|NAME@VERSION"
        )]
        target: Option<String>,
        /// Back to the version it ran before its last upgrade.
        #[arg(long)]
        rollback: bool,
        /// How long tasks running on the old version may take to finish
        /// (then they are canceled, saying why), e.g. 30s, 5m.
        #[arg(long, value_parser = duration, value_name = "DURATION", default_value = "5m")]
        drain_timeout: Duration,
        /// Allow another capsule name, or a version that is not newer.
        #[arg(long)]
        force: bool,
    },
    /// The versions a session has run (upgrades and rollbacks), oldest first.
    Versions {
        /// Session id or route name.
        id_or_name: String,
    },
    /// Tasks fired at times: make, list, remove, pause and resume schedules.
    #[command(subcommand, after_help = help::SCHEDULE)]
    Schedule(ScheduleCommand),
    /// Print a shell completion script to stdout.
    #[command(after_help = help::COMPLETIONS)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (roostctl.1 and one per command) into DIR.
    #[command(hide = true)]
    Manpages {
        /// Directory to write the pages into (created if missing).
        dir: PathBuf,
    },
}

/// `roostctl cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Write a NATS server config fragment (an account for the cluster, one
    /// user per node with only the subjects, streams and buckets a node
    /// uses) and one nkey seed file per node into DIR; no roostd is asked.
    NatsConfig {
        /// A node of the cluster (give each: --node a --node b --node c).
        #[arg(long = "node", required = true, value_name = "NODE")]
        nodes: Vec<String>,
        /// Where to write roost-accounts.conf and NODE.nk (kept when they
        /// exist: a node added later leaves the others' keys alone).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// `roostctl schedule …`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Fire a task with TEXT on ROUTE at times: a cron expression (in a time
    /// zone), a period, or one instant.
    #[command(after_help = help::SCHEDULE_ADD)]
    Add {
        /// The route (a running session's name) its tasks go to.
        route: String,
        /// The message text of each task.
        text: String,
        /// A cron expression: 5 fields (minute hour day month weekday), or 6
        /// with seconds first.
        #[arg(long, required_unless_present_any = ["every", "at"], conflicts_with_all = ["every", "at"])]
        cron: Option<String>,
        /// The IANA time zone the cron expression is read in (default UTC).
        #[arg(long, requires = "cron", value_name = "ZONE")]
        tz: Option<String>,
        /// A period, counted from now (e.g. 30s, 10m, 1h 30m).
        #[arg(long, value_name = "DURATION", conflicts_with = "at")]
        every: Option<String>,
        /// One instant, RFC 3339 (e.g. 2026-12-03T07:00:00Z).
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// Every task in this A2A context (default: a new one each time).
        #[arg(long, value_name = "ID")]
        context_id: Option<String>,
        /// A name, unique on the route (default: the schedule's id).
        #[arg(long)]
        name: Option<String>,
        /// Ticks that came due while roostd was down: run_once (default) or skip.
        #[arg(long, value_name = "RULE")]
        missed: Option<crate::api::Missed>,
        /// A tick while the previous task still runs: skip (default) or queue.
        #[arg(long, value_name = "RULE")]
        overlap: Option<crate::api::Overlap>,
    },
    /// List schedules (of one route, or all).
    List {
        /// Only this route's.
        route: Option<String>,
    },
    /// Remove a schedule (a task it fired goes on).
    Rm {
        /// The schedule's id (`roostctl schedule list`).
        id: String,
    },
    /// Pause a schedule: no task fires until it is resumed.
    Pause {
        /// The schedule's id.
        id: String,
    },
    /// Resume a paused schedule; ticks that fell meanwhile are passed over.
    Resume {
        /// The schedule's id.
        id: String,
    },
}
