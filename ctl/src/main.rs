//! roostctl binary: parses arguments and hands them to [`roost_ctl::cli::run`];
//! errors go to stderr with the exit code their kind has (`roostctl --help`).

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = roost_ctl::cli::Cli::parse();
    let mut stdout = std::io::stdout().lock();
    match roost_ctl::cli::run(cli, &mut stdout).await {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("roostctl: {err}");
            std::process::ExitCode::from(err.exit_code())
        }
    }
}
