//! File operations in trees a tool can write (a session's workdir and its
//! bookkeeping dir inside it): every path is walked from a trusted root one
//! component at a time with `O_NOFOLLOW`, so a symlink a tool planted anywhere
//! below the root is refused instead of followed; files are appended to only
//! when they are regular files with a single link (no hard link to a file
//! outside); replacements go through an exclusive temp file with an
//! unpredictable name, renamed over the target within the same directory.
//!
//! The root itself (the workdir the operator named, or one under the state
//! dir) is opened without following a link anywhere on its path: a capsule
//! that may write its parent (a workdir inside a writable grant) cannot
//! swap a link in.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use roost_jail::dirfd::entries;

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::other("a path holds a NUL byte"))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("refusing {}: {why}", path.display()),
    )
}

/// The components of `path` below `root` (plain names only).
fn below<'a>(root: &Path, path: &'a Path) -> io::Result<Vec<&'a OsStr>> {
    let rel = path
        .strip_prefix(root)
        .map_err(|_| refused(path, "it is not under the session's workdir"))?;
    rel.components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(refused(path, "it is not a plain path")),
        })
        .collect()
}

/// The root, opened without following a link anywhere on its path: a
/// workdir inside a directory a capsule may write (its own grant, another
/// session's) could have been replaced by a link since roostd named it.
fn open_root(root: &Path) -> io::Result<OwnedFd> {
    roost_jail::dirfd::open_no_links(root, libc::O_DIRECTORY | libc::O_RDONLY).map(OwnedFd::from)
}

fn open_at(dir: &impl AsRawFd, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let name = cstr(name)?;
    // SAFETY: `dir` is an open directory, `name` NUL-terminated.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    })?;
    // SAFETY: as in `open_root`.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens (creating when `create`) each directory of `names` below `root`,
/// refusing symlinks; returns the last one.
fn walk(root: &Path, names: &[&OsStr], create: bool, whole: &Path) -> io::Result<OwnedFd> {
    let mut dir = open_root(root)?;
    for name in names {
        let flags = libc::O_DIRECTORY | libc::O_RDONLY;
        dir = match open_at(&dir, name, flags, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                let c = cstr(name)?;
                // SAFETY: `dir` is open, `c` NUL-terminated. EEXIST from a
                // racing creator is fine: the open below decides.
                let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) };
                if rc < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
                let made = open_at(&dir, name, flags, 0).map_err(|e| link_error(e, whole))?;
                // Readable by the capsule's tools whatever roostd's umask.
                // SAFETY: `made` is an open directory.
                unsafe { libc::fchmod(made.as_raw_fd(), 0o755) };
                made
            }
            Err(e) => return Err(link_error(e, whole)),
        };
    }
    Ok(dir)
}

/// `O_NOFOLLOW` on a symlink answers ELOOP (or ENOTDIR with O_DIRECTORY).
fn link_error(e: io::Error, path: &Path) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
            refused(path, "a symlink (or non-directory) is in the way")
        }
        // A FIFO opened for writing without a reader (O_NONBLOCK).
        Some(libc::ENXIO) => refused(path, "it is not a regular file"),
        _ => e,
    }
}

/// The directory holding `path` (created as needed) and the file's name.
fn parent(root: &Path, path: &Path, create: bool) -> io::Result<(OwnedFd, CString)> {
    let names = below(root, path)?;
    let (name, dirs) = names
        .split_last()
        .ok_or_else(|| refused(path, "it names no file"))?;
    Ok((walk(root, dirs, create, path)?, cstr(name)?))
}

fn open_file(
    dir: &OwnedFd,
    name: &CString,
    flags: libc::c_int,
    mode: u32,
    path: &Path,
) -> io::Result<File> {
    // SAFETY: `dir` is open, `name` NUL-terminated.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            // Non-blocking: a FIFO planted in a file's place must not hang
            // roostd in open(2); regular files ignore the flag.
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
            mode,
        )
    };
    let fd = check(fd).map_err(|e| link_error(e, path))?;
    // SAFETY: just opened, owned by the File.
    let file = unsafe { File::from_raw_fd(fd) };
    if !file.metadata()?.file_type().is_file() {
        return Err(refused(path, "it is not a regular file"));
    }
    Ok(file)
}

/// A file with one link (`open_file` made sure it is a regular one): not a
/// hard link to a file elsewhere.
fn single_link(file: &File, path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if file.metadata()?.nlink() != 1 {
        return Err(refused(path, "it has more than one hard link"));
    }
    Ok(())
}

