//! Who a tool runs as when roostd runs as root: an unprivileged uid from
//! `sandbox.tool_uids`, one per workdir (sessions that share a workdir share
//! its files, so they share the uid; tools of sessions on different workdirs
//! cannot touch each other's files), with a gid of the same number and the
//! range's first number as a supplementary group that may traverse roostd's
//! state dir. The workdir (and the capsule's extra paths) are opened to that
//! uid with a POSIX ACL entry, so nothing else about them changes; what roostd
//! keeps in the bookkeeping dir stays root's, readable but not writable.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// `sandbox.tool_uids`: the uids tools may be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UidRange {
    pub first: u32,
    pub count: u32,
}

impl Default for UidRange {
    /// 64 Ki ids just below `i32::MAX`: far from system users (< 1000),
    /// regular users, systemd's dynamic users (61184–65519) and the bottom of
    /// its container range (524288 up), where nspawn allocates from.
    fn default() -> Self {
        Self {
            first: 0x7FFF_0000,
            count: 0xFFFF,
        }
    }
}

/// Why a `sandbox.tool_uids` range cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UidRangeError {
    #[error("sandbox.tool_uids.count must be at least 2")]
    TooFew,
    #[error("sandbox.tool_uids must lie between 1000 and 2147483647 (first + count)")]
    OutOfRange,
}

impl UidRange {
    /// Why the range cannot be used, if it cannot.
    pub fn validate(&self) -> Result<(), UidRangeError> {
        if self.count < 2 {
            return Err(UidRangeError::TooFew);
        }
        if self.first < 1000
            || self
                .first
                .checked_add(self.count)
                .is_none_or(|end| end > i32::MAX as u32)
        {
            return Err(UidRangeError::OutOfRange);
        }
        Ok(())
    }

    /// The group every tool uid has as a supplementary group.
    pub fn group(&self) -> u32 {
        self.first
    }

    /// The uid for tools working in `workdir`: a hash of its path into the
    /// range (past the group's number), skipping ids this host's user
    /// database knows.
    pub fn for_workdir(&self, workdir: &Path) -> Identity {
        use std::os::unix::ffi::OsStrExt;
        // FNV-1a over the path's components (so `/srv/a/` is `/srv/a`):
        // stable across runs and builds, unlike std's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for component in workdir.components() {
            for byte in component.as_os_str().as_bytes().iter().chain(b"/") {
                hash ^= u64::from(*byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        }
        let slots = u64::from(self.count.saturating_sub(1).max(1));
        let start = hash % slots;
        let uid = (0..slots.min(64))
            .map(|i| self.first + 1 + ((start + i) % slots) as u32)
            .find(|uid| !known_uid(*uid))
            .unwrap_or(self.first + 1 + start as u32);
        Identity {
            uid,
            gid: uid,
            group: self.group(),
        }
    }
}

/// A tool's uid, gid and supplementary group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub group: u32,
}

