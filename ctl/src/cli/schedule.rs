//! `roostctl schedule add|list|rm|pause|resume`, and the table of schedules.

use std::io::Write;

use super::args::ScheduleCommand;
use super::print::{Output, print_json};
use super::table::Table;
use super::{CliError, Client, exit};
use crate::api::{ScheduleInfo, ScheduleRequest, ScheduleTimes};

/// Runs one schedule verb; returns the exit code.
pub(super) async fn run(
    client: &Client,
    command: ScheduleCommand,
    out: &mut impl Write,
    how: Output,
) -> Result<u8, CliError> {
    let one = match command {
        ScheduleCommand::Add {
            route,
            text,
            cron,
            tz,
            every,
            at,
            context_id,
            name,
            missed,
            overlap,
        } => {
            let request = ScheduleRequest {
                route,
                text,
                times: ScheduleTimes {
                    cron,
                    tz,
                    every,
                    at,
                },
                context_id,
                name,
                missed,
                overlap,
            };
            client.add_schedule(&request).await?
        }
        ScheduleCommand::List { route } => {
            let schedules = client.schedules(route.as_deref()).await?;
            print_list(out, &schedules, how)?;
            return Ok(exit::OK);
        }
        ScheduleCommand::Rm { id } => client.remove_schedule(&id).await?,
        ScheduleCommand::Pause { id } => client.pause_schedule(&id, true).await?,
        ScheduleCommand::Resume { id } => client.pause_schedule(&id, false).await?,
    };
    print_list(out, std::slice::from_ref(&one), how)?;
    Ok(exit::OK)
}

/// When a schedule fires, as written.
fn times(s: &ScheduleInfo) -> String {
    let t = &s.times;
    match (&t.cron, &t.every, &t.at) {
        (Some(cron), _, _) => match &t.tz {
            Some(tz) => format!("cron {cron} ({tz})"),
            None => format!("cron {cron}"),
        },
        (_, Some(every), _) => format!("every {every}"),
        (_, _, Some(at)) => format!("at {at}"),
        _ => "-".into(),
    }
}

fn print_list(
    out: &mut impl Write,
    schedules: &[ScheduleInfo],
    how: Output,
) -> Result<(), CliError> {
    if how.json {
        return print_json(out, schedules);
    }
    if how.quiet {
        for s in schedules {
            writeln!(out, "{}", s.id)?;
        }
        return Ok(());
    }
    let mut table = Table::new(&[
        "ID",
        "ROUTE",
        "NAME",
        "WHEN",
        "NEXT",
        "FIRED",
        "SKIPPED",
        "LAST TASK",
        "NOTE",
    ]);
    for s in schedules {
        let next = if s.paused {
            "paused".to_string()
        } else {
            s.next_tick.clone().unwrap_or_else(|| "done".into())
        };
        let note = s.last_error.clone().unwrap_or_default();
        table.row(
            &[
                s.id.clone(),
                s.route.clone(),
                s.name.clone(),
                times(s),
                next,
                s.fired.to_string(),
                s.skipped.to_string(),
                s.last_task_id.clone().unwrap_or_else(|| "-".into()),
                note,
            ],
            &[],
        );
    }
    table.write(out)?;
    Ok(())
}