/// Creates the directories of `dir` below `root`, refusing symlinks.
pub fn create_dir_all(root: &Path, dir: &Path) -> io::Result<()> {
    walk(root, &below(root, dir)?, true, dir).map(drop)
}

/// Creates the directories of `dir` below `root` and, when `owner` is given,
/// makes `dir` itself theirs (through its descriptor: no link is followed).
pub fn create_dir_owned(root: &Path, dir: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    let fd = walk(root, &below(root, dir)?, true, dir)?;
    if let Some((uid, gid)) = owner {
        // SAFETY: `fd` is an open directory.
        check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })?;
    }
    Ok(())
}

/// Opens `path` for appending (created 0644 when missing).
pub fn append(root: &Path, path: &Path) -> io::Result<File> {
    let (dir, name) = parent(root, path, true)?;
    let file = open_file(
        &dir,
        &name,
        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT,
        0o644,
        path,
    )?;
    single_link(&file, path)?;
    Ok(file)
}

/// Creates `path`, which must not exist yet (not even as a dangling symlink).
pub fn create_new(root: &Path, path: &Path, mode: u32) -> io::Result<File> {
    let (dir, name) = parent(root, path, true)?;
    open_file(
        &dir,
        &name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        mode,
        path,
    )
}

/// Writes `bytes` to `path` unless something (file or link) is there already;
/// `Ok(false)` when it was.
pub fn write_if_absent(root: &Path, path: &Path, bytes: &[u8], mode: u32) -> io::Result<bool> {
    match create_new(root, path, mode) {
        Ok(mut file) => file.write_all(bytes).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `bytes` (mode `mode`): an exclusive temp file with an
/// unpredictable name beside it, renamed over it. A symlink at `path` is
/// replaced, never followed.
pub fn replace(root: &Path, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (dir, name) = parent(root, path, true)?;
    let tmp = cstr(OsStr::new(&format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        uuid::Uuid::now_v7().simple()
    )))?;
    let written = (|| {
        let mut file = open_file(
            &dir,
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            mode,
            path,
        )?;
        file.write_all(bytes)?;
        // The umask may have narrowed the mode.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        file.sync_data()?;
        // SAFETY: both names are NUL-terminated and relative to the open `dir`.
        check(unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
            )
        })
        .map(drop)
    })();
    if written.is_err() {
        // SAFETY: as above; a leftover temp file is only untidy.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    }
    written
}

/// Reads `path` whole, refusing symlinks (an operator reading a session's log
/// must not be handed a file a tool linked there). `NotFound` when missing.
pub fn read(root: &Path, path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_read(root, path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Opens `path` for reading, refusing symlinks.
pub fn open_read(root: &Path, path: &Path) -> io::Result<File> {
    let (dir, name) = parent(root, path, false)?;
    open_file(&dir, &name, libc::O_RDONLY, 0, path)
}

/// The names in the directory `path`, refusing symlinks on the way and at
/// `path` itself; `None` when `path` is a regular file.
pub fn list_dir(root: &Path, path: &Path) -> io::Result<Option<Vec<std::ffi::OsString>>> {
    let (dir, name) = parent(root, path, false)?;
    // Non-blocking: a FIFO in its place must not hang roostd.
    let flags = libc::O_RDONLY | libc::O_NONBLOCK;
    let fd = open_at(&dir, OsStr::from_bytes(name.as_bytes()), flags, 0)
        .map_err(|e| link_error(e, path))?;
    let file = File::from(fd);
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(None);
    }
    if !kind.is_dir() {
        return Err(refused(
            path,
            "it is neither a directory nor a regular file",
        ));
    }
    let mut names = Vec::new();
    for entry in entries(&file)? {
        names.push(entry?.file_name());
    }
    names.sort();
    Ok(Some(names))
}

/// Removes the file `path` (not following a link on the way; a link at
/// `path` itself is what is removed). Missing is not an error.
pub fn remove_file(root: &Path, path: &Path) -> io::Result<()> {
    let (dir, name) = match parent(root, path, false) {
        Ok(found) => found,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    // SAFETY: `name` is NUL-terminated, relative to the open `dir`.
    match check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other.map(drop),
    }
}

/// Removes `path` and, if it is a directory, everything in it, walking only
/// through open directories (a link anywhere is removed, never followed).
/// Missing is not an error.
pub fn remove_tree(root: &Path, path: &Path) -> io::Result<()> {
    let (dir, name) = match parent(root, path, false) {
        Ok(found) => found,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    match remove_at(&dir, &name, 0) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn remove_at(dir: &OwnedFd, name: &CString, depth: usize) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated, relative to the open `dir`; unlinkat
    // never follows a link (it removes the link itself).
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EISDIR) | Some(libc::EPERM)) || depth > 64 {
        return Err(e);
    }
    let sub = open_at(
        dir,
        OsStr::from_bytes(name.as_bytes()),
        libc::O_DIRECTORY | libc::O_RDONLY,
        0,
    )?;
    for entry in entries(&sub)? {
        remove_at(&sub, &cstr(&entry?.file_name())?, depth + 1)?;
    }
    // SAFETY: as above, for the now empty directory.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) }).map(drop)
}

