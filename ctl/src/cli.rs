//! roostctl's command line: its arguments (`args.rs`), running a command
//! (`run.rs`) over [`Client`], what it prints (`print.rs`), and `publish`
//! (`publish.rs`).

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::api::{AfterTask, RestartPolicy, Session, StartRequest, TaskAcceptance};
use crate::client::{Client, ClientError, absolutize};
use crate::paths;

mod args;
mod print;
mod publish;
mod run;

pub use args::{Cli, Command};
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
    #[error(transparent)]
    Bundle(#[from] crate::artifact::BundleError),
    #[error(transparent)]
    Registry(#[from] crate::artifact::LayoutError),
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
