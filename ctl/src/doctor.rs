//! `roostctl doctor`: what this host can enforce for capsules and their tools,
//! and whether roostd's files and service are set up safely — each with a
//! plain verdict and, when it is not `ok`, what to do.

use std::path::Path;

use serde::Serialize;

use crate::host;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// What to do when the verdict is not `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn check(name: &'static str, verdict: Verdict, detail: String, fix: Option<&str>) -> Check {
    Check {
        name,
        verdict,
        detail,
        fix: fix.map(str::to_string),
    }
}

/// Every check, for this host and the given state dir, socket and unit file.
pub fn run(state_dir: &Path, socket: &Path, unit: &Path) -> Vec<Check> {
    let mut checks = vec![landlock(), seccomp(), user_namespaces(), cgroups()];
    checks.extend(rlimits());
    checks.push(overcommit());
    checks.push(unit_file(unit));
    checks.push(private_path("state dir", state_dir, 0o007));
    checks.push(private_path("control socket", socket, 0o007));
    checks
}

/// The cluster the running roostd is a node of, when it is one: its nodes,
/// or why the registry cannot be read (NATS lost).
pub fn cluster(health: &crate::api::Health) -> Option<Check> {
    let c = health.cluster.as_ref()?;
    let names: Vec<&str> = c.nodes.iter().map(|n| n.node.as_str()).collect();
    if let Some(insecure) = &c.insecure
        && c.error.is_none()
    {
        return Some(check(
            "cluster",
            Verdict::Warn,
            format!("node {} of {}: {insecure}", c.node, names.len()),
            Some(
                "give each node its own NATS user (roostctl cluster nats-config) and TLS beyond \
                 loopback, then remove cluster.insecure",
            ),
        ));
    }
    Some(match &c.error {
        None if names.contains(&c.node.as_str()) => check(
            "cluster",
            Verdict::Ok,
            format!("node {} of {}: {}", c.node, names.len(), names.join(", ")),
            None,
        ),
        None => check(
            "cluster",
            Verdict::Warn,
            format!(
                "node {} is not in the registry (nodes: {})",
                c.node,
                names.join(", ")
            ),
            Some("its heartbeat has not reached NATS: check roostd's log and the NATS servers"),
        ),
        Some(error) => check(
            "cluster",
            Verdict::Fail,
            format!("node {}: the node registry cannot be read: {error}", c.node),
            Some("check that the NATS servers in cluster.servers are up and reachable"),
        ),
    })
}

/// Whether the running roostd can jail native and shell tools at all (it
/// reports what it found in `/v1/health`).
pub fn tool_jail(health: Option<&crate::api::Health>) -> Check {
    let Some(health) = health else {
        return check(
            "tool jail",
            Verdict::Warn,
            "roostd is not reachable on the control socket: cannot tell which jail helper it uses"
                .into(),
            Some("start roostd (or pass --socket) and run doctor again"),
        );
    };
    match (&health.tool_jail, &health.jail_helper) {
        (Some(tier), _) if tier.starts_with("none") => check(
            "tool jail",
            Verdict::Fail,
            format!("roostd found no jail helper: {tier}"),
            Some(
                "install roost-jail next to roostd (it is built with it), or set \
                 sandbox.jail_helper to its absolute path",
            ),
        ),
        (Some(tier), _) if tier.starts_with("unjailed") => check(
            "tool jail",
            Verdict::Fail,
            format!("tools run {tier}"),
            Some("remove sandbox.jail_tools: false from roostd's config"),
        ),
        (Some(tier), helper) => check(
            "tool jail",
            if tier == "full" {
                Verdict::Ok
            } else {
                Verdict::Warn
            },
            format!("{tier} (helper {})", helper.as_deref().unwrap_or("unknown")),
            (tier != "full").then_some("see the other checks for what this host lacks"),
        ),
        (None, _) => check(
            "tool jail",
            Verdict::Warn,
            format!("roostd {} does not report its jail", health.version),
            Some("upgrade roostd"),
        ),
    }
}

/// Whether the A2A gateway is open beyond loopback without a token.
pub fn a2a_exposure(health: &crate::api::Health) -> Check {
    let loopback = health
        .a2a_addr
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    match (loopback, health.a2a_token) {
        (_, true) => check(
            "a2a gateway",
            Verdict::Ok,
            format!("{} (bearer token required)", health.a2a_addr),
            None,
        ),
        (true, false) => check(
            "a2a gateway",
            Verdict::Ok,
            format!("{} (loopback only, no token)", health.a2a_addr),
            None,
        ),
        (false, false) => check(
            "a2a gateway",
            Verdict::Fail,
            format!(
                "{} listens beyond loopback without a token: anyone who reaches it can send \
                 tasks to every capsule",
                health.a2a_addr
            ),
            Some("set a2a.token_file in roostd's config, or a2a_listen: 127.0.0.1:<port>"),
        ),
    }
}