/// Removes the oldest regular files (by modification time) of the
/// directory `dir` until the rest take at most `max_bytes`; the newest file
/// is always kept. Nothing is followed; entries that are not regular files
/// are left alone. Returns how many files were removed; a missing `dir` is
/// not an error.
pub fn trim_dir(root: &Path, dir: &Path, max_bytes: u64) -> io::Result<usize> {
    let names = below(root, dir)?;
    let fd = match walk(root, &names, false, dir) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries(&fd)? {
        let name = cstr(&entry?.file_name())?;
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open, `name` NUL-terminated, `st` writable.
        let rc = unsafe {
            libc::fstatat(
                fd.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG {
            files.push((
                (st.st_mtime, st.st_mtime_nsec),
                st.st_size.max(0) as u64,
                name,
            ));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    let mut removed = 0;
    let keep_newest = files.len().saturating_sub(1);
    for (_, size, name) in files.iter().take(keep_newest) {
        if total <= max_bytes {
            break;
        }
        // SAFETY: as above; unlinkat removes the entry itself.
        match check(unsafe { libc::unlinkat(fd.as_raw_fd(), name.as_ptr(), 0) }) {
            Ok(_) => {
                total -= size;
                removed += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => total -= size,
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Renames `from` to `to`, both below `root` and in the same directory tree;
/// the names themselves are never followed.
pub fn rename(root: &Path, from: &Path, to: &Path) -> io::Result<()> {
    let (from_dir, from_name) = parent(root, from, false)?;
    let (to_dir, to_name) = parent(root, to, true)?;
    // SAFETY: names NUL-terminated, relative to open directories.
    check(unsafe {
        libc::renameat(
            from_dir.as_raw_fd(),
            from_name.as_ptr(),
            to_dir.as_raw_fd(),
            to_name.as_ptr(),
        )
    })
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_removes_the_oldest_files_keeps_the_newest_and_follows_nothing() {
        let root = tempfile::tempdir().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        let r = root.path();
        let dir = r.join("tool-output");
        std::fs::create_dir_all(&dir).expect("dir");
        let victim = outside.path().join("victim.txt");
        std::fs::write(&victim, vec![b'v'; 1000]).expect("victim");
        std::os::unix::fs::symlink(&victim, dir.join("0-link.txt")).expect("link");
        let epoch = std::time::SystemTime::UNIX_EPOCH;
        for (i, name) in ["a.txt", "b.txt", "c.txt"].iter().enumerate() {
            let file = std::fs::File::create(dir.join(name)).expect("file");
            file.set_len(400).expect("size");
            file.set_modified(epoch + std::time::Duration::from_secs(1000 + i as u64))
                .expect("mtime");
        }
        // 1200 bytes in three files; 500 allowed: the two oldest go.
        assert_eq!(trim_dir(r, &dir, 500).expect("trim"), 2);
        assert!(!dir.join("a.txt").exists() && !dir.join("b.txt").exists());
        assert!(dir.join("c.txt").exists(), "the newest stays");
        // The link is neither followed nor counted.
        assert!(dir.join("0-link.txt").symlink_metadata().is_ok());
        assert_eq!(std::fs::read(&victim).expect("victim").len(), 1000);
        // The newest is kept even when it alone is over the bound.
        assert_eq!(trim_dir(r, &dir, 10).expect("trim"), 0);
        assert!(dir.join("c.txt").exists());
        // A directory swapped for a link is refused, not trimmed.
        std::fs::remove_dir_all(&dir).expect("rm");
        std::os::unix::fs::symlink(outside.path(), &dir).expect("dir link");
        assert!(trim_dir(r, &dir, 0).is_err());
        assert!(victim.exists());
        // The control: outside the jail of `fsx`, the same trim through the
        // link would have reached the victim.
        assert!(dir.join("victim.txt").exists());
        // Missing is fine.
        assert_eq!(trim_dir(r, &r.join("none"), 0).expect("missing"), 0);
    }

    #[test]
    fn symlinks_below_the_root_are_refused_and_hard_links_not_appended_to() {
        let root = tempfile::tempdir().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        let target = outside.path().join("victim.txt");
        std::fs::write(&target, "precious\n").expect("victim");
        let r = root.path();

        // A planted file link.
        std::fs::create_dir_all(r.join("logs")).expect("logs");
        std::os::unix::fs::symlink(&target, r.join("logs/guest.log")).expect("link");
        let err = append(r, &r.join("logs/guest.log")).expect_err("followed a symlink");
        assert!(err.to_string().contains("symlink"), "{err}");
        // A planted directory link.
        std::os::unix::fs::symlink(outside.path(), r.join("tool-output")).expect("dir link");
        let err = create_new(r, &r.join("tool-output/x.txt"), 0o644).expect_err("dir link");
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(!outside.path().join("x.txt").exists());
        // A dangling link is "already there", not a way to create the target.
        let dangling = outside.path().join("made.txt");
        std::os::unix::fs::symlink(&dangling, r.join("murmur.yaml")).expect("dangling");
        assert!(!write_if_absent(r, &r.join("murmur.yaml"), b"x", 0o644).expect("absent"));
        assert!(!dangling.exists());
        // Replacing swaps the link out instead of writing through it.
        std::os::unix::fs::symlink(&target, r.join("murmur.lock")).expect("lock link");
        replace(r, &r.join("murmur.lock"), b"new", 0o644).expect("replace");
        assert_eq!(std::fs::read(r.join("murmur.lock")).expect("lock"), b"new");
        assert!(!r.join("murmur.lock").is_symlink());
        // A hard link to an outside file.
        std::fs::hard_link(&target, r.join("logs/bootstrap.log")).expect("hard link");
        let err = append(r, &r.join("logs/bootstrap.log")).expect_err("hard link");
        assert!(err.to_string().contains("hard link"), "{err}");
        // Reads refuse links too.
        assert!(read(r, &r.join("logs/guest.log")).is_err());
        assert_eq!(
            std::fs::read_to_string(&target).expect("victim"),
            "precious\n",
            "nothing was written outside"
        );

        // A FIFO in a log's place is refused at once, not waited on.
        let fifo = r.join("logs/fifo.log");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("cstr");
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let err = append(r, &fifo).expect_err("a FIFO");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        assert!(read(r, &fifo).is_err());

        // Plain files work.
        let mut log = append(r, &r.join("a/b/c.log")).expect("append");
        log.write_all(b"one\n").expect("write");
        drop(log);
        let mut log = append(r, &r.join("a/b/c.log")).expect("append again");
        log.write_all(b"two\n").expect("write");
        assert_eq!(read(r, &r.join("a/b/c.log")).expect("read"), b"one\ntwo\n");
        rename(r, &r.join("a/b/c.log"), &r.join("a/b/c.log.1")).expect("rename");
        assert!(r.join("a/b/c.log.1").is_file());

        // Removing a tree removes links in it, never what they point at, and
        // refuses a link on the way to it.
        std::fs::create_dir_all(outside.path().join("keep")).expect("keep");
        std::fs::write(outside.path().join("keep/file"), "x").expect("file");
        std::os::unix::fs::symlink(outside.path().join("keep"), r.join("a/b/link")).expect("ln");
        remove_tree(r, &r.join("a")).expect("remove tree");
        assert!(!r.join("a").exists());
        assert!(
            outside.path().join("keep/file").is_file(),
            "a link was followed"
        );
        std::os::unix::fs::symlink(outside.path(), r.join("tools")).expect("ln");
        let err = remove_tree(r, &r.join("tools/keep")).expect_err("a link on the way");
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(outside.path().join("keep/file").is_file());
        remove_tree(r, &r.join("gone/never")).expect("missing is fine");
        assert!(below(r, Path::new("/elsewhere/x")).is_err());
        assert!(below(r, &r.join("../x")).is_err());
    }
}
