//! Running one command: each verb against the daemon (through [`Client`])
//! or locally (`publish`, `doctor`), and its exit code.

use super::print::{
    print_checks, print_health, print_json, print_policy, print_pruned, print_session, print_table,
    print_tasks, print_usage,
};
use super::publish::publish;
use super::*;

/// Runs one command, printing to `out`; returns the process exit code.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<i32, CliError> {
    let client = Client::new(paths::resolve_socket(cli.socket));
    match cli.command {
        Command::Start {
            path,
            name,
            workdir,
            restart,
            wait,
            task,
            task_file,
            lifecycle,
            after_task,
            job_id,
            json,
        } => {
            let task = match (task, task_file) {
                (Some(text), _) => Some(text),
                (None, Some(file)) => Some(read_task(&file)?),
                (None, None) => None,
            };
            let request = StartRequest {
                path: absolute(&path)?,
                name,
                workdir: workdir.map(|w| absolute(&w)).transpose()?,
                restart,
                task,
                lifecycle,
                after_task,
                job_id,
                ..StartRequest::default()
            };
            start(out, &client, &request, wait, json).await
        }
        Command::Stop { id_or_name, json } => {
            let session = client.stop(&id_or_name).await?;
            print_session(out, &session, json)?;
            Ok(0)
        }
        Command::List { all, json } => {
            let sessions = client.list(all).await?;
            if json {
                print_json(out, &sessions)?;
            } else {
                print_table(out, &sessions)?;
            }
            Ok(0)
        }
        Command::Status {
            id_or_name: None,
            json,
        } => {
            let health = client.health().await?;
            if json {
                print_json(out, &health)?;
            } else {
                print_health(out, &health)?;
            }
            Ok(0)
        }
        Command::Rm {
            ids_or_names,
            force,
            json,
        } => {
            let mut removed = Vec::new();
            let mut failed = 0;
            for id_or_name in &ids_or_names {
                match client.remove(id_or_name, force).await {
                    Ok(session) => {
                        if !json {
                            writeln!(out, "{} {}", session.id, session.name)?;
                        }
                        removed.push(session);
                    }
                    Err(e) => {
                        eprintln!("roostctl: {id_or_name}: {e}");
                        failed += 1;
                    }
                }
            }
            if json {
                print_json(out, &removed)?;
            }
            Ok(i32::from(failed > 0))
        }
        Command::Prune {
            older_than,
            dry_run,
            json,
        } => {
            let request = crate::api::PruneRequest {
                older_than_secs: older_than.map_or(0, |d| d.as_secs()),
                dry_run,
            };
            let report = client.prune(&request).await?;
            if json {
                print_json(out, &report)?;
            } else {
                print_pruned(out, &report)?;
            }
            Ok(0)
        }
        Command::Status {
            id_or_name: Some(id_or_name),
            json,
        } => {
            let session = client.get(&id_or_name).await?;
            print_session(out, &session, json)?;
            if !json {
                let tasks = client.tasks(&session.id).await?;
                print_usage(out, &session, &tasks)?;
            }
            Ok(0)
        }
        Command::Send {
            route,
            text,
            stream,
            task_id,
            json,
        } => {
            send(
                out,
                &client,
                &route,
                &text,
                stream,
                task_id.as_deref(),
                json,
            )
            .await
        }
        Command::Tasks { id_or_name, json } => {
            let tasks = client.tasks(&id_or_name).await?;
            if json {
                print_json(out, &tasks)?;
            } else {
                print_tasks(out, &tasks)?;
            }
            Ok(0)
        }
        Command::Trace { id_or_name, json } => {
            let bytes = client.trace(&id_or_name).await?;
            if json {
                out.write_all(&bytes)?;
            } else {
                crate::trace::render(out, &bytes)?;
            }
            Ok(0)
        }
        Command::Publish {
            dir,
            registry,
            platform,
            json,
        } => publish(out, &dir, registry, platform, json),
        Command::Policy { path, json } => {
            let report = client
                .policy(&crate::api::PolicyRequest {
                    path: absolute(&path)?,
                })
                .await?;
            if json {
                print_json(out, &report)?;
            } else {
                print_policy(out, &report)?;
            }
            Ok(i32::from(report.refused.is_some()))
        }
        Command::Doctor {
            state_dir,
            unit,
            json,
        } => {
            let state_dir = state_dir.unwrap_or_else(paths::default_state_dir);
            let mut checks = crate::doctor::run(&state_dir, client.socket(), &unit);
            let health = client.health().await.ok();
            checks.push(crate::doctor::tool_jail(health.as_ref()));
            checks.extend(health.as_ref().map(crate::doctor::a2a_exposure));
            let failed = checks
                .iter()
                .any(|c| c.verdict == crate::doctor::Verdict::Fail);
            if json {
                print_json(out, &checks)?;
            } else {
                print_checks(out, &checks)?;
            }
            Ok(i32::from(failed))
        }
        Command::Logs { id_or_name, follow } => {
            let mut failed = None;
            client
                .logs(&id_or_name, follow, |chunk| {
                    if failed.is_none()
                        && let Err(e) = out.write_all(chunk).and_then(|()| out.flush())
                    {
                        failed = Some(e);
                    }
                })
                .await?;
            match failed {
                Some(e) => Err(e.into()),
                None => Ok(0),
            }
        }
    }
}

