//! What a capsule's `capabilities.filesystem` may grant, and what a start
//! request's workdir may be: never a path that holds, or lies inside,
//! roostd's own state (state dir, config file, token and key files, a
//! registry directory); never, for writing, a path that holds the control
//! socket or the jail helper (a grant beside them touches nothing of them);
//! never a system tree (`/`, `/etc`, `/proc`, `/sys`, `/dev`, `/boot`,
//! `/root`, `/var/lib`, `/run`; for writing also `/usr`, `/bin`, `/sbin`, `/lib*`,
//! `/opt`, `/var`, whose binaries a root roostd's tool uid would otherwise
//! be given write ACLs on) unless roostd's own `filesystem.allow` lists it;
//! and never through a link. The staging check here and every later open
//! (each guest store, each tool call, each ACL grant) go through the one
//! [`Fence`], which opens a path without following links and holds the
//! object opened against roostd's files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sandbox::fence::{Access, Fence, FenceError, Guarded, Rule, Sessions};

use super::{CapabilityPolicy, PolicyError};

/// System trees no capsule is granted unless the operator allows it
/// (`/run` holds other services' credentials and sockets).
const SYSTEM_TREES: [&str; 9] = [
    "/", "/etc", "/proc", "/sys", "/dev", "/boot", "/root", "/var/lib", "/run",
];

/// Trees no capsule is granted write access to unless the operator allows
/// it (reading them is fine: `/usr/share`).
const SYSTEM_TREES_WRITE: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt", "/var",
];

/// What grants must stay clear of, as roostd's config names it.
#[derive(Debug)]
pub struct Protected {
    /// roostd's paths as the config names them, each with its rule.
    named: Vec<Guarded>,
    /// `<state>/sessions`, where roostd makes fresh workdirs.
    sessions: Option<PathBuf>,
    /// `filesystem.allow`, as named.
    allow: Vec<PathBuf>,
    /// The fence and `filesystem.allow` with their links resolved, made
    /// when first needed (a start that names no path resolves nothing).
    resolved: std::sync::OnceLock<(Arc<Fence>, Vec<PathBuf>)>,
}

impl Protected {
    /// `own`: roostd's files and directories, each with what it is (for
    /// the error; the config lists them: `DaemonConfig::own_paths`), which
    /// no grant holds or lies in; `not_written`: what no writable grant may
    /// hold (the control socket and its directory, the jail helper);
    /// `sessions`: where fresh workdirs are made; `allow`:
    /// `filesystem.allow`.
    pub fn new(
        own: Vec<(PathBuf, String)>,
        not_written: Vec<(PathBuf, String)>,
        sessions: Option<PathBuf>,
        allow: &[PathBuf],
    ) -> Self {
        let guarded = |rule| move |(path, what): (PathBuf, String)| Guarded { path, what, rule };
        let named = own
            .into_iter()
            .map(guarded(Rule::Apart))
            .chain(not_written.into_iter().map(guarded(Rule::NotWritten)))
            .collect();
        Self {
            named,
            sessions,
            allow: allow.to_vec(),
            resolved: std::sync::OnceLock::new(),
        }
    }

    /// The fence every later open of a grant or workdir is held against:
    /// roostd's paths with their links resolved, as they are now.
    pub fn fence(&self) -> Arc<Fence> {
        Arc::clone(&self.resolved().0)
    }

    fn resolved(&self) -> &(Arc<Fence>, Vec<PathBuf>) {
        self.resolved.get_or_init(|| {
            let guarded = self
                .named
                .iter()
                .map(|g| Guarded {
                    path: resolved(&g.path),
                    ..g.clone()
                })
                .collect();
            let fence = Fence {
                guarded,
                fresh_workdirs: self.sessions.as_ref().map(|named| Sessions {
                    named: named.clone(),
                    real: resolved(named),
                }),
            };
            let allow = self.allow.iter().map(|p| resolved(p)).collect();
            (Arc::new(fence), allow)
        })
    }

    /// Every `read_only` and `read_write` grant of `policy`.
    pub fn check(&self, policy: &CapabilityPolicy) -> Result<(), PolicyError> {
        for path in &policy.read_only {
            self.check_path("capabilities.filesystem.read_only", path, Access::Read)?;
        }
        for path in &policy.read_write {
            let field = "capabilities.filesystem.read_write";
            self.check_path(field, path, Access::Write)?;
            // A workdir may be `/var/tmp/work`; a grant of a binaries' tree
            // for writing is refused (a root roostd's tool uid would be given
            // write ACLs on it).
            self.check_trees(field, path, &SYSTEM_TREES_WRITE)?;
        }
        Ok(())
    }

    /// One path handed to a capsule (a grant, or its workdir) with
    /// `access`: `field` names it in the error.
    pub fn check_path(&self, field: &str, path: &Path, access: Access) -> Result<(), PolicyError> {
        let refuse = |what: String| PolicyError::ProtectedPath {
            field: field.to_string(),
            path: path.display().to_string(),
            what,
        };
        match self.fence().open(path, access, false, libc::O_PATH) {
            Ok(_) => {}
            Err(FenceError::Guarded { what, guarded, .. }) => {
                return Err(refuse(format!("{what} ({})", guarded.display())));
            }
            Err(error) => {
                return Err(PolicyError::GrantOpen {
                    field: field.to_string(),
                    error,
                });
            }
        }
        self.check_trees(field, path, &SYSTEM_TREES)?;
        Ok(())
    }

