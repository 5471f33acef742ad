//! `murmur.lock`: pins each registry artifact of a capsule to one version and the
//! sha256 of its bundle. Read before staging; written only atomically.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the lock, next to the capsule's `murmur.yaml`.
pub const LOCK_FILENAME: &str = "murmur.lock";
/// The lock format this build reads and writes.
pub const LOCK_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid {}: {message}; fix it or delete it to re-pin", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One pinned artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    pub name: String,
    pub version: String,
    /// Hex sha256 of the bundle bytes.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MurmurLock {
    pub lock_version: u32,
    #[serde(default)]
    pub artifacts: Vec<LockEntry>,
}

impl Default for MurmurLock {
    fn default() -> Self {
        Self {
            lock_version: LOCK_VERSION,
            artifacts: Vec::new(),
        }
    }
}

impl MurmurLock {
    /// The lock at `path`, or `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Self>, LockError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LockError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        Self::parse(&text)
            .map(Some)
            .map_err(|message| LockError::Parse {
                path: path.to_path_buf(),
                message,
            })
    }

    /// Parses and checks a lock's text: its version, each name pinned once,
    /// each sha256 64 hex digits.
    pub fn parse(text: &str) -> Result<Self, String> {
        let lock: Self = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        if lock.lock_version != LOCK_VERSION {
            return Err(format!(
                "lock_version {} is not supported (this roost reads {LOCK_VERSION})",
                lock.lock_version
            ));
        }
        let mut names = std::collections::HashSet::new();
        for entry in &lock.artifacts {
            if !names.insert(entry.name.as_str()) {
                return Err(format!("`{}` is pinned twice", entry.name));
            }
            if entry.sha256.len() != 64 || !entry.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "`{}` has sha256 '{}', not 64 hex digits",
                    entry.name, entry.sha256
                ));
            }
        }
        Ok(lock)
    }

    pub fn get(&self, name: &str) -> Option<&LockEntry> {
        self.artifacts.iter().find(|e| e.name == name)
    }

    /// Adds or replaces the pin for `entry.name`, keeping entries sorted by name.
    pub fn pin(&mut self, entry: LockEntry) {
        self.artifacts.retain(|e| e.name != entry.name);
        self.artifacts.push(entry);
        self.artifacts.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// Drops the pin for `name`; true if there was one.
    pub fn unpin(&mut self, name: &str) -> bool {
        let before = self.artifacts.len();
        self.artifacts.retain(|e| e.name != name);
        before != self.artifacts.len()
    }

    /// Writes the lock via a temporary file, fsync and rename: readers see the
    /// old lock or the new one, never a torn file.
    pub fn write_atomic(&self, path: &Path) -> Result<(), LockError> {
        let write_err = |source| LockError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut text = String::from(
            "# murmur.lock: the exact artifact versions and bundle sha256 this capsule runs.\n\
             # Written by roost; commit it. Delete an entry (or the file) to re-pin.\n",
        );
        text.push_str(
            &serde_yaml::to_string(self).map_err(|e| write_err(std::io::Error::other(e)))?,
        );
        let tmp = path.with_file_name(format!(
            ".{LOCK_FILENAME}.tmp{}-{}-{}",
            std::process::id(),
            next_suffix(),
            unpredictable()
        ));
        let result = (|| {
            use std::io::Write;
            // Exclusive: a file or link already at the temp name (planted by
            // a tool, where the capsule dir is its workdir) is never written
            // through; the rename below replaces a link at `path` itself.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(write_err)
    }
}

/// A per-call suffix so concurrent writers never share a temp file.
/// 64 random bits in hex: a temp name nobody can plant a file at ahead of
/// time (where the capsule dir is a tool's workdir).
fn unpredictable() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: `bytes` is writable for its length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // getrandom(2) does not fail for 8 bytes once the pool is ready;
        // the time is the fallback, and O_EXCL still refuses any clash.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        bytes[..4].copy_from_slice(&nanos.to_le_bytes());
    }
    hex::encode(bytes)
}

fn next_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILENAME);
        assert_eq!(MurmurLock::read(&path).expect("read"), None);
        let mut lock = MurmurLock::default();
        lock.pin(LockEntry {
            name: "b".into(),
            version: "1.0.0".into(),
            sha256: "a".repeat(64),
        });
        lock.pin(LockEntry {
            name: "a".into(),
            version: "2.0.0".into(),
            sha256: "b".repeat(64),
        });
        lock.write_atomic(&path).expect("write");
        let back = MurmurLock::read(&path).expect("read").expect("some");
        assert_eq!(back, lock);
        assert_eq!(back.artifacts[0].name, "a");
        assert!(back.clone().unpin("a"));
    }

    #[test]
    fn bad_locks_say_what_is_wrong() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILENAME);
        for (text, needle) in [
            ("lock_version: 9\n", "lock_version 9"),
            (
                "lock_version: 1\nartifacts: [{name: a, version: 1.0.0, sha256: xyz}]\n",
                "not 64 hex",
            ),
            ("lock_version: 1\nbogus: 1\n", "unknown field"),
        ] {
            std::fs::write(&path, text).expect("write");
            let err = MurmurLock::read(&path).expect_err(text).to_string();
            assert!(err.contains(needle) && err.contains("murmur.lock"), "{err}");
        }
    }
}