fn read_task(file: &std::path::Path) -> Result<String, CliError> {
    let text = if file == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| CliError::Usage(format!("cannot read the task from stdin: {e}")))?;
        text
    } else {
        std::fs::read_to_string(file).map_err(|e| {
            CliError::Usage(format!("cannot read --task-file {}: {e}", file.display()))
        })?
    };
    Ok(text)
}

/// `start`: a session, and with `--wait` its end (exit code 1 unless it completed).
async fn start(
    out: &mut impl Write,
    client: &Client,
    request: &StartRequest,
    wait: bool,
    json: bool,
) -> Result<i32, CliError> {
    let mut session = client.start(request).await?;
    if wait {
        session = client.wait(&session.id).await?;
    }
    print_session(out, &session, json)?;
    Ok(i32::from(
        wait && session.state != crate::api::SessionState::Completed,
    ))
}

/// `path` made absolute (the daemon resolves nothing against roostctl's cwd).
fn absolute(path: &std::path::Path) -> Result<String, CliError> {
    absolutize(path)
        .map(|p| p.display().to_string())
        .map_err(|e| CliError::Usage(e.to_string()))
}

/// `send`: one A2A message to a route, printing what comes back (streamed
/// text as it arrives).
async fn send(
    out: &mut impl Write,
    client: &Client,
    route: &str,
    text: &str,
    stream: bool,
    task_id: Option<&str>,
    json: bool,
) -> Result<i32, CliError> {
    let health = client.health().await?;
    let token = std::env::var("ROOST_A2A_TOKEN").ok();
    let mut failed = None;
    crate::a2a::send(
        &crate::a2a::Send {
            addr: &health.a2a_addr,
            route,
            text,
            task_id,
            stream,
            token: token.as_deref(),
        },
        |event| {
            let line = if json {
                event.to_string()
            } else if event.get("artifactUpdate").is_some() {
                // Streamed text is printed as it comes, without newlines.
                let chunk = crate::a2a::describe(event);
                let last = event["artifactUpdate"]["lastChunk"] == true;
                let write = if last { "\n".to_string() } else { chunk };
                if failed.is_none()
                    && let Err(e) = out.write_all(write.as_bytes()).and_then(|()| out.flush())
                {
                    failed = Some(e);
                }
                return;
            } else {
                crate::a2a::describe(event)
            };
            if failed.is_none()
                && let Err(e) = writeln!(out, "{line}")
            {
                failed = Some(e);
            }
        },
    )
    .await?;
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}
