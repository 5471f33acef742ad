//! Shell completions and man pages, generated from the clap definitions
//! (`roostctl completions SHELL`; the package build runs `roostctl manpages DIR`).

use clap::CommandFactory;

use super::*;

/// The completion script for `shell`.
pub(super) fn completions(
    out: &mut impl Write,
    shell: clap_complete::Shell,
) -> Result<(), CliError> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "roostctl", out);
    Ok(())
}

/// `roostctl.1` and `roostctl-<verb>.1` for every command, into `dir`.
pub(super) fn manpages(dir: &std::path::Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)?;
    let command = Cli::command();
    clap_mangen::generate_to(command, dir)?;
    Ok(())
}
