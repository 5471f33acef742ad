//! The jail native and shell tools run in. roostd starts a small helper
//! (`roost-jail __roost-jail <spec> -- <program> <args…>`, found by its probe
//! answer; roostd's own binary can play it); the helper, a fresh
//! single-threaded process, starts a new session (so the tool and its
//! children form one process group), joins the call's pids cgroup, sets
//! rlimits, closes every inherited descriptor above stderr, builds its
//! Landlock rules (files per scope, TCP connect per `network.allow` ports
//! where the ABI has it, signal and abstract-socket scoping), drops to the
//! workdir's tool uid when roostd is root (`identity.rs`), sets
//! `no_new_privs`, restricts itself, installs the seccomp filters for what
//! Landlock cannot express (`seccomp.rs`), and only then `exec`s the tool.
//! Nothing of this runs inside the async runtime's process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod cgroup;
pub mod dirfd;
pub mod fence;
pub mod host;
pub mod identity;
mod rules;
pub mod seccomp;

/// First argument that turns roostd into the jail helper.
pub const JAIL_ARG: &str = "__roost-jail";
/// `<helper> __roost-jail --probe` answers this on stdout: how roostd tells a
/// jail helper from any other executable, whatever its file name.
const PROBE: &str = "--probe";
const PROBE_ANSWER: &str = concat!("roost-jail ", env!("CARGO_PKG_VERSION"));

/// Whether the operator wants tools jailed, and whether a helper was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jail {
    /// `sandbox.jail_tools: false`.
    Off,
    /// Wanted, but no executable answered the helper's probe.
    NoHelper(String),
    /// Tools run through this helper.
    Helper(PathBuf),
}

impl Jail {
    pub fn helper(&self) -> Option<&Path> {
        match self {
            Self::Helper(path) => Some(path),
            _ => None,
        }
    }
}

/// Finds the jail helper by what it is, not by its name: `roost-jail` next to
/// the running executable, else in `../lib/roost/` from it (where the Debian
/// package puts it, off `PATH`: `/usr/lib/roost/roost-jail` for
/// `/usr/bin/roostd`), else the configured `sandbox.jail_helper`, else the
/// running executable itself (roostd plays the helper, whatever it is called).
/// Each candidate must answer the probe; `Jail::NoHelper` says what was tried.
pub fn find_helper(configured: Option<&Path>) -> Jail {
    let exe = std::env::current_exe().ok();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(exe) = &exe {
        candidates.push(exe.with_file_name("roost-jail"));
        if let Some(prefix) = exe.parent().and_then(Path::parent) {
            candidates.push(prefix.join("lib/roost/roost-jail"));
        }
    }
    candidates.extend(configured.map(Path::to_path_buf));
    candidates.extend(exe);
    let mut tried = Vec::new();
    for candidate in candidates {
        if !candidate.is_file() {
            continue;
        }
        if probe(&candidate) {
            return Jail::Helper(candidate);
        }
        tried.push(candidate.display().to_string());
    }
    Jail::NoHelper(format!(
        "no jail helper: install roost-jail next to roostd (or in ../lib/roost/ from it) \
         or set sandbox.jail_helper \
         (tried, and none answered the helper's probe: {})",
        if tried.is_empty() {
            "nothing found".to_string()
        } else {
            tried.join(", ")
        }
    ))
}

/// Runs `candidate __roost-jail --probe` and checks its answer.
fn probe(candidate: &Path) -> bool {
    use std::io::Read;
    let Ok(mut child) = std::process::Command::new(candidate)
        .args([JAIL_ARG, PROBE])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return false;
    };
    // Something else that happens to be called roost-jail may not answer at
    // all: it gets five seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut answer = String::new();
    if let Some(stdout) = child.stdout.as_mut() {
        let _ = stdout.take(256).read_to_string(&mut answer);
    }
    status.is_some_and(|s| s.success()) && answer.trim() == PROBE_ANSWER
}

/// Resource limits applied with setrlimit before exec (`None` = inherited).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Rlimits {
    pub cpu_secs: Option<u64>,
    pub address_space_bytes: Option<u64>,
    pub processes: Option<u64>,
    pub open_files: Option<u64>,
    pub file_size_bytes: Option<u64>,
}