fn landlock() -> Check {
    match host::landlock_abi() {
        None => check(
            "landlock",
            Verdict::Fail,
            "unavailable: native and shell tools get no file or TCP confinement".into(),
            Some(
                "use a kernel ≥ 5.13 with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y and `landlock` in the lsm= boot parameter)",
            ),
        ),
        Some(abi) if abi < 4 => check(
            "landlock",
            Verdict::Warn,
            format!("ABI {abi}: files confined; TCP rules (ABI 4) and scoping (ABI 6) missing"),
            Some("a kernel ≥ 6.7 adds TCP rules, ≥ 6.12 signal and abstract-socket scoping"),
        ),
        Some(abi) if abi < 6 => check(
            "landlock",
            Verdict::Warn,
            format!(
                "ABI {abi}: files and TCP confined; signal/abstract-socket scoping (ABI 6) missing"
            ),
            Some("a kernel ≥ 6.12 adds scoping"),
        ),
        Some(abi) => check(
            "landlock",
            Verdict::Ok,
            format!("ABI {abi}: files, TCP connect/bind and scoping"),
            None,
        ),
    }
}

fn seccomp() -> Check {
    if host::seccomp_available() {
        check(
            "seccomp",
            Verdict::Ok,
            "filters available: UDP/raw sockets, io_uring, ptrace, mount, namespaces, keyrings … refused in tools".into(),
            None,
        )
    } else {
        check(
            "seccomp",
            Verdict::Fail,
            "unavailable: tools may open UDP sockets and use io_uring, ptrace, mount".into(),
            Some("use a kernel built with CONFIG_SECCOMP_FILTER=y"),
        )
    }
}

fn user_namespaces() -> Check {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let detail = match max {
        Some(0) => "disabled on this host".to_string(),
        Some(n) => format!(
            "enabled (max {n}); the jail does not need them and its seccomp filter stops tools from creating them"
        ),
        None => "unknown".to_string(),
    };
    check("user namespaces", Verdict::Ok, detail, None)
}

fn cgroups() -> Check {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        check(
            "cgroups",
            Verdict::Ok,
            "v2 (unified hierarchy)".into(),
            None,
        )
    } else {
        check(
            "cgroups",
            Verdict::Warn,
            "v1 or hybrid hierarchy".into(),
            Some("boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2"),
        )
    }
}

fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "unlimited".into(), |v| v.to_string())
}

fn rlimits() -> Vec<Check> {
    let (nofile, nofile_max) = host::rlimit(libc::RLIMIT_NOFILE);
    let (address, _) = host::rlimit(libc::RLIMIT_AS);
    let nofile_check = match nofile {
        Some(n) if n < 4096 => check(
            "open files limit",
            Verdict::Warn,
            format!(
                "{n} (hard {}): roostd needs a few descriptors per live session",
                show(nofile_max)
            ),
            Some("raise LimitNOFILE (the unit sets 65536) or `ulimit -n`"),
        ),
        n => check("open files limit", Verdict::Ok, show(n), None),
    };
    let address_check = match address {
        Some(a) => check(
            "address space limit",
            Verdict::Fail,
            format!(
                "{a} bytes: the pooling allocator reserves address space for every instance slot up front"
            ),
            Some("remove the RLIMIT_AS limit (LimitAS=infinity) for roostd"),
        ),
        None => check(
            "address space limit",
            Verdict::Ok,
            "unlimited (the pooling allocator can reserve its slots)".into(),
            None,
        ),
    };
    vec![nofile_check, address_check]
}

fn overcommit() -> Check {
    let mode = std::fs::read_to_string("/proc/sys/vm/overcommit_memory")
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok());
    match mode {
        Some(2) => check(
            "memory overcommit",
            Verdict::Fail,
            "vm.overcommit_memory=2: reserving pooled instance memory is counted as committed"
                .into(),
            Some("set vm.overcommit_memory to 0, or lower pool.max_instances / pool.max_memory_mb"),
        ),
        Some(m) => check(
            "memory overcommit",
            Verdict::Ok,
            format!("vm.overcommit_memory={m}"),
            None,
        ),
        None => check("memory overcommit", Verdict::Warn, "unknown".into(), None),
    }
}

