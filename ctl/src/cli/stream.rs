//! The streaming verbs: `logs` (guest output, whole or by line with a tail,
//! a start time, timestamps or JSON lines) and `events` (session state
//! changes across the daemon, followed with `-f`).

use super::print::Output;
use super::*;

/// Unix milliseconds of `ago` before now (`--since`).
pub(super) fn ms_ago(ago: std::time::Duration) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.saturating_sub(ago).as_millis()).unwrap_or(u64::MAX)
}

/// `logs`: what the daemon sends, written through as it arrives.
pub(super) async fn logs(
    out: &mut impl Write,
    client: &Client,
    id_or_name: &str,
    query: &crate::api::LogsQuery,
) -> Result<u8, CliError> {
    let mut failed = None;
    client
        .logs_with(id_or_name, query, |chunk| {
            if failed.is_none()
                && let Err(e) = out.write_all(chunk).and_then(|()| out.flush())
            {
                failed = Some(e);
            }
        })
        .await?;
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(exit::OK),
    }
}

/// `events`: one line per state change (JSON lines with `--json`, session
/// ids with `-q`).
pub(super) async fn events(
    out: &mut impl Write,
    client: &Client,
    follow: bool,
    tail: Option<u64>,
    how: Output,
) -> Result<u8, CliError> {
    let mut failed = None;
    let mut pending = Vec::new();
    let colour = super::table::colour_wanted() && !how.json && !how.quiet;
    client
        .events(follow, tail, |chunk| {
            pending.extend_from_slice(chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if failed.is_none()
                    && let Err(e) = print_event(out, &line, how, colour)
                {
                    failed = Some(e);
                }
            }
        })
        .await?;
    match failed {
        Some(e) => Err(e),
        None => Ok(exit::OK),
    }
}

fn print_event(
    out: &mut impl Write,
    line: &[u8],
    how: Output,
    colour: bool,
) -> Result<(), CliError> {
    if how.json {
        out.write_all(line)?;
        out.flush()?;
        return Ok(());
    }
    let event: crate::api::SessionEvent = serde_json::from_slice(line)
        .map_err(|e| CliError::Client(ClientError::Decode(format!("an event from roostd: {e}"))))?;
    if how.quiet {
        writeln!(out, "{}", event.session_id)?;
    } else {
        let state = if colour {
            format!(
                "\x1b[{}m{:<11}\x1b[0m",
                super::table::state_colour(event.state),
                event.state.as_str()
            )
        } else {
            format!("{:<11}", event.state.as_str())
        };
        writeln!(
            out,
            "{}  {}  {}  {} ({}){}",
            event.at,
            state,
            event.session_id,
            event.name,
            event.capsule,
            event
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )?;
    }
    out.flush()?;
    Ok(())
}