/// Everything the helper needs; passed as one JSON argument.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JailSpec {
    /// The capsule's workdir: read, write and execute.
    pub workdir: PathBuf,
    /// Extra read-only paths (`filesystem.scope`).
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// Extra read-write paths.
    #[serde(default)]
    pub read_write: Vec<PathBuf>,
    /// TCP ports the tool may connect to (from `network.allow`); `None` allows
    /// any (a rule with a wildcard port).
    pub tcp_connect_ports: Option<Vec<u16>>,
    /// Sockets the tool may open (`AF_INET`/`AF_INET6` when the capsule
    /// declares network access; UDP only when the allow-list names port 53 or
    /// any port, so tools can resolve names; `AF_UNIX` only on request).
    #[serde(default)]
    pub sockets: seccomp::Sockets,
    pub rlimits: Rlimits,
    /// `cgroup.procs` of the call's pids cgroup, joined first (before the
    /// Landlock rules that would forbid writing it).
    #[serde(default)]
    pub cgroup_procs: Option<PathBuf>,
    /// The unprivileged uid to drop to (roostd runs as root).
    #[serde(default)]
    pub identity: Option<identity::Identity>,
    /// roostd's own files: the workdir and every extra path are opened
    /// without following a link and held against them at each call
    /// (`fence.rs`).
    #[serde(default)]
    pub fence: fence::Fence,
}

/// The tool jail as this host and the operator's settings make it, found
/// once at start-up: the helper, what the kernel enforces, the per-call pids
/// cgroups and, for a root roostd, the tools' uid range.
pub struct HostJail {
    pub jail: Jail,
    pub support: Support,
    pub pids: Option<std::sync::Arc<cgroup::PidsCgroups>>,
    pub tool_uids: Option<identity::UidRange>,
}

impl HostJail {
    /// Detects and logs it (`tool sandbox tier=…`); `jail_tools: false` is
    /// the operator's, `helper` the configured `sandbox.jail_helper`.
    pub fn detect(
        jail_tools: bool,
        helper: Option<&Path>,
        tool_uids: Option<identity::UidRange>,
    ) -> Self {
        let jail = if jail_tools {
            find_helper(helper)
        } else {
            Jail::Off
        };
        match &jail {
            Jail::Helper(helper) => tracing::info!(helper = %helper.display(), "tool jail helper"),
            Jail::NoHelper(why) => tracing::error!(
                tier = "none",
                "{why}; capsules with native or shell tools are refused \
                 (sandbox.unenforceable: refuse) or run unjailed (warn)"
            ),
            Jail::Off => {}
        }
        let pids = cgroup::PidsCgroups::detect().map(std::sync::Arc::new);
        let support = Support {
            tool_uid: tool_uids.is_some(),
            ..Support::detect(pids.as_deref())
        };
        let (tier, missing) = match &jail {
            Jail::NoHelper(_) => ("none", vec![NO_HELPER]),
            _ => support.tier(),
        };
        tracing::info!(
            tier,
            landlock_abi = support.landlock_abi.unwrap_or(0),
            missing = %missing.join("; "),
            jail_tools,
            "tool sandbox"
        );
        Self {
            tool_uids: tool_uids.filter(|_| support.root),
            jail,
            support,
            pids,
        }
    }
}

/// What this host can enforce.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Support {
    /// Landlock ABI version, `None` when Landlock is unavailable or disabled.
    pub landlock_abi: Option<i32>,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Whether each tool call gets a pids cgroup (`pids.max`).
    pub pids_cgroup: bool,
    /// Whether roostd runs as root, whom RLIMIT_NPROC does not bind.
    pub root: bool,
    /// Whether tools get an unprivileged uid when roostd runs as root
    /// (`sandbox.tool_uids`).
    pub tool_uid: bool,
}

impl Support {
    /// This host's facts; `pids` is the per-tool cgroup support found at start-up.
    pub fn detect(pids: Option<&cgroup::PidsCgroups>) -> Self {
        Self {
            landlock_abi: crate::host::landlock_abi(),
            seccomp: crate::host::seccomp_available(),
            pids_cgroup: pids.is_some(),
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
            tool_uid: true,
        }
    }