fn unit_file(unit: &Path) -> Check {
    let Ok(text) = std::fs::read_to_string(unit) else {
        return check(
            "systemd unit",
            Verdict::Warn,
            format!(
                "{} not found (roostd is not installed as a service here)",
                unit.display()
            ),
            Some("see systemd/README.md to install the unit"),
        );
    };
    let filters: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("SystemCallFilter="))
        .collect();
    if filters.is_empty() {
        return check(
            "systemd unit",
            Verdict::Ok,
            format!("{}: no syscall filter", unit.display()),
            None,
        );
    }
    let allowed = |name: &str| {
        filters
            .iter()
            .any(|f| !f.starts_with('~') && f.split_whitespace().any(|w| w == name))
    };
    let needed = [
        "landlock_create_ruleset",
        "landlock_add_rule",
        "landlock_restrict_self",
        "seccomp",
    ];
    let missing: Vec<&str> = needed.into_iter().filter(|n| !allowed(n)).collect();
    if missing.is_empty() {
        check(
            "systemd unit",
            Verdict::Ok,
            format!(
                "{}: its syscall filter allows what the jail needs",
                unit.display()
            ),
            None,
        )
    } else {
        check(
            "systemd unit",
            Verdict::Fail,
            format!(
                "{}: SystemCallFilter does not allow {}; tools would run unconfined or fail",
                unit.display(),
                missing.join(", ")
            ),
            Some(
                "add `SystemCallFilter=landlock_create_ruleset landlock_add_rule landlock_restrict_self seccomp` (as in systemd/roostd.service)",
            ),
        )
    }
}

fn private_path(name: &'static str, path: &Path, others_mask: u32) -> Check {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Err(_) => check(
            name,
            Verdict::Warn,
            format!(
                "{} does not exist (roostd has not run with this path)",
                path.display()
            ),
            None,
        ),
        Ok(meta) if meta.mode() & others_mask != 0 => check(
            name,
            Verdict::Fail,
            format!(
                "{} is mode {:o}: other users can reach it",
                path.display(),
                meta.mode() & 0o777
            ),
            Some(&format!("chmod o-rwx {}", path.display())).map(|s| s.as_str()),
        ),
        Ok(meta) => check(
            name,
            Verdict::Ok,
            format!(
                "{} (mode {:o}, uid {})",
                path.display(),
                meta.mode() & 0o777,
                meta.uid()
            ),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(a2a: &str, token: bool, jail: Option<&str>) -> crate::api::Health {
        crate::api::Health {
            status: "ok".into(),
            version: "0.1.0".into(),
            pid: 1,
            uptime_secs: 0,
            live_sessions: 0,
            a2a_addr: a2a.into(),
            control_addr: None,
            state_dir: "/var/lib/roost".into(),
            tool_jail: jail.map(str::to_string),
            a2a_token: token,
            jail_helper: jail.map(|_| "/usr/libexec/roost-jail".to_string()),
            resuming: None,
            cluster: None,
        }
    }

    #[test]
    fn no_jail_helper_and_an_open_gateway_fail() {
        let none = health(
            "127.0.0.1:7420",
            false,
            Some("none: missing the jail helper (…)"),
        );
        assert_eq!(tool_jail(Some(&none)).verdict, Verdict::Fail);
        let off = health(
            "127.0.0.1:7420",
            false,
            Some("unjailed (sandbox.jail_tools: false)"),
        );
        assert_eq!(tool_jail(Some(&off)).verdict, Verdict::Fail);
        let full = health("127.0.0.1:7420", false, Some("full"));
        assert_eq!(tool_jail(Some(&full)).verdict, Verdict::Ok);
        let partial = health("127.0.0.1:7420", false, Some("partial: missing x"));
        assert_eq!(tool_jail(Some(&partial)).verdict, Verdict::Warn);
        assert_eq!(tool_jail(None).verdict, Verdict::Warn, "no daemon to ask");

        assert_eq!(a2a_exposure(&full).verdict, Verdict::Ok, "loopback");
        let open = health("0.0.0.0:7420", false, Some("full"));
        let check = a2a_exposure(&open);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(
            check
                .fix
                .as_deref()
                .unwrap_or_default()
                .contains("a2a.token_file")
        );
        let guarded = health("0.0.0.0:7420", true, Some("full"));
        assert_eq!(a2a_exposure(&guarded).verdict, Verdict::Ok);
    }

    #[test]
    fn unit_filter_must_allow_the_jail_syscalls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let unit = dir.path().join("roostd.service");
        std::fs::write(&unit, "[Service]\nSystemCallFilter=@system-service\n").expect("write");
        let c = unit_file(&unit);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.detail.contains("landlock_create_ruleset"), "{}", c.detail);
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/roostd.service");
        assert_eq!(
            unit_file(&shipped).verdict,
            Verdict::Ok,
            "the shipped unit passes"
        );
    }

    #[test]
    fn world_readable_paths_fail() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        assert_eq!(
            private_path("state dir", dir.path(), 0o007).verdict,
            Verdict::Fail
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o750))
            .expect("chmod");
        assert_eq!(
            private_path("state dir", dir.path(), 0o007).verdict,
            Verdict::Ok
        );
    }
}
