//! roostctl's help beyond clap's: the exit code table (`roostctl --help`,
//! kept in docs/cli.md; the codes are in `exit.rs`) and the example shown
//! under each command's help.

pub const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  error (the daemon failed the request; doctor: a check failed)
  2  usage: bad arguments, or an input to fix (manifest, path, task file)
  3  the session or task did not succeed (failed, stopped, canceled, rejected)
  4  not found: no such session, route or task
  5  the daemon is unreachable, or refused access (socket permissions, token)
  6  refused by policy (the host cannot enforce the capsule's policy)
  7  --timeout ran out (the session or task goes on)

Environment: ROOST_SOCKET (the control socket), ROOST_A2A_TOKEN (bearer token
for the A2A gateway), ROOST_REGISTRY (publish), NO_COLOR (no colours).";

pub const START: &str = "\
Examples:
  roostctl start examples/hello --wait
  roostctl start ./agent --name helper --lifecycle queue --after-task sleep
  roostctl start ./agent --task \"Summarise README.md\" --wait --timeout 10m";
pub const STOP: &str = "Example:\n  roostctl stop helper";
pub const RESTART: &str = "Example:\n  roostctl restart helper";
pub const LIST: &str = "\
Examples:
  roostctl list
  roostctl list --all --json
  roostctl list --cluster
  roostctl list -q | xargs -n1 roostctl stop";
pub const NODES: &str = "Examples:\n  roostctl nodes\n  roostctl nodes --json";
pub const DRAIN: &str = "\
Examples:
  roostctl drain roost-b
  roostctl drain roost-b --timeout 5m --json";
pub const STATUS: &str = "Examples:\n  roostctl status\n  roostctl status helper --json";
pub const RM: &str = "Examples:\n  roostctl rm helper\n  roostctl rm --force 0193a7c2-…";
pub const PRUNE: &str = "Examples:\n  roostctl prune --older-than 7d --dry-run\n  roostctl prune";
pub const EVENTS: &str = "\
Examples:
  roostctl events --tail 20
  roostctl events -f --json | jq .state";
pub const PUBLISH: &str = "\
Examples:
  roostctl publish ./my-tool
  roostctl publish ./my-tool --to-daemon
  roostctl publish ./my-tool --cluster
  roostctl publish ./my-tool --registry /srv/registry --platform any";
pub const POLICY: &str = "Example:\n  roostctl policy ./my-capsule";
pub const DOCTOR: &str = "Example:\n  roostctl doctor --json";
pub const SEND: &str = "\
Examples:
  roostctl send helper \"What is in the workdir?\"
  roostctl send helper \"Write a poem\" --stream
  roostctl send helper \"yes, go on\" --task-id 0193a7c2-…
The exit code follows the task: 0 completed (or waiting for input), 3 failed,
canceled or rejected, 7 --timeout ran out.";
pub const CANCEL: &str = "Example:\n  roostctl cancel helper 0193a7c2-…";
pub const CARD: &str =
    "Examples:\n  roostctl card helper\n  roostctl card helper --json | jq .skills";
pub const TASKS: &str = "Example:\n  roostctl tasks helper";
pub const TRACE: &str = "Example:\n  roostctl trace helper";
pub const LOGS: &str = "\
Examples:
  roostctl logs helper -f
  roostctl logs helper --tail 50 --timestamps
  roostctl logs helper --since 10m --json";
pub const COMPLETIONS: &str = "\
Examples:
  roostctl completions bash > ~/.local/share/bash-completion/completions/roostctl
  roostctl completions zsh > \"${fpath[1]}/_roostctl\"
  roostctl completions fish > ~/.config/fish/completions/roostctl.fish";
pub const SCHEDULE: &str = "\
Examples:
  roostctl schedule add helper \"Summarise yesterday's tickets\" --cron \"0 7 * * 1-5\" --tz Europe/Berlin
  roostctl schedule add helper \"Check the queue\" --every 10m --name queue-check
  roostctl schedule list helper
  roostctl schedule pause sch_0193…";
pub const SCHEDULE_ADD: &str = "\
Examples:
  roostctl schedule add helper \"Morning report\" --cron \"0 7 * * 1-5\" --tz Europe/Berlin
  roostctl schedule add helper \"Poll the feed\" --every 10m --overlap queue
  roostctl schedule add helper \"Send the reminder\" --at 2026-12-03T07:00:00Z
Each tick fires one task, once, across restarts and kill -9.";
pub const UPGRADE: &str = "\
Examples:
  roostctl upgrade helper ./helper-0.2.0
  roostctl upgrade helper ./helper-0.2.0 --drain-timeout 30s
  roostctl upgrade helper --rollback
  roostctl upgrade helper helper@0.2.0     # forward again to a version it ran
The route takes tasks throughout: those accepted during the switch, and those
queued that had not started, run on the new version.";
