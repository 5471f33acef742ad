//! What no grant may reach, and the one way a grant is opened. Every path
//! roostd hands a capsule (a WASM guest's preopened directory, a tool's
//! Landlock rule, a root roostd's ACL entries, a workdir) is opened here,
//! without following a link anywhere on its path, and the object opened is
//! held against roostd's own files before it is used: each time it is
//! opened, not once at staging, so a link a capsule plants between two runs
//! leads nowhere.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// roostd's own files and directories, as they are on disk (links
/// resolved when the fence was made), each with the rule that keeps
/// capsules off it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fence {
    pub guarded: Vec<Guarded>,
    /// `<state>/sessions`: a workdir roostd made for a session lies directly
    /// in it, the one place inside the state dir a workdir may be.
    #[serde(default)]
    pub fresh_workdirs: Option<Sessions>,
}

/// `<state>/sessions` as roostd's config names it (the operator's links on
/// the way, if any) and as it is on disk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Sessions {
    pub named: PathBuf,
    pub real: PathBuf,
}

/// One of roostd's paths and what it is (for the error).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Guarded {
    pub path: PathBuf,
    pub what: String,
    pub rule: Rule,
}

/// How far a grant must stay from a guarded path.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Rule {
    /// No grant holds it or lies inside it (the state dir, the config and
    /// token files, a registry directory).
    Apart,
    /// No writable grant holds it (it could be replaced); a grant beside it
    /// or inside its directory touches nothing of it, and reading it is
    /// harmless (the control socket's directory, the jail helper).
    NotWritten,
}

/// What a capsule may do with a path it is handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Why a path cannot be handed to a capsule.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error(
        "{} passes through a link (at {}): roostd opens what it hands a capsule without \
         following links; name the real path",
        path.display(), link.display()
    )]
    Link { path: PathBuf, link: PathBuf },
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} overlaps {what} ({})", path.display(), guarded.display())]
    Guarded {
        path: PathBuf,
        what: String,
        guarded: PathBuf,
    },
}

impl FenceError {
    /// Whether the path is simply not there (a grant removed meanwhile).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Open { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

impl Fence {
    /// Opens `path` (absolute, no `..`) for a capsule with `access`, without
    /// following a link anywhere on it, and holds the object opened against
    /// the guarded paths. `flags` are `open(2)`'s (`O_PATH` for a handle
    /// only); `workdir` says the path is a session's workdir, which may be
    /// one roostd made in its state dir.
    pub fn open(
        &self,
        path: &Path,
        access: Access,
        workdir: bool,
        flags: libc::c_int,
    ) -> Result<File, FenceError> {
        // A fresh workdir is opened below the sessions dir as it is on disk:
        // the links on the way to the state dir are the operator's, resolved
        // when the fence was made; none below it is followed.
        let fresh = self.fresh_workdirs.as_ref().filter(|s| {
            workdir && path.parent() == Some(s.named.as_path()) && path.file_name().is_some()
        });
        let real_path;
        let opened = match (fresh, path.file_name()) {
            (Some(sessions), Some(name)) => {
                real_path = sessions.real.join(name);
                real_path.as_path()
            }
            _ => path,
        };
        let file = crate::dirfd::open_no_links(opened, flags).map_err(|source| {
            match source.raw_os_error() {
                Some(libc::ELOOP) => FenceError::Link {
                    path: path.to_path_buf(),
                    link: first_link(path).unwrap_or_else(|| path.to_path_buf()),
                },
                _ => FenceError::Open {
                    path: path.to_path_buf(),
                    source,
                },
            }
        })?;
        let real = crate::dirfd::real_path(&file).map_err(|source| FenceError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        self.check(&real, access, workdir)
            .map_err(|(what, guarded)| FenceError::Guarded {
                path: path.to_path_buf(),
                what,
                guarded,
            })?;
        Ok(file)
    }

    /// `real` (a path as the kernel names an open file) against every
    /// guarded path: what it overlaps, if anything.
    fn check(&self, real: &Path, access: Access, workdir: bool) -> Result<(), (String, PathBuf)> {
        let fresh = workdir
            && self
                .fresh_workdirs
                .as_ref()
                .is_some_and(|sessions| real.parent() == Some(sessions.real.as_path()));
        if fresh {
            return Ok(());
        }
        for guarded in &self.guarded {
            let holds = guarded.path.starts_with(real);
            let refused = match guarded.rule {
                Rule::Apart => holds || real.starts_with(&guarded.path),
                Rule::NotWritten => holds && access == Access::Write,
            };
            if refused {
                return Err((guarded.what.clone(), guarded.path.clone()));
            }
        }
        Ok(())
    }
}

/// The first component of `path` that is a link, for the error.
fn first_link(path: &Path) -> Option<PathBuf> {
    let mut at = PathBuf::new();
    for component in path.components() {
        at.push(component);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(at);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(root: &Path) -> Fence {
        let guard = |p: &str, what: &str, rule| Guarded {
            path: root.join(p),
            what: what.to_string(),
            rule,
        };
        Fence {
            guarded: vec![
                guard("state", "roostd's state dir", Rule::Apart),
                guard("run", "roostd's control socket dir", Rule::NotWritten),
            ],
            fresh_workdirs: Some(Sessions {
                named: root.join("named/sessions"),
                real: root.join("state/sessions"),
            }),
        }
    }

    #[test]
    fn a_grant_is_opened_without_links_and_held_apart_from_roostds_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("real");
        for sub in ["state/sessions/s1", "state/keys", "run", "srv/app/data"] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        let fence = fence(&root);
        let open = |p: &Path, access, workdir| fence.open(p, access, workdir, libc::O_PATH);
        // The controls: a plain directory, for reading and writing; a
        // fresh workdir in the state dir; a grant beside the socket.
        open(&root.join("srv/app/data"), Access::Write, false).expect("a plain directory");
        open(&root.join("named/sessions/s1"), Access::Write, true).expect("a fresh workdir");
        open(&root.join("state/sessions/s1"), Access::Write, true).expect("as it is on disk");
        open(&root.join("srv"), Access::Write, false).expect("beside the socket dir");
        open(&root.join("run"), Access::Read, false).expect("reading the socket dir");
        // A link planted on the way, at the end or in the middle.
        std::os::unix::fs::symlink(root.join("state"), root.join("srv/app/x")).expect("link");
        std::os::unix::fs::symlink("../state", root.join("srv/up")).expect("link");
        for path in [root.join("srv/app/x"), root.join("srv/up/keys")] {
            let e = open(&path, Access::Read, false).expect_err("through a link");
            assert!(matches!(e, FenceError::Link { .. }), "{path:?}: {e}");
            assert!(e.to_string().contains("passes through a link"), "{e}");
        }
        // roostd's own files, however they are reached.
        for (path, access, says) in [
            (root.join("state/keys"), Access::Read, "state dir"),
            (root.join("state/sessions/s1"), Access::Read, "state dir"),
            (root.clone(), Access::Read, "state dir"),
            (root.join("run"), Access::Write, "socket dir"),
        ] {
            let e = open(&path, access, false).expect_err(says);
            assert!(e.to_string().contains(says), "{path:?}: {e}");
        }
        let gone = open(&root.join("srv/none"), Access::Read, false).expect_err("gone");
        assert!(gone.is_not_found(), "{gone}");
    }
}
