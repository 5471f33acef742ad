//! Checkpoint signing: files under `<workdir>/checkpoints/` are signed (HMAC-SHA256
//! with a per-daemon key kept 0600 in the state dir) when an agent session ends
//! and verified when the next one starts on the same workdir; a tampered or
//! unsigned file is renamed `*.rejected`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The checkpoint dir inside the accessible workdir.
pub const CHECKPOINT_DIR: &str = "checkpoints";
/// Where the signatures live (outside `checkpoints/`, so a listing of it shows only checkpoints).
const SIGNATURES: &str = ".murmur/checkpoint-signatures.json";
/// Suffix of a refused checkpoint.
pub const REJECTED_SUFFIX: &str = ".rejected";
/// File name of the key in the state dir.
pub const KEY_FILE: &str = "checkpoint.key";

/// Checkpoint key problems (at start-up).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read or create the checkpoint key {}: {source}", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the checkpoint key {} is {len} bytes; expected 32 (delete it to make a new one; existing checkpoints are then rejected)", path.display())]
    KeyLength { path: PathBuf, len: usize },
}

/// The per-daemon signing key.
#[derive(Clone)]
pub struct CheckpointKey([u8; 32]);

impl std::fmt::Debug for CheckpointKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckpointKey(<redacted>)")
    }
}

impl CheckpointKey {
    /// Reads `<state_dir>/checkpoint.key`, creating it (0600, random) when absent.
    pub fn load_or_create(state_dir: &Path) -> Result<Self, CheckpointError> {
        let path = state_dir.join(KEY_FILE);
        let io = |source| CheckpointError::Key {
            path: path.clone(),
            source,
        };
        match std::fs::File::open(&path) {
            Ok(mut file) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).map_err(io)?;
                let key: [u8; 32] =
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| CheckpointError::KeyLength {
                            path: path.clone(),
                            len: bytes.len(),
                        })?;
                Ok(Self(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                std::fs::File::open("/dev/urandom")
                    .and_then(|mut f| f.read_exact(&mut key))
                    .map_err(io)?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(io)?;
                file.write_all(&key)
                    .and_then(|()| file.sync_all())
                    .map_err(io)?;
                Ok(Self(key))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// HMAC-SHA256 over the relative path, a NUL, and the contents.
    fn mac(&self, rel: &str, contents: &[u8]) -> String {
        const BLOCK: usize = 64;
        let mut block = [0u8; BLOCK];
        block[..32].copy_from_slice(&self.0);
        let pad = |byte: u8| block.map(|b| b ^ byte);
        let mut inner = Sha256::new();
        inner.update(pad(0x36));
        inner.update(rel.as_bytes());
        inner.update([0]);
        inner.update(contents);
        let mut outer = Sha256::new();
        outer.update(pad(0x5c));
        outer.update(inner.finalize());
        hex::encode(outer.finalize())
    }
}

/// Every regular file under `checkpoints/` (relative paths, sorted), plus the
/// entries that are not regular files (symlinks and the like), which are never trusted.
/// Listed from the workdir without following a link anywhere (`fsx`).
fn walk(workdir: &Path, root: &Path) -> (Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut odd = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(Some(names)) = crate::fsx::list_dir(workdir, &root.join(&rel)) else {
            continue;
        };
        for name in names {
            let name = rel.join(name);
            let Some(text) = name.to_str().map(str::to_string) else {
                continue;
            };
            if text.ends_with(REJECTED_SUFFIX) {
                continue;
            }
            match crate::fsx::list_dir(workdir, &root.join(&name)) {
                Ok(Some(_)) => stack.push(name),
                Ok(None) => files.push(text),
                Err(_) => odd.push(text),
            }
        }
    }
    files.sort();
    odd.sort();
    (files, odd)
}

fn read_signatures(workdir: &Path) -> BTreeMap<String, String> {
    crate::fsx::read(workdir, &workdir.join(SIGNATURES))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// A real directory (not a link a tool may have planted to point elsewhere).
fn real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// One checkpoint that failed verification and was renamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Path relative to `checkpoints/`.
    pub path: String,
    /// `unsigned`, `tampered` or `not a regular file`.
    pub reason: &'static str,
}

/// Verifies every checkpoint against the signatures the last session wrote;
/// renames each file that fails to `*.rejected` and returns them.
pub fn verify(key: &CheckpointKey, workdir: &Path) -> Vec<Rejected> {
    let root = workdir.join(CHECKPOINT_DIR);
    if !real_dir(&root) {
        return Vec::new();
    }
    let signatures = read_signatures(workdir);
    let (files, odd) = walk(workdir, &root);
    let mut rejected = Vec::new();
    for rel in files {
        // Read (and below, renamed) from the workdir without following a
        // link a tool may have swapped in meanwhile (crate::fsx).
        let contents = crate::fsx::read(workdir, &root.join(&rel));
        let reason = match (signatures.get(&rel), contents) {
            (None, _) => "unsigned",
            (Some(sig), Ok(contents)) if *sig == key.mac(&rel, &contents) => continue,
            (Some(_), _) => "tampered",
        };
        rejected.push(Rejected { path: rel, reason });
    }
    rejected.extend(odd.into_iter().map(|path| Rejected {
        path,
        reason: "not a regular file",
    }));
    for r in &rejected {
        let from = root.join(&r.path);
        let to = root.join(format!("{}{REJECTED_SUFFIX}", r.path));
        if let Err(error) = crate::fsx::rename(workdir, &from, &to) {
            tracing::warn!(path = %from.display(), %error, "cannot rename a rejected checkpoint");
        }
    }
    rejected
}

/// Signs every checkpoint as it is now; returns how many were signed.
pub fn sign(key: &CheckpointKey, workdir: &Path) -> std::io::Result<usize> {
    let root = workdir.join(CHECKPOINT_DIR);
    let path = workdir.join(SIGNATURES);
    if let Some(dir) = path.parent()
        && std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir())
    {
        return Err(std::io::Error::other(format!(
            "{} is not a directory; checkpoints are not signed",
            dir.display()
        )));
    }
    if !real_dir(&root) {
        // Nothing to vouch for; drop signatures of files that are gone.
        return crate::fsx::remove_file(workdir, &path).map(|()| 0);
    }
    let (files, _) = walk(workdir, &root);
    let mut signatures = BTreeMap::new();
    for rel in files {
        // What cannot be read as a regular file is left unsigned (and so
        // rejected next time).
        let Ok(contents) = crate::fsx::read(workdir, &root.join(&rel)) else {
            continue;
        };
        let mac = key.mac(&rel, &contents);
        signatures.insert(rel, mac);
    }
    let json = serde_json::to_vec_pretty(&signatures).map_err(std::io::Error::other)?;
    // Through no link a tool may have planted (crate::fsx).
    crate::fsx::replace(workdir, &path, &json, 0o644)?;
    Ok(signatures.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let a = CheckpointKey::load_or_create(dir.path()).expect("create");
        let b = CheckpointKey::load_or_create(dir.path()).expect("read");
        assert_eq!(a.0, b.0);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(dir.path().join(KEY_FILE), b"short").expect("write");
        assert!(matches!(
            CheckpointKey::load_or_create(dir.path()),
            Err(CheckpointError::KeyLength { len: 5, .. })
        ));
    }