fn known_uid(uid: u32) -> bool {
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf`, which outlive the call.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
    rc == 0 && !result.is_null()
}

/// Drops to `identity` (in the helper, as root, before exec).
pub fn assume(identity: &Identity) -> std::io::Result<()> {
    let groups = [identity.group];
    // SAFETY: plain syscalls on this single-threaded process.
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0
            || libc::setresgid(identity.gid, identity.gid, identity.gid) != 0
            || libc::setresuid(identity.uid, identity.uid, identity.uid) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

const ACL_XATTR: &std::ffi::CStr = c"system.posix_acl_access";
const ACL_VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const UNDEFINED: u32 = u32::MAX;

/// Who an ACL entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grantee {
    User(u32),
    Group(u32),
}

fn tag_of(who: Grantee) -> u16 {
    match who {
        Grantee::User(_) => USER,
        Grantee::Group(_) => GROUP,
    }
}

fn id_of(who: Grantee) -> u32 {
    match who {
        Grantee::User(id) | Grantee::Group(id) => id,
    }
}

/// Adds (or widens) one named entry of `path`'s access ACL, keeping the rest;
/// the mask becomes the union of the group class, so the entry takes effect.
/// `path` is opened without following a link anywhere on it.
pub fn grant(path: &Path, who: Grantee, perm: u16) -> std::io::Result<()> {
    let file = crate::dirfd::open_no_links(path, libc::O_RDONLY | libc::O_NONBLOCK)?;
    grant_open(&file, who, perm)
}

/// Grants `uid` what a tool needs in the tree at `dir`: `dir_perm` on every
/// directory, `file_perm` on every regular file (plus execute where its owner
/// has it), walked without following any link and skipping files with more
/// than one hard link, and the top-level names in `skip` (roostd's
/// bookkeeping). Stops after `max` entries; returns how many it granted.
pub fn grant_tree(
    dir: &Path,
    uid: u32,
    (dir_perm, file_perm): (u16, u16),
    skip: &[&str],
    max: usize,
) -> std::io::Result<usize> {
    let top = crate::dirfd::open_no_links(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    grant_tree_open(top, uid, (dir_perm, file_perm), skip, max)
}

/// [`grant_tree`] from the open directory `top`.
pub fn grant_tree_open(
    top: std::fs::File,
    uid: u32,
    (dir_perm, file_perm): (u16, u16),
    skip: &[&str],
    max: usize,
) -> std::io::Result<usize> {
    let mut granted = 0;
    let mut stack = vec![(top, 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        grant_open(&dir, Grantee::User(uid), dir_perm)?;
        granted += 1;
        if depth >= 64 || granted >= max {
            continue;
        }
        let listing = crate::dirfd::entries(&dir)?;
        for entry in listing.flatten() {
            let name = entry.file_name();
            if depth == 0 && skip.iter().any(|s| name == *s) {
                continue;
            }
            let Ok(child) = crate::dirfd::open_child(&dir, &name) else {
                continue; // a link, a FIFO without a writer, gone
            };
            let Ok(meta) = child.metadata() else { continue };
            if meta.is_dir() {
                stack.push((child, depth + 1));
            } else if meta.is_file()
                && std::os::unix::fs::MetadataExt::nlink(&meta) == 1
                && granted < max
            {
                let exec = u16::from(std::os::unix::fs::MetadataExt::mode(&meta) & 0o100 != 0);
                grant_open(&child, Grantee::User(uid), file_perm | exec)?;
                granted += 1;
            }
        }
    }
    Ok(granted)
}

/// [`grant`] on an open file.
pub fn grant_open(file: &std::fs::File, who: Grantee, perm: u16) -> std::io::Result<()> {
    edit_acl(file, |entries| {
        let covers = |tag: u16, id: u32| {
            entries
                .iter()
                .any(|(t, p, i)| (*t, *i) == (tag, id) && p & perm == perm)
        };
        if covers(tag_of(who), id_of(who)) && covers(MASK, UNDEFINED) {
            // Already granted and in effect: nothing (not even the mask)
            // changes.
            return false;
        }
        let (tag, id) = (tag_of(who), id_of(who));
        match entries.iter_mut().find(|(t, _, i)| *t == tag && *i == id) {
            Some(entry) => entry.1 |= perm,
            None => entries.push((tag, perm, id)),
        }
        true
    })
}

/// Removes `who`'s named entry from `path`'s access ACL (what [`grant`]
/// added), keeping the rest; nothing when it has none. `path` is opened
/// without following a link anywhere on it.
pub fn revoke(path: &Path, who: Grantee) -> std::io::Result<()> {
    let file = crate::dirfd::open_no_links(path, libc::O_RDONLY | libc::O_NONBLOCK)?;
    revoke_open(&file, who)
}

/// [`revoke`] on every directory and regular file of the tree at `dir`,
/// walked as [`grant_tree`] walks it (no link followed, `skip` left out, at
/// most `max` entries); returns how many it visited.
pub fn revoke_tree(dir: &Path, uid: u32, skip: &[&str], max: usize) -> std::io::Result<usize> {
    let top = crate::dirfd::open_no_links(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let mut visited = 0;
    let mut stack = vec![(top, 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        revoke_open(&dir, Grantee::User(uid))?;
        visited += 1;
        if depth >= 64 || visited >= max {
            continue;
        }
        for entry in crate::dirfd::entries(&dir)?.flatten() {
            let name = entry.file_name();
            if depth == 0 && skip.iter().any(|s| name == *s) {
                continue;
            }
            let Ok(child) = crate::dirfd::open_child(&dir, &name) else {
                continue;
            };
            let Ok(meta) = child.metadata() else { continue };
            if meta.is_dir() {
                stack.push((child, depth + 1));
            } else if meta.is_file() && visited < max {
                revoke_open(&child, Grantee::User(uid))?;
                visited += 1;
            }
        }
    }
    Ok(visited)
}

fn revoke_open(file: &std::fs::File, who: Grantee) -> std::io::Result<()> {
    edit_acl(file, |entries| {
        let before = entries.len();
        let (tag, id) = (tag_of(who), id_of(who));
        entries.retain(|(t, _, i)| !(*t == tag && *i == id));
        entries.len() != before
    })
}

/// Reads `file`'s access ACL (or the one its mode makes), lets `change`
/// edit the entries (`false`: nothing to write), then writes it back with
/// the mask the union of the group class.
fn edit_acl(
    file: &std::fs::File,
    change: impl FnOnce(&mut Vec<(u16, u16, u32)>) -> bool,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let fd = file.as_raw_fd();
    let mut entries = match read_acl(fd)? {
        Some(entries) => entries,
        None => {
            let mode = file.metadata()?.mode();
            vec![
                (USER_OBJ, ((mode >> 6) & 7) as u16, UNDEFINED),
                (GROUP_OBJ, ((mode >> 3) & 7) as u16, UNDEFINED),
                (OTHER, (mode & 7) as u16, UNDEFINED),
            ]
        }
    };
    if !change(&mut entries) {
        return Ok(());
    }
    let mask = entries
        .iter()
        .filter(|(t, _, _)| matches!(*t, GROUP_OBJ | USER | GROUP))
        .fold(0, |m, (_, p, _)| m | p);
    entries.retain(|(t, _, _)| *t != MASK);
    if entries.iter().any(|(t, _, _)| matches!(*t, USER | GROUP)) {
        entries.push((MASK, mask, UNDEFINED));
    }
    entries.sort_by_key(|(t, _, i)| (*t, *i));
    let mut bytes = ACL_VERSION.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        bytes.extend(tag.to_le_bytes());
        bytes.extend(perm.to_le_bytes());
        bytes.extend(id.to_le_bytes());
    }
    // SAFETY: `fd` is open; the name is NUL-terminated; `bytes` outlives the call.
    let rc = unsafe {
        libc::fsetxattr(
            fd,
            ACL_XATTR.as_ptr(),
            bytes.as_ptr().cast(),
            bytes.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `path`'s access ACL has a named entry for the user `uid` (what
/// tests and `roostctl doctor` check).
pub fn has_user_entry(path: &Path, uid: u32) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    Ok(read_acl(file.as_raw_fd())?
        .unwrap_or_default()
        .iter()
        .any(|(t, _, i)| *t == USER && *i == uid))
}

/// The access ACL's entries (tag, perm, id); `None` when it has none.
fn read_acl(fd: i32) -> std::io::Result<Option<Vec<(u16, u16, u32)>>> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::fgetxattr(fd, ACL_XATTR.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) => Ok(None),
            _ => Err(e),
        };
    }
    let buf = &buf[..n as usize];
    if buf.len() < 4 || u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) != ACL_VERSION {
        return Err(std::io::Error::other("unexpected ACL format"));
    }
    Ok(Some(
        buf[4..]
            .chunks_exact(8)
            .map(|c| {
                (
                    u16::from_le_bytes([c[0], c[1]]),
                    u16::from_le_bytes([c[2], c[3]]),
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workdirs_map_to_stable_distinct_uids_in_the_range() {
        let range = UidRange::default();
        assert!(range.validate().is_ok());
        let a = range.for_workdir(Path::new("/srv/a"));
        assert_eq!(a, range.for_workdir(Path::new("/srv/a")), "stable");
        assert_eq!(
            a,
            range.for_workdir(Path::new("/srv/a/")),
            "one path, one uid"
        );
        let b = range.for_workdir(Path::new("/srv/b"));
        assert_ne!(a.uid, b.uid);
        for id in [a, b] {
            assert!(id.uid > range.first && id.uid < range.first + range.count);
            assert_eq!(id.gid, id.uid);
            assert_eq!(id.group, range.first);
        }
        assert!(
            UidRange {
                first: 0,
                count: 10
            }
            .validate()
            .is_err()
        );
        assert!(
            UidRange {
                first: 5000,
                count: 1
            }
            .validate()
            .is_err()
        );
        assert!(
            UidRange {
                first: u32::MAX - 5,
                count: 10
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn a_grant_adds_a_named_entry_and_keeps_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        match grant(dir.path(), Grantee::User(2_000_000_123), 7) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                eprintln!("no POSIX ACLs on this file system: skipped");
                return;
            }
            Err(e) => panic!("grant: {e}"),
        }
        grant(dir.path(), Grantee::Group(2_000_000_000), 1).expect("second grant");
        let file = std::fs::File::open(dir.path()).expect("open");
        let entries = read_acl(std::os::fd::AsRawFd::as_raw_fd(&file))
            .expect("read")
            .expect("an ACL");
        assert!(entries.contains(&(USER, 7, 2_000_000_123)), "{entries:?}");
        assert!(entries.contains(&(GROUP, 1, 2_000_000_000)), "{entries:?}");
        assert!(entries.contains(&(USER_OBJ, 7, UNDEFINED)), "{entries:?}");
        assert!(entries.contains(&(OTHER, 0, UNDEFINED)), "{entries:?}");
        assert!(entries.contains(&(MASK, 7, UNDEFINED)), "{entries:?}");

        // A tree: directories and files, not links, not the skipped name.
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("sub/deeper")).expect("dirs");
        std::fs::create_dir_all(tree.join(".murmur")).expect("skipped");
        std::fs::write(tree.join("sub/deeper/file.txt"), "x").expect("file");
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "x").expect("outside");
        std::os::unix::fs::symlink(&outside, tree.join("link")).expect("link");
        let uid = 2_000_000_124;
        let n = grant_tree(&tree, uid, (7, 6), &[".murmur"], 1000).expect("tree");
        assert_eq!(n, 4, "tree, sub, deeper, file.txt");
        let has = |p: &Path| {
            let f = std::fs::File::open(p).expect("open");
            read_acl(std::os::fd::AsRawFd::as_raw_fd(&f))
                .expect("read")
                .is_some_and(|e| e.iter().any(|(t, _, i)| *t == USER && *i == uid))
        };
        assert!(has(&tree.join("sub/deeper/file.txt")));
        assert!(
            !has(&tree.join(".murmur")),
            "roostd's bookkeeping is skipped"
        );
        assert!(!has(&outside), "a link is not followed");
    }

    #[test]
    fn a_revoke_takes_back_what_a_grant_added_and_only_that() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("dir");
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("sub")).expect("dirs");
        let file = tree.join("sub/secret.txt");
        std::fs::write(&file, "x").expect("file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let (tool, other) = (2_000_000_125, 2_000_000_126);
        match grant_tree(&tree, tool, (7, 6), &[], 1000) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                eprintln!("no POSIX ACLs on this file system: skipped");
                return;
            }
            Err(e) => panic!("grant: {e}"),
        }
        grant(&file, Grantee::User(other), 4).expect("another's grant");
        // The control: the grant is there.
        assert!(has_user_entry(&file, tool).expect("read"));
        assert_eq!(revoke_tree(&tree, tool, &[], 1000).expect("revoke"), 3);
        assert!(!has_user_entry(&file, tool).expect("read"), "taken back");
        assert!(!has_user_entry(&tree.join("sub"), tool).expect("read"));
        assert!(
            has_user_entry(&file, other).expect("read"),
            "another's stays"
        );
        revoke(&file, Grantee::User(other)).expect("revoke the other");
        assert!(!has_user_entry(&file, other).expect("read"));
        assert_eq!(
            std::fs::metadata(&file).expect("meta").mode() & 0o777,
            0o640,
            "the mode is what it was"
        );
        revoke(&file, Grantee::User(other)).expect("nothing to take back is fine");
    }
}