    /// Which protections the jail gives on this host, and which it lacks.
    pub fn tier(&self) -> (&'static str, Vec<&'static str>) {
        let mut missing = Vec::new();
        match self.landlock_abi {
            None => missing.push("landlock (files, TCP)"),
            Some(abi) => {
                if abi < 4 {
                    missing.push("landlock TCP rules (ABI < 4)");
                }
                if abi < 6 {
                    missing.push("landlock signal/abstract-socket scoping (ABI < 6)");
                }
            }
        }
        if !self.seccomp {
            missing.push("seccomp (UDP, io_uring, ptrace, mount, …)");
        }
        if self.root && !self.tool_uid {
            missing.push(
                "an unprivileged tool uid (roostd runs as root and sandbox.tool_uids is off)",
            );
        }
        if self.root && !self.pids_cgroup {
            missing.push(
                "process limit (roostd runs as root, whom RLIMIT_NPROC does not bind, and has \
                 no writable pids cgroup)",
            );
        }
        let tier = match (self.landlock_abi, missing.is_empty()) {
            (None, _) if !self.seccomp => "rlimits-only",
            (_, true) => "full",
            _ => "partial",
        };
        (tier, missing)
    }
}

/// What is missing when no jail helper answered.
pub const NO_HELPER: &str =
    "the jail helper (install roost-jail next to roostd, or set sandbox.jail_helper)";

/// The sandbox text of a session without native or shell tools.
pub const NO_NATIVE_TOOLS: &str = "no native tools (WASM only)";

/// What the jail enforces for one session's native and shell tools: the text
/// recorded with the session, and what is missing.
pub fn assess(native_tools: bool, jail: &Jail, support: &Support) -> (String, Vec<&'static str>) {
    if !native_tools {
        return (NO_NATIVE_TOOLS.into(), Vec::new());
    }
    match jail {
        Jail::Off => return ("unjailed (sandbox.jail_tools: false)".into(), Vec::new()),
        Jail::NoHelper(_) => {
            return (format!("none: missing {NO_HELPER}"), vec![NO_HELPER]);
        }
        Jail::Helper(_) => {}
    }
    let (tier, missing) = support.tier();
    if missing.is_empty() {
        (tier.to_string(), missing)
    } else {
        (format!("{tier}: missing {}", missing.join("; ")), missing)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("usage: roostd {JAIL_ARG} <spec-json> -- <program> [args…]")]
    Usage,
    #[error("invalid jail spec: {0}")]
    Spec(String),
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("landlock: {0}")]
    Landlock(String),
    #[error("a path of the capsule's: {0}")]
    Grant(#[source] fence::FenceError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("cannot exec {}: {source}", program.display())]
    Exec {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn os(what: &'static str) -> impl FnOnce(std::io::Error) -> JailError {
    move |source| JailError::Os { what, source }
}

/// Entry point of the helper: applies the jail and execs, or returns the
/// exit code to use (127 = could not start, as a shell would).
pub fn helper_main(args: Vec<OsString>) -> i32 {
    match run_helper(args) {
        Ok(never) => match never {},
        Err(error) => {
            eprintln!("roost jail: {error}");
            127
        }
    }
}

fn run_helper(args: Vec<OsString>) -> Result<std::convert::Infallible, JailError> {
    // args: [roostd, __roost-jail, spec, --, program, args...]
    let mut it = args.into_iter().skip(2);
    let spec = it.next().ok_or(JailError::Usage)?;
    if spec == PROBE {
        println!("{PROBE_ANSWER}");
        std::process::exit(0);
    }
    if it.next().as_deref() != Some(std::ffi::OsStr::new("--")) {
        return Err(JailError::Usage);
    }
    let program = PathBuf::from(it.next().ok_or(JailError::Usage)?);
    let rest: Vec<OsString> = it.collect();
    let spec: JailSpec = serde_json::from_str(spec.to_str().ok_or(JailError::Usage)?)
        .map_err(|e| JailError::Spec(e.to_string()))?;
    enter(&spec)?;
    let error =
        std::os::unix::process::CommandExt::exec(std::process::Command::new(&program).args(&rest));
    Err(JailError::Exec {
        program,
        source: error,
    })
}

/// Applies everything but the exec to the current (single-threaded) process.
pub fn enter(spec: &JailSpec) -> Result<(), JailError> {
    // SAFETY: plain syscalls on this process; no memory is shared.
    if unsafe { libc::setsid() } < 0 {
        return Err(os("setsid")(std::io::Error::last_os_error()));
    }
    if let Some(procs) = &spec.cgroup_procs {
        std::fs::write(procs, std::process::id().to_string()).map_err(os("join pids cgroup"))?;
    }
    set_rlimits(&spec.rlimits)?;
    close_inherited_fds()?;
    // The Landlock rules are made before the uid drop: making a rule opens
    // its path, which the tool uid may not be able to reach (a workdir under
    // a home directory), and a path that cannot be opened would be skipped.
    let ruleset = rules::landlock(spec)?;
    if let Some(id) = &spec.identity {
        identity::assume(id).map_err(os("drop to the tool uid"))?;
    }
    // SAFETY: as above.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(os("no_new_privs")(std::io::Error::last_os_error()));
    }
    ruleset
        .restrict_self()
        .map_err(|e| JailError::Landlock(e.to_string()))?;
    if crate::host::seccomp_available() {
        seccomp::install(spec.sockets)?;
    }
    Ok(())
}

fn set_rlimits(limits: &Rlimits) -> Result<(), JailError> {
    let set = |resource, value: Option<u64>, what| -> Result<(), JailError> {
        let Some(value) = value else { return Ok(()) };
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit with a valid struct.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(os(what)(std::io::Error::last_os_error()));
        }
        Ok(())
    };
    set(libc::RLIMIT_CPU, limits.cpu_secs, "RLIMIT_CPU")?;
    set(libc::RLIMIT_AS, limits.address_space_bytes, "RLIMIT_AS")?;
    set(libc::RLIMIT_NPROC, limits.processes, "RLIMIT_NPROC")?;
    set(libc::RLIMIT_NOFILE, limits.open_files, "RLIMIT_NOFILE")?;
    set(libc::RLIMIT_FSIZE, limits.file_size_bytes, "RLIMIT_FSIZE")
}