    #[test]
    fn signed_files_pass_and_tampered_or_unsigned_ones_are_renamed() {
        let state = tempfile::tempdir().expect("tempdir");
        let work = tempfile::tempdir().expect("tempdir");
        let key = CheckpointKey::load_or_create(state.path()).expect("key");
        let cp = work.path().join(CHECKPOINT_DIR);
        std::fs::create_dir_all(cp.join("deep")).expect("mkdir");
        std::fs::write(cp.join("a.md"), "goals").expect("write");
        std::fs::write(cp.join("deep/b.md"), "notes").expect("write");
        assert_eq!(sign(&key, work.path()).expect("sign"), 2);
        assert!(verify(&key, work.path()).is_empty());

        std::fs::write(cp.join("deep/b.md"), "tampered").expect("write");
        std::fs::write(cp.join("new.md"), "sneaked in").expect("write");
        let rejected = verify(&key, work.path());
        assert_eq!(
            rejected,
            vec![
                Rejected {
                    path: "deep/b.md".into(),
                    reason: "tampered"
                },
                Rejected {
                    path: "new.md".into(),
                    reason: "unsigned"
                },
            ]
        );
        assert!(cp.join("a.md").is_file());
        assert!(cp.join("deep/b.md.rejected").is_file());
        assert!(cp.join("new.md.rejected").is_file());
        assert!(!cp.join("new.md").exists());

        // A file moved to another name is not vouched for by its old signature.
        std::fs::rename(cp.join("a.md"), cp.join("c.md")).expect("rename");
        assert_eq!(verify(&key, work.path())[0].path, "c.md");

        // Another daemon's key does not verify this one's signatures.
        std::fs::write(cp.join("d.md"), "x").expect("write");
        sign(&key, work.path()).expect("sign");
        let other = tempfile::tempdir().expect("tempdir");
        let other = CheckpointKey::load_or_create(other.path()).expect("key");
        assert_eq!(verify(&other, work.path())[0].reason, "tampered");
    }
}
