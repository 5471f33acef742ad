//! Running one command: each verb against the daemon (through [`Client`])
//! or locally (`publish`, `doctor`, `completions`), and its exit code.

use super::print::{
    Output, print_checks, print_cluster_table, print_health, print_json, print_nodes, print_policy,
    print_pruned, print_session, print_table, print_tasks, print_usage,
};
use super::publish::publish;
use super::*;

/// Runs one command, printing to `out`; returns the process exit code.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<i32, CliError> {
    let socket = paths::resolve_socket(cli.socket);
    let client = Client::new(socket);
    let how = Output {
        json: cli.json,
        quiet: cli.quiet,
    };
    let code = match cli.command {
        Command::Start {
            path,
            name,
            workdir,
            restart,
            wait,
            timeout,
            task,
            task_file,
            lifecycle,
            after_task,
            job_id,
            node,
            labels,
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
                node,
                node_labels: labels.into_iter().collect(),
                ..StartRequest::default()
            };
            let progress = !how.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let mut session = super::upload::start(&client, &request, progress).await?;
            if wait {
                session = wait_for(&client, &session, timeout).await?;
            }
            print_session(out, &session, how)?;
            if wait {
                exit::of_session(session.state)
            } else {
                exit::OK
            }
        }
        Command::Schedule(command) => super::schedule::run(&client, command, out, how).await?,
        Command::Upgrade {
            id_or_name,
            target,
            rollback,
            drain_timeout,
            force,
        } => {
            let (path, version) = match target {
                Some(t) if version_ref(&t) => (None, Some(t)),
                Some(t) => (Some(absolute(std::path::Path::new(&t))?), None),
                None => (None, None),
            };
            let request = crate::api::UpgradeRequest {
                path,
                version,
                rollback,
                drain_timeout_secs: Some(drain_timeout.as_secs()),
                force,
            };
            let session = client.upgrade(&id_or_name, &request).await?;
            print_session(out, &session, how)?;
            exit::OK
        }
        Command::Versions { id_or_name } => {
            let versions = client.versions(&id_or_name).await?;
            if how.json {
                print_json(out, &versions)?;
            } else {
                let mut table =
                    super::table::Table::new(&["VERSION", "CAPSULE", "SINCE", "WHY", "MANIFEST"]);
                for v in &versions {
                    table.row(
                        &[
                            v.version.clone(),
                            v.capsule.clone(),
                            v.since.clone(),
                            v.why.clone(),
                            v.manifest.clone(),
                        ],
                        &[],
                    );
                }
                table.write(out)?;
            }
            exit::OK
        }
        Command::Stop { id_or_name } => {
            let session = client.stop(&id_or_name).await?;
            print_session(out, &session, how)?;
            exit::OK
        }
        Command::Restart { id_or_name } => {
            let session = client.restart(&id_or_name).await?;
            print_session(out, &session, how)?;
            exit::OK
        }
        Command::List { all, cluster: true } => {
            let sessions = client.cluster_sessions(all).await?;
            print_cluster_table(out, &sessions, how)?;
            exit::OK
        }
        Command::List {
            all,
            cluster: false,
        } => {
            let sessions = client.list(all).await?;
            print_table(out, &sessions, how)?;
            exit::OK
        }
        Command::Nodes => {
            let health = client.health().await?;
            let Some(cluster) = health.cluster else {
                return Err(CliError::Usage(
                    "this roostd is not a node of a cluster (cluster.servers is unset; see \
                     docs/cluster.md)"
                        .into(),
                ));
            };
            print_nodes(out, &cluster, how)?;
            exit::OK
        }
        Command::Drain { node, timeout } => {
            let report = client
                .drain(&crate::api::DrainRequest {
                    node,
                    timeout_secs: Some(timeout.as_secs().max(1)),
                })
                .await?;
            if how.json {
                print_json(out, &report)?;
            } else if !how.quiet {
                for s in &report.sessions {
                    match (&s.to, &s.error) {
                        (Some(to), _) => writeln!(out, "moved {} ({}) to {to}", s.route, s.id)?,
                        (None, why) => writeln!(
                            out,
                            "left {} ({}): {}",
                            s.route,
                            s.id,
                            why.as_deref().unwrap_or("not moved")
                        )?,
                    }
                }
                if report.sessions.is_empty() {
                    writeln!(out, "node {} runs no sessions", report.node)?;
                }
            }
            if report.sessions.iter().any(|s| s.to.is_none()) {
                exit::UNSUCCESSFUL
            } else {
                exit::OK
            }
        }
        Command::Status { id_or_name: None } => {
            let health = client.health().await?;
            if how.json {
                print_json(out, &health)?;
            } else if !how.quiet {
                print_health(out, &health)?;
            }
            exit::OK
        }
        Command::Status {
            id_or_name: Some(id_or_name),
        } => {
            let session = client.get(&id_or_name).await?;
            print_session(out, &session, how)?;
            if !how.json && !how.quiet {
                let tasks = client.tasks(&session.id).await?;
                print_usage(out, &session, &tasks)?;
            }
            exit::OK
        }
        Command::Rm {
            ids_or_names,
            force,
        } => remove(out, &client, &ids_or_names, force, how).await?,
        Command::Prune {
            older_than,
            dry_run,
        } => {
            let request = crate::api::PruneRequest {
                older_than_secs: older_than.map_or(0, |d| d.as_secs()),
                dry_run,
            };
            let report = client.prune(&request).await?;
            if how.json {
                print_json(out, &report)?;
            } else if how.quiet {
                for s in &report.sessions {
                    writeln!(out, "{}", s.id)?;
                }
            } else {
                print_pruned(out, &report)?;
            }
            exit::OK
        }
        Command::Events { follow, tail } => {
            super::stream::events(out, &client, follow, tail, how).await?
        }
        Command::Send {
            route,
            text,
            stream,
            task_id,
            timeout,
        } => {
            let send = super::talk::SendArgs {
                route: &route,
                text: &text,
                stream,
                task_id: task_id.as_deref(),
                timeout,
            };
            super::talk::send(out, &client, &send, how).await?
        }
        Command::Cancel { route, task_id } => {
            super::talk::cancel(out, &client, &route, &task_id, how).await?
        }
        Command::Card { route } => super::talk::card(out, &client, &route, how).await?,
        Command::Tasks { id_or_name } => {
            let tasks = client.tasks(&id_or_name).await?;
            if how.json {
                print_json(out, &tasks)?;
            } else if how.quiet {
                for t in &tasks {
                    writeln!(out, "{}", t.id)?;
                }
            } else {
                print_tasks(out, &tasks)?;
            }
            exit::OK
        }
        Command::Trace { id_or_name } => {
            let bytes = client.trace(&id_or_name).await?;
            if how.json {
                out.write_all(&bytes)?;
            } else if !how.quiet {
                crate::trace::render(out, &bytes)?;
            }
            exit::OK
        }
        Command::Publish {
            dir,
            registry,
            to_daemon,
            cluster,
            platform,
        } => {
            let target = super::publish::Target::choose(registry, to_daemon, cluster, &client);
            publish(out, &client, &dir, target, platform, how).await?
        }
        Command::Policy { path } => {
            let report = client
                .policy(&crate::api::PolicyRequest {
                    path: absolute(&path)?,
                })
                .await?;
            if how.json {
                print_json(out, &report)?;
            } else if !how.quiet {
                print_policy(out, &report)?;
            }
            if report.refused.is_some() {
                exit::POLICY
            } else {
                exit::OK
            }
        }
        Command::Doctor { state_dir, unit } => {
            let state_dir = state_dir.unwrap_or_else(paths::default_state_dir);
            let mut checks = crate::doctor::run(&state_dir, client.socket(), &unit);
            let health = client.health().await.ok();
            checks.push(crate::doctor::tool_jail(health.as_ref()));
            checks.extend(health.as_ref().map(crate::doctor::a2a_exposure));
            checks.extend(health.as_ref().and_then(crate::doctor::cluster));
            let failed = checks
                .iter()
                .any(|c| c.verdict == crate::doctor::Verdict::Fail);
            if how.json {
                print_json(out, &checks)?;
            } else if !how.quiet {
                print_checks(out, &checks)?;
            }
            if failed { exit::ERROR } else { exit::OK }
        }
        Command::Logs {
            id_or_name,
            follow,
            tail,
            since,
            timestamps,
        } => {
            let query = crate::api::LogsQuery {
                follow,
                tail,
                since_ms: since.map(super::stream::ms_ago),
                timestamps,
                json: how.json,
            };
            super::stream::logs(out, &client, &id_or_name, &query).await?
        }
        Command::Cluster(ClusterCommand::NatsConfig { nodes, out: dir }) => {
            super::nats_config::write(&nodes, &dir, out)?;
            exit::OK
        }
        Command::Completions { shell } => {
            super::man::completions(out, shell)?;
            exit::OK
        }
        Command::Manpages { dir } => {
            super::man::manpages(&dir)?;
            exit::OK
        }
    };
    Ok(i32::from(code))
}