    /// `path` against the system `trees`, unless `filesystem.allow` allows
    /// it. The path has no link on it (the fence opened it so).
    fn check_trees(&self, field: &str, path: &Path, trees: &[&str]) -> Result<(), PolicyError> {
        let allowed = self.resolved().1.iter().any(|a| path.starts_with(a));
        for tree in trees {
            let tree = Path::new(tree);
            // A grant inside a system tree (every path is inside `/`: only
            // `/` itself counts there), or one that holds one (`/var`
            // holds `/var/lib`).
            let inside = tree != Path::new("/") && path.starts_with(tree);
            let holds = tree.starts_with(path);
            if (inside || holds) && !allowed {
                return Err(PolicyError::ProtectedPath {
                    field: field.to_string(),
                    path: path.display().to_string(),
                    what: format!(
                        "the system tree {} (roostd's filesystem.allow can allow a path inside one)",
                        tree.display()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// `path` with its links resolved: its longest part that exists, with the
/// rest (not made yet) joined on.
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(state: &Path) -> Protected {
        let own = [
            ("state", "roostd's state dir"),
            ("state/registry", "roostd's registry"),
            ("roost.yaml", "roostd's config file"),
            ("secrets/a2a.token", "roostd's a2a.token_file"),
        ]
        .map(|(p, what)| (state.join(p), what.to_string()));
        let not_written = [
            ("bin/roost-jail", "roostd's jail helper"),
            ("run", "roostd's control socket dir"),
        ]
        .map(|(p, what)| (state.join(p), what.to_string()));
        Protected::new(
            own.to_vec(),
            not_written.to_vec(),
            Some(state.join("state/sessions")),
            &[PathBuf::from("/etc/ssl")],
        )
    }

    #[test]
    fn grants_stay_clear_of_roostds_files_and_system_trees() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = &dir.path().canonicalize().expect("real");
        for sub in ["state/keys", "run/inside", "secrets", "data", "bin"] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        for file in ["bin/roost-jail", "roost.yaml", "secrets/a2a.token"] {
            std::fs::write(root.join(file), "").expect("file");
        }
        std::fs::create_dir_all(root.join("state/registry")).expect("registry");
        std::os::unix::fs::symlink(root.join("state"), root.join("data/alias")).expect("link");
        let p = protected(root);
        let read = |path: &Path| p.check_path("f", path, Access::Read);
        // The controls: a directory of the capsule's own is granted, and a
        // directory beside the control socket, even for writing.
        read(&root.join("data")).expect("a plain directory");
        read(Path::new("/usr/share")).expect("not a protected tree");
        read(Path::new("/etc/ssl/certs")).expect("allowed by the operator");
        for beside in ["data", "run/inside"] {
            p.check_path("f", &root.join(beside), Access::Write)
                .expect("beside the control socket");
        }
        for (path, says) in [
            (root.join("state"), "state dir"),
            (root.join("state/keys"), "state dir"),
            (root.join("data/alias"), "passes through a link"),
            (root.to_path_buf(), "state dir"),
            (root.join("roost.yaml"), "config file"),
            (root.join("secrets/a2a.token"), "a2a.token_file"),
            // `/` holds the state dir too: that is what is named first.
            (PathBuf::from("/"), "overlaps"),
            (PathBuf::from("/etc"), "system tree /etc"),
            (PathBuf::from("/etc/passwd"), "system tree /etc"),
            (PathBuf::from("/run"), "system tree /run"),
            (PathBuf::from("/var"), "system tree /var/lib"),
            (PathBuf::from("/proc/self/fd"), "link"),
            (PathBuf::from("/proc/1"), "system tree /proc"),
            (root.join("state/registry"), "state dir"),
        ] {
            let e = read(&path).expect_err(says);
            assert!(e.to_string().contains(says), "{path:?}: {e}");
        }
        // Binaries are read, never written: a root roostd's tool uid would
        // be given write ACLs on them.
        let reads = CapabilityPolicy {
            read_only: vec![PathBuf::from("/usr/bin")],
            ..CapabilityPolicy::default()
        };
        p.check(&reads).expect("reading /usr/bin");
        let writes = CapabilityPolicy {
            read_write: vec![PathBuf::from("/usr/bin")],
            ..CapabilityPolicy::default()
        };
        let e = p.check(&writes).expect_err("writing /usr/bin");
        assert!(e.to_string().contains("system tree /usr"), "{e}");
        // The jail helper and the control socket's directory likewise:
        // read, never held for writing.
        for (dir, says) in [("bin", "jail helper"), ("run", "socket dir")] {
            let helper = CapabilityPolicy {
                read_write: vec![root.join(dir)],
                ..CapabilityPolicy::default()
            };
            let e = p.check(&helper).expect_err(says);
            assert!(e.to_string().contains(says), "{e}");
            let read = CapabilityPolicy {
                read_only: vec![root.join(dir)],
                ..CapabilityPolicy::default()
            };
            p.check(&read).expect(says);
        }
    }
}
