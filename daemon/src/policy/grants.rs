//! What a capsule's `capabilities.filesystem` may grant, and what a start
//! request's workdir may be: never a path that holds, or lies inside,
//! roostd's own state (state dir, socket dir, config file, token and key
//! files, a registry directory, the jail helper), and never a system tree
//! (`/`, `/etc`, `/proc`, `/sys`, `/dev`, `/boot`, `/root`, `/var/lib`; for
//! writing also `/usr`, `/bin`, `/sbin`, `/lib*`, `/opt`, `/var`, whose
//! binaries a root roostd's tool uid would otherwise be given write ACLs
//! on) unless roostd's own `filesystem.allow` lists it. Checked once, at
//! staging, where roostd's config is known; paths are compared after their
//! links are resolved.

use std::path::{Path, PathBuf};

use super::{CapabilityPolicy, PolicyError};

/// System trees no capsule is granted unless the operator allows it.
const SYSTEM_TREES: [&str; 8] = [
    "/", "/etc", "/proc", "/sys", "/dev", "/boot", "/root", "/var/lib",
];

/// Trees no capsule is granted write access to unless the operator allows
/// it (reading them is fine: `/usr/share`).
const SYSTEM_TREES_WRITE: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt", "/var",
];

/// What grants must stay clear of, as roostd's config names it.
#[derive(Debug)]
pub struct Protected {
    /// The paths as the config names them, resolved when first held
    /// against a path (a start that names none, most of them, resolves
    /// nothing).
    named: Named,
    resolved: std::sync::OnceLock<Named>,
}

/// roostd's paths, as named or with their links resolved.
#[derive(Debug, Clone)]
struct Named {
    /// roostd's own paths, with what each is (for the error).
    own: Vec<(PathBuf, String)>,
    /// roostd's own paths that may be read but never written (the jail
    /// helper: a root roostd runs it).
    own_binaries: Vec<(PathBuf, String)>,
    /// `filesystem.allow`.
    allow: Vec<PathBuf>,
}

impl Protected {
    /// `own`: roostd's files and directories, each with what it is (for
    /// the error; the config lists them: `DaemonConfig::own_paths`);
    /// `binaries`: what may be read but never written (the jail helper);
    /// `allow`: `filesystem.allow`.
    pub fn new(
        own: Vec<(PathBuf, String)>,
        binaries: Vec<(PathBuf, String)>,
        allow: &[PathBuf],
    ) -> Self {
        Self {
            named: Named {
                own,
                own_binaries: binaries,
                allow: allow.to_vec(),
            },
            resolved: std::sync::OnceLock::new(),
        }
    }

    /// The paths with their links resolved, as they are now.
    fn real(&self) -> &Named {
        self.resolved.get_or_init(|| {
            let real = |list: &[(PathBuf, String)]| {
                list.iter()
                    .map(|(p, what)| (resolved(p), what.clone()))
                    .collect()
            };
            Named {
                own: real(&self.named.own),
                own_binaries: real(&self.named.own_binaries),
                allow: self.named.allow.iter().map(|p| resolved(p)).collect(),
            }
        })
    }

    /// Every `read_only` and `read_write` grant of `policy`.
    pub fn check(&self, policy: &CapabilityPolicy) -> Result<(), PolicyError> {
        for path in &policy.read_only {
            self.check_path("capabilities.filesystem.read_only", path)?;
        }
        let field = "capabilities.filesystem.read_write";
        for path in &policy.read_write {
            self.check_path(field, path)?;
            let real = resolved(path);
            if let Some((own, what)) = self
                .real()
                .own_binaries
                .iter()
                .find(|(o, _)| overlaps(&real, o))
            {
                return Err(PolicyError::ProtectedPath {
                    field: field.to_string(),
                    path: path.display().to_string(),
                    what: format!("{what} ({})", own.display()),
                });
            }
            self.check_trees(field, path, &SYSTEM_TREES_WRITE)?;
        }
        Ok(())
    }