/// `start --wait`: the session's end, or a timeout that says how to follow it.
async fn wait_for(
    client: &Client,
    session: &Session,
    timeout: Option<std::time::Duration>,
) -> Result<Session, CliError> {
    let Some(limit) = timeout else {
        return Ok(client.wait(&session.id).await?);
    };
    match tokio::time::timeout(limit, client.wait(&session.id)).await {
        Ok(ended) => Ok(ended?),
        Err(_) => Err(CliError::Timeout(format!(
            "session {} ({}) is still {} after {}; it goes on: `roostctl status {}`, \
             `roostctl logs -f {}`",
            session.id,
            session.name,
            session.state,
            humantime::format_duration(limit),
            session.name,
            session.name
        ))),
    }
}

/// `rm`: each session in turn; the exit code of the first that failed.
async fn remove(
    out: &mut impl Write,
    client: &Client,
    ids_or_names: &[String],
    force: bool,
    how: Output,
) -> Result<u8, CliError> {
    let mut removed = Vec::new();
    let mut code = exit::OK;
    for id_or_name in ids_or_names {
        match client.remove(id_or_name, force).await {
            Ok(session) => {
                if how.quiet {
                    writeln!(out, "{}", session.id)?;
                } else if !how.json {
                    writeln!(out, "{} {}", session.id, session.name)?;
                }
                removed.push(session);
            }
            Err(e) => {
                eprintln!("roostctl: {id_or_name}: {e}");
                if code == exit::OK {
                    code = exit::of_client_error(&e);
                }
            }
        }
    }
    if how.json {
        print_json(out, &removed)?;
    }
    Ok(code)
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

/// `path` made absolute (the daemon resolves nothing against roostctl's cwd).
/// Whether an upgrade's target names a version (`name@version`) rather
/// than a capsule directory: it has an `@` between two non-empty parts, no
/// path separator, and nothing exists at it.
fn version_ref(target: &str) -> bool {
    target
        .split_once('@')
        .is_some_and(|(name, version)| !name.is_empty() && !version.is_empty())
        && !target.contains('/')
        && !std::path::Path::new(target).exists()
}

fn absolute(path: &std::path::Path) -> Result<String, CliError> {
    absolutize(path)
        .map(|p| p.display().to_string())
        .map_err(|e| CliError::Usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::version_ref;

    #[test]
    fn an_upgrade_target_names_a_version_or_a_directory() {
        assert!(version_ref("helper@0.2.0"));
        for dir in [
            "./helper-0.2.0",
            "helper",
            "@0.2.0",
            "helper@",
            "a/b@1",
            ".",
        ] {
            assert!(!version_ref(dir), "{dir}");
        }
    }
}
