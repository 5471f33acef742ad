//! roostctl's command line: its arguments (`args.rs`, with `help.rs`),
//! running a command (`run.rs`; A2A verbs in `talk.rs`, streams in
//! `stream.rs`, completions and man pages in `man.rs`, uploading a capsule
//! roostd cannot read in `upload.rs`, schedules in `schedule.rs`, a cluster's NATS accounts in `nats_config.rs`) over [`Client`], what
//! it prints (`print.rs`), `publish` (`publish.rs`), and exit codes (`exit.rs`).

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::api::{AfterTask, RestartPolicy, Session, StartRequest, TaskAcceptance};
use crate::client::{Client, ClientError, absolutize};
use crate::paths;

mod args;
pub mod exit;
mod help;
mod man;
mod nats_config;
mod print;
mod publish;
mod run;
mod schedule;
mod stream;
mod table;
mod talk;
mod upload;

pub use args::{Cli, ClusterCommand, Command};
pub use run::run;

/// What a failed command reports; every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Timeout(String),
    #[error(transparent)]
    Bundle(#[from] crate::artifact::BundleError),
    #[error(transparent)]
    Registry(#[from] crate::artifact::LayoutError),
}

impl CliError {
    /// The process exit code for this error (the table in `roostctl --help`).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Bundle(_) => exit::USAGE,
            Self::Timeout(_) => exit::TIMEOUT,
            Self::Client(e) => exit::of_client_error(e),
            Self::Output(_) | Self::Registry(_) => exit::ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_takes_a_lifecycle_an_after_task_and_a_job_id_and_names_the_choices() {
        let cli = Cli::try_parse_from([
            "roostctl",
            "start",
            "caps/helper",
            "--lifecycle",
            "queue",
            "--after-task",
            "sleep",
            "--job-id",
            "job-7",
        ])
        .expect("parses");
        let Command::Start {
            lifecycle,
            after_task,
            job_id,
            ..
        } = cli.command
        else {
            panic!("a start");
        };
        assert_eq!(lifecycle, Some(TaskAcceptance::Queue));
        assert_eq!(after_task, Some(AfterTask::Sleep));
        assert_eq!(job_id.as_deref(), Some("job-7"));
        let bad = Cli::try_parse_from(["roostctl", "start", "x", "--lifecycle", "forever"])
            .expect_err("refused");
        assert!(bad.to_string().contains("none, single, queue"), "{bad}");
    }
}