fn close_inherited_fds() -> Result<(), JailError> {
    // SAFETY: closes descriptors >= 3 of this process; stdio stays.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if rc != 0 {
        return Err(os("close_range")(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The tool's Landlock ruleset, ready for `restrict_self`.
/// The argument list that runs `program args…` inside the jail via `helper`.
pub fn jailed_command(
    helper: &Path,
    spec: &JailSpec,
    program: &Path,
    args: &[String],
) -> Result<(PathBuf, Vec<OsString>), JailError> {
    let spec = serde_json::to_string(spec).map_err(|e| JailError::Spec(e.to_string()))?;
    let mut argv: Vec<OsString> = vec![JAIL_ARG.into(), spec.into(), "--".into()];
    argv.push(program.as_os_str().to_owned());
    argv.extend(args.iter().map(OsString::from));
    Ok((helper.to_path_buf(), argv))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assessment_never_claims_what_is_missing() {
        let none = Support {
            landlock_abi: None,
            seccomp: false,
            pids_cgroup: false,
            root: false,
            tool_uid: true,
        };
        let on = Jail::Helper(PathBuf::from("/usr/libexec/roost-jail"));
        let (text, missing) = assess(true, &on, &none);
        assert!(text.starts_with("rlimits-only: missing landlock"), "{text}");
        assert_eq!(missing.len(), 2);
        let old = Support {
            landlock_abi: Some(3),
            seccomp: true,
            pids_cgroup: true,
            root: true,
            tool_uid: true,
        };
        let (text, _) = assess(true, &on, &old);
        assert!(
            text.starts_with("partial: missing landlock TCP rules"),
            "{text}"
        );
        let full = Support {
            landlock_abi: Some(7),
            seccomp: true,
            pids_cgroup: true,
            root: true,
            tool_uid: true,
        };
        assert_eq!(assess(true, &on, &full), ("full".to_string(), Vec::new()));
        let root_without_cgroup = Support {
            pids_cgroup: false,
            ..full.clone()
        };
        let (text, _) = assess(true, &on, &root_without_cgroup);
        assert!(text.starts_with("partial: missing process limit"), "{text}");
        let root_as_itself = Support {
            tool_uid: false,
            ..full.clone()
        };
        let (text, _) = assess(true, &on, &root_as_itself);
        assert!(text.contains("unprivileged tool uid"), "{text}");
        let user_without_cgroup = Support {
            root: false,
            ..root_without_cgroup
        };
        assert_eq!(
            assess(true, &on, &user_without_cgroup).0,
            "full",
            "RLIMIT_NPROC binds users"
        );
        assert_eq!(assess(false, &on, &none).0, "no native tools (WASM only)");
        assert!(
            assess(true, &Jail::Off, &none).1.is_empty(),
            "jail off is the operator's call"
        );
        let (text, missing) = assess(true, &Jail::NoHelper("x".into()), &full);
        assert!(text.starts_with("none: missing the jail helper"), "{text}");
        assert_eq!(missing, [NO_HELPER], "a missing helper is refused");
    }
}