    /// One path handed to a capsule (a grant, or its workdir), to read at
    /// least: `field` names it in the error.
    pub fn check_path(&self, field: &str, path: &Path) -> Result<(), PolicyError> {
        let real = resolved(path);
        let refuse = |what: String| PolicyError::ProtectedPath {
            field: field.to_string(),
            path: path.display().to_string(),
            what,
        };
        for (own, what) in &self.real().own {
            if overlaps(&real, own) {
                return Err(refuse(format!("{what} ({})", own.display())));
            }
        }
        self.check_trees(field, path, &SYSTEM_TREES)
    }

    /// `path` against the system `trees`, unless `filesystem.allow` allows it.
    fn check_trees(&self, field: &str, path: &Path, trees: &[&str]) -> Result<(), PolicyError> {
        let real = resolved(path);
        let refuse = |what: String| PolicyError::ProtectedPath {
            field: field.to_string(),
            path: path.display().to_string(),
            what,
        };
        let allowed = self.real().allow.iter().any(|a| real.starts_with(a));
        for tree in trees {
            let tree = Path::new(tree);
            // A grant inside a system tree (every path is inside `/`: only
            // `/` itself counts there), or one that holds one (`/var`
            // holds `/var/lib`).
            let inside = tree != Path::new("/") && real.starts_with(tree);
            let holds = tree.starts_with(&real);
            if (inside || holds) && !allowed {
                return Err(refuse(format!(
                    "the system tree {} (roostd's filesystem.allow can allow a path inside one)",
                    tree.display()
                )));
            }
        }
        Ok(())
    }
}

/// Whether one path holds the other (or they are the same).
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// `path` with its links resolved (as far as it exists).
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(state: &Path) -> Protected {
        let own = [
            ("state", "roostd's state dir"),
            ("state/registry", "roostd's registry"),
            ("run", "roostd's control socket dir"),
            ("roost.yaml", "roostd's config file"),
            ("secrets/a2a.token", "roostd's a2a.token_file"),
        ]
        .map(|(p, what)| (state.join(p), what.to_string()));
        let helper = (
            state.join("bin/roost-jail"),
            "roostd's jail helper".to_string(),
        );
        Protected::new(own.to_vec(), vec![helper], &[PathBuf::from("/etc/ssl")])
    }

    #[test]
    fn grants_stay_clear_of_roostds_files_and_system_trees() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for sub in ["state/keys", "run", "secrets", "data"] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        std::os::unix::fs::symlink(root.join("state"), root.join("data/alias")).expect("link");
        let p = protected(root);
        // The control: a directory of the capsule's own is granted.
        p.check_path("f", &root.join("data"))
            .expect("a plain directory");
        p.check_path("f", Path::new("/usr/share"))
            .expect("not a protected tree");
        p.check_path("f", Path::new("/etc/ssl/certs"))
            .expect("allowed by the operator");
        for (path, says) in [
            (root.join("state"), "state dir"),
            (root.join("state/keys"), "state dir"),
            (root.join("data/alias"), "state dir"),
            (root.to_path_buf(), "state dir"),
            (root.join("run"), "socket dir"),
            (root.join("roost.yaml"), "config file"),
            (root.join("secrets/a2a.token"), "a2a.token_file"),
            // `/` holds the state dir too: that is what is named first.
            (PathBuf::from("/"), "overlaps"),
            (PathBuf::from("/etc"), "system tree /etc"),
            (PathBuf::from("/etc/passwd"), "system tree /etc"),
            (PathBuf::from("/var"), "system tree /var/lib"),
            (PathBuf::from("/proc/self"), "system tree /proc"),
            (root.join("state/registry"), "state dir"),
        ] {
            let e = p
                .check_path("capabilities.filesystem.read_only", &path)
                .expect_err(says);
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
        // The jail helper likewise: read, never written.
        std::fs::create_dir_all(root.join("bin")).expect("bin");
        let helper = CapabilityPolicy {
            read_write: vec![root.join("bin")],
            ..CapabilityPolicy::default()
        };
        let e = p.check(&helper).expect_err("writing the helper's dir");
        assert!(e.to_string().contains("jail helper"), "{e}");
        let read = CapabilityPolicy {
            read_only: vec![root.join("bin")],
            ..CapabilityPolicy::default()
        };
        p.check(&read).expect("reading the helper's dir");
    }
}
