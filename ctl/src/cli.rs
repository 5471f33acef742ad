//! roostctl's command line: its arguments (`args.rs`), running a command
//! (`run.rs`) over [`Client`], what it prints (`print.rs`), and `publish`
//! (`publish.rs`).

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::api::{RestartPolicy, Session, StartRequest};
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
