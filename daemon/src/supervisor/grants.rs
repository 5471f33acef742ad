//! The ACL entries sessions' tool uids hold (`open_to_tools` in
//! `session/setup.rs` adds them under a root roostd), counted per uid and
//! path: a session holds its entries from setup to its end, and the entries
//! are taken back when the last session holding them ends (sessions on one
//! workdir share its uid, and may share grants).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// Most files and directories opened to a tool uid per path at session start.
pub const MAX_GRANTS: usize = 100_000;

/// How a path was granted, so it is taken back the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// The path itself.
    One,
    /// A tree, without roostd's `.murmur` at its top when `skip_murmur`.
    Tree { skip_murmur: bool },
}

/// What one session holds.
#[derive(Debug, Default)]
pub struct Held {
    uid: u32,
    paths: Vec<(PathBuf, Granted)>,
}

/// Every held entry, counted.
#[derive(Debug, Default)]
pub struct ToolGrants(Mutex<HashMap<(u32, PathBuf), (usize, Granted)>>);

impl ToolGrants {
    /// Counts `paths` as held by one more session of `uid`.
    pub fn hold(&self, uid: u32, paths: Vec<(PathBuf, Granted)>) -> Held {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for (path, how) in &paths {
            all.entry((uid, path.clone())).or_insert((0, *how)).0 += 1;
        }
        Held { uid, paths }
    }

    /// Ends a session's hold; takes back (on this thread: call it off the
    /// runtime) what no other session holds.
    pub fn release(&self, held: Held) {
        let free: Vec<(PathBuf, Granted)> = {
            let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
            held.paths
                .into_iter()
                .filter(|(path, _)| {
                    let key = (held.uid, path.clone());
                    match all.get_mut(&key) {
                        Some((n, _)) if *n > 1 => {
                            *n -= 1;
                            false
                        }
                        _ => {
                            all.remove(&key);
                            true
                        }
                    }
                })
                .collect()
        };
        use crate::sandbox::identity::{Grantee, revoke, revoke_tree};
        for (path, how) in free {
            let taken = match how {
                Granted::One => revoke(&path, Grantee::User(held.uid)),
                Granted::Tree { skip_murmur } => {
                    let skip: &[&str] = if skip_murmur { &[".murmur"] } else { &[] };
                    revoke_tree(&path, held.uid, skip, MAX_GRANTS).map(drop)
                }
            };
            match taken {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), uid = held.uid, "tool uid's ACL entries taken back")
                }
                // Gone since (a workdir removed): nothing left to take back.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(path = %path.display(), uid = held.uid, %error, "cannot take back the tool uid's ACL entries")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_taken_back_when_its_last_holder_ends() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("shared.txt");
        std::fs::write(&file, "x").expect("file");
        let uid = 2_000_000_127;
        use crate::sandbox::identity::{Grantee, grant, has_user_entry};
        match grant(&file, Grantee::User(uid), 4) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return,
            Err(e) => panic!("grant: {e}"),
        }
        let grants = ToolGrants::default();
        let first = grants.hold(uid, vec![(file.clone(), Granted::One)]);
        let second = grants.hold(uid, vec![(file.clone(), Granted::One)]);
        grants.release(first);
        assert!(
            has_user_entry(&file, uid).expect("read"),
            "another session still holds it"
        );
        grants.release(second);
        assert!(!has_user_entry(&file, uid).expect("read"), "taken back");
    }
}
