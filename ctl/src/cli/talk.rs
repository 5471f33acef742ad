//! The A2A verbs: `send` (its exit code follows the task), `cancel` and
//! `card`, through roostd's gateway (its address from `GET /v1/health`).

use std::time::Duration;

use super::print::{Output, print_json};
use super::*;
use crate::a2a::Gateway;

/// What `send` was asked.
pub(super) struct SendArgs<'a> {
    pub route: &'a str,
    pub text: &'a str,
    pub stream: bool,
    pub task_id: Option<&'a str>,
    pub timeout: Option<Duration>,
}

/// roostd's gateway: its address (from the daemon) and the token from
/// `ROOST_A2A_TOKEN`.
struct Target {
    addr: String,
    token: Option<String>,
}

impl Target {
    async fn of(client: &Client) -> Result<Self, CliError> {
        let health = client.health().await?;
        Ok(Self {
            addr: health.a2a_addr,
            token: std::env::var("ROOST_A2A_TOKEN").ok(),
        })
    }

    fn route<'a>(&'a self, route: &'a str) -> Gateway<'a> {
        Gateway {
            addr: &self.addr,
            route,
            token: self.token.as_deref(),
        }
    }
}

/// `send`: one message to a route, printing what comes back (streamed text
/// as it arrives); exit 3 when the task failed, was canceled or rejected.
pub(super) async fn send(
    out: &mut impl Write,
    client: &Client,
    args: &SendArgs<'_>,
    how: Output,
) -> Result<u8, CliError> {
    let target = Target::of(client).await?;
    let gw = target.route(args.route);
    let mut failed = None;
    let mut state: Option<String> = None;
    let mut task_id: Option<String> = args.task_id.map(str::to_string);
    let request = crate::a2a::Send {
        text: args.text,
        task_id: args.task_id,
        stream: args.stream,
    };
    let exchange = gw.send(&request, |event| {
        if let Some(s) = crate::a2a::task_state(event) {
            state = Some(s);
        }
        if let Some(id) = event
            .get("task")
            .and_then(|t| t["id"].as_str())
            .or_else(|| event.get("statusUpdate").and_then(|u| u["taskId"].as_str()))
        {
            task_id = Some(id.to_string());
        }
        if failed.is_none()
            && let Err(e) = print_event(out, event, how)
        {
            failed = Some(e);
        }
    });
    let outcome = match args.timeout {
        None => exchange.await,
        Some(limit) => match tokio::time::timeout(limit, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let task = task_id.map_or_else(
                    || "its task".to_string(),
                    |id| format!("task {id} (`roostctl tasks {}`)", args.route),
                );
                return Err(CliError::Timeout(format!(
                    "no answer from {} after {}; {task} goes on",
                    args.route,
                    humantime::format_duration(limit)
                )));
            }
        },
    };
    outcome?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(exit::of_task(state.as_deref()))
}

/// One result or stream event: JSON (a line each), the task id with `-q`,
/// or text (streamed artifact text as it comes, without newlines).
fn print_event(
    out: &mut impl Write,
    event: &serde_json::Value,
    how: Output,
) -> std::io::Result<()> {
    if how.json {
        return writeln!(out, "{event}");
    }
    if how.quiet {
        if let Some(id) = event.get("task").and_then(|t| t["id"].as_str()) {
            writeln!(out, "{id}")?;
        }
        return Ok(());
    }
    if event.get("artifactUpdate").is_some() {
        let last = event["artifactUpdate"]["lastChunk"] == true;
        let chunk = if last {
            "\n".to_string()
        } else {
            crate::a2a::describe(event)
        };
        out.write_all(chunk.as_bytes())?;
        return out.flush();
    }
    writeln!(out, "{}", crate::a2a::describe(event))
}

/// `cancel`: the task as it is after the request.
pub(super) async fn cancel(
    out: &mut impl Write,
    client: &Client,
    route: &str,
    task_id: &str,
    how: Output,
) -> Result<u8, CliError> {
    let task = Target::of(client)
        .await?
        .route(route)
        .cancel(task_id)
        .await?;
    if how.json {
        print_json(out, &task)?;
    } else if how.quiet {
        writeln!(out, "{task_id}")?;
    } else {
        let state = crate::a2a::task_state(&task).unwrap_or_else(|| "?".into());
        writeln!(out, "task {task_id} {state}")?;
    }
    Ok(exit::OK)
}

/// `card`: the route's public agent card (the whole card with `--json`).
pub(super) async fn card(
    out: &mut impl Write,
    client: &Client,
    route: &str,
    how: Output,
) -> Result<u8, CliError> {
    let card = Target::of(client).await?.route(route).card().await?;
    if how.json {
        print_json(out, &card)?;
        return Ok(exit::OK);
    }
    if how.quiet {
        writeln!(out, "{}", card["name"].as_str().unwrap_or(route))?;
        return Ok(exit::OK);
    }
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_string();
    let interfaces: Vec<String> = card["supportedInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| format!("{} {}", text(&i["protocolBinding"]), text(&i["url"])))
        .collect();
    let skills: Vec<String> = card["skills"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| format!("{} ({})", text(&s["name"]), text(&s["id"])))
        .collect();
    let caps = &card["capabilities"];
    let rows = [
        ("name", text(&card["name"])),
        ("description", text(&card["description"])),
        ("version", text(&card["version"])),
        ("interfaces", interfaces.join("\n             ")),
        (
            "streaming",
            caps["streaming"].as_bool().unwrap_or(false).to_string(),
        ),
        (
            "push",
            caps["pushNotifications"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        ),
        ("skills", skills.join(", ")),
    ];
    for (key, value) in rows {
        writeln!(out, "{key:<12} {value}")?;
    }
    Ok(exit::OK)
}
