//! What the CLI prints: sessions as a table or one in detail, a session's
//! tasks, a capsule's effective policy, token use, doctor's checks, and any
//! of them as JSON.

use super::*;

/// Token use and tasks of an agent session (nothing for script capsules).
pub(super) fn print_usage(
    out: &mut impl Write,
    session: &Session,
    tasks: &[crate::api::TaskRecord],
) -> Result<(), CliError> {
    if tasks.is_empty() && session.usage.turns == 0 {
        return Ok(());
    }
    let u = &session.usage;
    writeln!(
        out,
        "{:<12} {} in, {} out, {} turns",
        "tokens", u.input_tokens, u.output_tokens, u.turns
    )?;
    writeln!(out, "tasks")?;
    for t in tasks {
        writeln!(
            out,
            "  {:<36} {:<9} {:<8} {:>8} in {:>7} out {:>3} turns {}",
            t.id,
            t.state,
            t.source,
            t.input_tokens,
            t.output_tokens,
            t.turns,
            t.error.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

pub(super) fn print_policy(
    out: &mut impl Write,
    r: &crate::api::PolicyReport,
) -> Result<(), CliError> {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    let ports = match &r.tool_tcp_ports {
        None => "any".to_string(),
        Some(p) if p.is_empty() => "none".to_string(),
        Some(p) => p.iter().map(u16::to_string).collect::<Vec<_>>().join(", "),
    };
    let l = &r.limits;
    let rows = [
        (
            "capsule",
            format!("{} {} ({})", r.capsule, r.version, r.manifest),
        ),
        ("tools", list(&r.tools)),
        ("artifacts", list(&r.artifacts)),
        ("network", list(&r.network_allow)),
        ("tool tcp ports", ports),
        (
            "tool udp",
            if r.tool_udp { "allowed" } else { "refused" }.to_string(),
        ),
        (
            "tool unix sockets",
            if r.tool_unix_sockets {
                "allowed (network.unix_sockets)"
            } else {
                "refused"
            }
            .to_string(),
        ),
        ("capsule files", list(&r.capsule_files)),
        ("read-only", list(&r.read_only)),
        (
            "read-write",
            format!("the workdir; {}", list(&r.read_write)),
        ),
        ("shell", list(&r.shell_allow)),
        ("strip env", list(&r.shell_strip_env)),
        ("env", list(&r.env_allow)),
        (
            "limits",
            format!("timeout {} s, memory {} MiB", l.timeout_secs, l.memory_mb),
        ),
        (
            "tool limits",
            format!(
                "cpu {} s, {} processes, {} open files, files up to {} bytes",
                l.tool_cpu_secs, l.tool_processes, l.tool_open_files, l.tool_output_bytes
            ),
        ),
        ("guests", r.guests.clone()),
        ("native tools", r.native_tools.clone()),
        (
            "verdict",
            r.refused.clone().unwrap_or_else(|| "would start".into()),
        ),
    ];
    for (key, value) in rows {
        writeln!(out, "{key:<15} {value}")?;
    }
    Ok(())
}

/// How a command prints: `--json`, `-q` (ids only), or text.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Output {
    pub json: bool,
    pub quiet: bool,
}

pub(super) fn print_session(
    out: &mut impl Write,
    session: &Session,
    how: Output,
) -> Result<(), CliError> {
    if how.json {
        return print_json(out, session);
    }
    if how.quiet {
        writeln!(out, "{}", session.id)?;
        return Ok(());
    }
    let rows: [(&str, String); 13] = [
        ("id", session.id.clone()),
        ("name", session.name.clone()),
        (
            "capsule",
            format!("{} {}", session.capsule, session.version),
        ),
        ("state", session.state.to_string()),
        ("error", session.error.clone().unwrap_or_else(|| "-".into())),
        ("restart", session.restart_policy.as_str().into()),
        (
            "sandbox",
            if session.sandbox.is_empty() {
                "-".into()
            } else {
                session.sandbox.clone()
            },
        ),
        ("restarts", session.restart_count.to_string()),
        ("workdir", session.workdir.clone()),
        ("bookkeeping", session.bookkeeping_dir.clone()),
        ("created", session.created_at.clone()),
        (
            "started",
            session.started_at.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "ended",
            session.ended_at.clone().unwrap_or_else(|| "-".into()),
        ),
    ];
    for (key, value) in rows {
        writeln!(out, "{key:<12} {value}")?;
    }
    if session.artifacts.is_empty() {
        writeln!(out, "{:<12} -", "artifacts")?;
        return Ok(());
    }
    writeln!(out, "artifacts")?;
    for a in &session.artifacts {
        let kind = match &a.implementation {
            Some(i) => format!("{} {}", a.runtime, i),
            None => a.runtime.clone(),
        };
        let sha = a.sha256.as_deref().unwrap_or("-");
        writeln!(
            out,
            "  {:<20} {:<10} {:<12} {:<9} {sha}",
            a.name, a.version, kind, a.origin
        )?;
    }
    Ok(())
}

/// Sessions as a table (ID, NAME, CAPSULE, STATE, RESTARTS, AGE, ERROR),
/// states coloured on a terminal; ids only with `-q`, the records with `--json`.
pub(super) fn print_table(
    out: &mut impl Write,
    sessions: &[Session],
    how: Output,
) -> Result<(), CliError> {
    if how.json {
        return print_json(out, &sessions);
    }
    if how.quiet {
        for s in sessions {
            writeln!(out, "{}", s.id)?;
        }
        return Ok(());
    }
    let colour = super::table::colour_wanted();
    let now = std::time::SystemTime::now();
    let headers = ["ID", "NAME", "CAPSULE", "STATE", "RESTARTS", "AGE", "ERROR"];
    let rows: Vec<[String; 7]> = sessions
        .iter()
        .map(|s| {
            [
                s.id.clone(),
                s.name.clone(),
                format!("{}@{}", s.capsule, s.version),
                s.state.to_string(),
                s.restart_count.to_string(),
                super::table::age(&s.created_at, now),
                s.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut table = super::table::Table::new(&headers);
    for (row, session) in rows.iter().zip(sessions) {
        let state = colour.then(|| super::table::state_colour(session.state));
        table.row(row, &[(3, state)]);
    }
    table.write(out)?;
    if rows.is_empty() {
        writeln!(
            out,
            "(no sessions; `roostctl list --all` includes ended ones)"
        )?;
    }
    Ok(())
}

/// `roostctl nodes`: a node per line, this one marked.
/// `roostctl list --cluster`: every node's sessions, by node.
pub(super) fn print_cluster_table(
    out: &mut impl Write,
    sessions: &[crate::api::ClusterSession],
    how: Output,
) -> Result<(), CliError> {
    if how.json {
        return print_json(out, &sessions);
    }
    if how.quiet {
        for s in sessions {
            writeln!(out, "{}", s.id)?;
        }
        return Ok(());
    }
    let now = std::time::SystemTime::now();
    let mut table = super::table::Table::new(&["NODE", "ID", "NAME", "CAPSULE", "STATE", "AGE"]);
    for s in sessions {
        table.row(
            &[
                s.node.clone(),
                s.id.clone(),
                s.name.clone(),
                format!("{}@{}", s.capsule, s.version),
                if s.live { "live" } else { "ended" }.to_string(),
                super::table::age(&s.started_at, now),
            ],
            &[],
        );
    }
    table.write(out)?;
    if sessions.is_empty() {
        writeln!(
            out,
            "(no sessions in the cluster; `roostctl list --cluster --all` includes ended ones)"
        )?;
    }
    Ok(())
}

pub(super) fn print_nodes(
    out: &mut impl Write,
    c: &crate::api::ClusterStatus,
    how: Output,
) -> Result<(), CliError> {
    if how.json {
        return print_json(out, c);
    }
    if how.quiet {
        for n in &c.nodes {
            writeln!(out, "{}", n.node)?;
        }
        return Ok(());
    }
    let headers = [
        "NODE",
        "HEARTBEAT",
        "SESSIONS",
        "CAPACITY",
        "GATEWAY",
        "LABELS",
        "VERSION",
    ];
    let mut table = super::table::Table::new(&headers);
    for n in &c.nodes {
        let mark = if n.node == c.node { " (this)" } else { "" };
        let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        table.row(
            &[
                format!("{}{mark}", n.node),
                format!("{:.1}s ago", n.heartbeat_age_ms as f64 / 1000.0),
                n.live_sessions.to_string(),
                n.capacity.to_string(),
                n.gateway_url.clone(),
                labels.join(","),
                n.version.clone(),
            ],
            &[],
        );
    }
    table.write(out)?;
    if let Some(error) = &c.error {
        writeln!(out, "(the node registry cannot be read: {error})")?;
    }
    Ok(())
}

/// Anything as pretty JSON, on a line of its own.
pub(super) fn print_json(
    out: &mut impl Write,
    value: &(impl serde::Serialize + ?Sized),
) -> Result<(), CliError> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(|e| CliError::Usage(e.to_string()))?;
    writeln!(out)?;
    Ok(())
}

/// A session's tasks as a table.
pub(super) fn print_tasks(
    out: &mut impl Write,
    tasks: &[crate::api::TaskRecord],
) -> Result<(), CliError> {
    writeln!(
        out,
        "{:<36} {:<10} {:<8} {:<24} {:<24} {:>8} {:>8} {:>5}",
        "TASK", "STATE", "SOURCE", "CREATED", "ENDED", "IN", "OUT", "TURNS"
    )?;
    for t in tasks {
        writeln!(
            out,
            "{:<36} {:<10} {:<8} {:<24} {:<24} {:>8} {:>8} {:>5}",
            t.id,
            t.state,
            t.source,
            t.created_at,
            t.ended_at.as_deref().unwrap_or("-"),
            t.input_tokens,
            t.output_tokens,
            t.turns
        )?;
    }
    Ok(())
}

/// doctor's checks, each with its fix.
pub(super) fn print_checks(
    out: &mut impl Write,
    checks: &[crate::doctor::Check],
) -> Result<(), CliError> {
    for c in checks {
        let verdict = match c.verdict {
            crate::doctor::Verdict::Ok => "ok",
            crate::doctor::Verdict::Warn => "WARN",
            crate::doctor::Verdict::Fail => "FAIL",
        };
        writeln!(out, "{verdict:<5} {:<20} {}", c.name, c.detail)?;
        if let Some(fix) = &c.fix {
            writeln!(out, "{:<26} fix: {fix}", "")?;
        }
    }
    Ok(())
}

/// The daemon, as `roostctl status` without a session shows it.
pub(super) fn print_health(out: &mut impl Write, h: &crate::api::Health) -> Result<(), CliError> {
    let uptime = humantime::format_duration(std::time::Duration::from_secs(h.uptime_secs));
    let mut rows = vec![
        ("roostd", format!("{} (pid {})", h.version, h.pid)),
        ("status", h.status.clone()),
        ("uptime", uptime.to_string()),
        ("sessions", format!("{} live", h.live_sessions)),
        ("a2a", h.a2a_addr.clone()),
        ("state dir", h.state_dir.clone()),
    ];
    if let Some(r) = h.resuming {
        rows.push((
            "resuming",
            format!("{} of {} sessions tried", r.done, r.total),
        ));
    }
    if let Some(jail) = &h.tool_jail {
        rows.push(("tool jail", jail.clone()));
    }
    if let Some(c) = &h.cluster {
        let names: Vec<&str> = c.nodes.iter().map(|n| n.node.as_str()).collect();
        let mut line = format!(
            "node {}; {} nodes: {}",
            c.node,
            names.len(),
            names.join(", ")
        );
        if let Some(error) = &c.error {
            line.push_str(&format!(" (registry unreadable: {error})"));
        }
        if let Some(insecure) = &c.insecure {
            line.push_str(&format!(" (INSECURE: {insecure})"));
        }
        rows.push(("cluster", line));
    }
    for (key, value) in rows {
        writeln!(out, "{key:<12} {value}")?;
    }
    Ok(())
}

/// What `roostctl prune` deleted (or would).
pub(super) fn print_pruned(
    out: &mut impl Write,
    r: &crate::api::PruneReport,
) -> Result<(), CliError> {
    for s in &r.sessions {
        writeln!(
            out,
            "{} {} {} ended {}",
            s.id,
            s.name,
            s.state.as_str(),
            s.ended_at.as_deref().unwrap_or("-")
        )?;
    }
    let verb = if r.dry_run { "would delete" } else { "deleted" };
    writeln!(
        out,
        "{verb} {} ended session(s) and {} ended A2A task(s)",
        r.sessions.len(),
        r.tasks
    )?;
    Ok(())
}
