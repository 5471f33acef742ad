//! Default locations shared by roostd and roostctl (system paths as root, XDG paths otherwise).

use std::path::PathBuf;

/// Environment variable that points roostctl (and roostd) at a control socket.
pub const SOCKET_ENV: &str = "ROOST_SOCKET";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn env_dir(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

fn home() -> Option<PathBuf> {
    env_dir("HOME")
}

/// `/var/lib/roost` as root, else `$XDG_STATE_HOME/roost` (default `~/.local/state/roost`).
pub fn default_state_dir() -> PathBuf {
    if is_root() {
        return PathBuf::from("/var/lib/roost");
    }
    env_dir("XDG_STATE_HOME")
        .or_else(|| home().map(|h| h.join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("roost")
}

/// Environment variable naming the registry (a directory, or an `http://` URL for roostd).
pub const REGISTRY_ENV: &str = "ROOST_REGISTRY";

/// The default artifact registry: `registry/` in the default state dir.
pub fn default_registry() -> PathBuf {
    default_state_dir().join("registry")
}

/// `/run/roost/roostd.sock` as root, else `$XDG_RUNTIME_DIR/roost/roostd.sock`
/// (falling back to the state dir when there is no runtime dir).
pub fn default_socket() -> PathBuf {
    if is_root() {
        return PathBuf::from(SYSTEM_SOCKET);
    }
    match env_dir("XDG_RUNTIME_DIR") {
        Some(dir) => dir.join("roost").join("roostd.sock"),
        None => default_state_dir().join("roostd.sock"),
    }
}

/// `/etc/roost/roost.yaml` as root, else `$XDG_CONFIG_HOME/roost/roost.yaml`.
pub fn default_config() -> PathBuf {
    if is_root() {
        return PathBuf::from("/etc/roost/roost.yaml");
    }
    env_dir("XDG_CONFIG_HOME")
        .or_else(|| home().map(|h| h.join(".config")))
        .unwrap_or_else(std::env::temp_dir)
        .join("roost")
        .join("roost.yaml")
}

/// The system daemon's socket (the unit's `--socket`).
pub const SYSTEM_SOCKET: &str = "/run/roost/roostd.sock";

/// The socket roostctl talks to: the flag, else `$ROOST_SOCKET`, else the
/// user's own daemon's socket when a daemon answers there, else the system
/// daemon's (`/run/roost/roostd.sock`, what a member of group `roost` uses
/// under systemd). As root the default socket is the system one anyway.
pub fn resolve_socket(flag: Option<PathBuf>) -> PathBuf {
    choose_socket(
        flag.or_else(|| std::env::var_os(SOCKET_ENV).map(PathBuf::from)),
        default_socket(),
        |own| std::os::unix::net::UnixStream::connect(own).is_ok(),
    )
}

fn choose_socket(
    given: Option<PathBuf>,
    own: PathBuf,
    answers: impl Fn(&std::path::Path) -> bool,
) -> PathBuf {
    if let Some(socket) = given {
        return socket;
    }
    if own.as_os_str() == SYSTEM_SOCKET || answers(&own) {
        return own;
    }
    PathBuf::from(SYSTEM_SOCKET)
}

/// Whether `socket` is the system daemon's.
pub fn is_system_socket(socket: &std::path::Path) -> bool {
    socket == std::path::Path::new(SYSTEM_SOCKET)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_own_daemon_is_used_only_when_it_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let own = dir.path().join("roostd.sock");
        let answers = |p: &std::path::Path| std::os::unix::net::UnixStream::connect(p).is_ok();
        let given = PathBuf::from("/tmp/given.sock");
        assert_eq!(
            choose_socket(Some(given.clone()), own.clone(), answers),
            given
        );
        assert_eq!(
            choose_socket(None, own.clone(), answers),
            PathBuf::from(SYSTEM_SOCKET),
            "nothing listens on the user's socket"
        );
        let _listener = std::os::unix::net::UnixListener::bind(&own).expect("bind");
        assert_eq!(choose_socket(None, own.clone(), answers), own);
        let system = PathBuf::from(SYSTEM_SOCKET);
        assert!(is_system_socket(&choose_socket(None, system, |_| false)));
    }
}
