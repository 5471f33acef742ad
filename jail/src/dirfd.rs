//! Walking an open directory without following links: a child opened with
//! `O_NOFOLLOW` relative to its directory's descriptor, and the directory's
//! own listing. roostd's `fsx` builds its workdir operations on these.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;

/// Opens `name` in the open directory `dir` without following a link, and
/// without blocking on a FIFO (for walks that hold directories open).
pub fn open_child(dir: &impl AsRawFd, name: &OsStr) -> io::Result<File> {
    let name =
        CString::new(name.as_bytes()).map_err(|_| io::Error::other("a path holds a NUL byte"))?;
    // SAFETY: `dir` is an open directory and `name` is NUL-terminated.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The entries of the open directory `dir` (its own listing: no path lookup
/// that could cross a link swapped in meanwhile).
pub fn entries(dir: &impl AsRawFd) -> io::Result<std::fs::ReadDir> {
    std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

/// Opens the absolute `path` (no `..`) without following a link anywhere on
/// it: `openat2` with `RESOLVE_NO_SYMLINKS`, or, where the kernel lacks it
/// (before 5.6, or a seccomp filter that refuses it), a walk from `/` one
/// component at a time with `O_NOFOLLOW`. A link on the way is `ELOOP`.
/// `flags` are `open(2)`'s (`O_PATH` for a handle only); `O_CLOEXEC` is
/// added.
pub fn open_no_links(path: &std::path::Path, flags: libc::c_int) -> io::Result<File> {
    use std::path::Component;
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an absolute path without '..'",
        ));
    }
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a path holds a NUL byte"))?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `name` is NUL-terminated and `how` is a valid `open_how` of
    // the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            name.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let file = if fd >= 0 {
        // SAFETY: `fd` was just opened and is owned by nobody else.
        unsafe { File::from_raw_fd(fd as libc::c_int) }
    } else {
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::ENOSYS | libc::EPERM) => walk_no_links(path, flags)?,
            _ => return Err(error),
        }
    };
    if file.metadata()?.file_type().is_symlink() {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(file)
}

/// `struct open_how` of `openat2(2)` (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// [`open_no_links`] without `openat2`: each directory on the way opened
/// relative to the one before with `O_NOFOLLOW`, the last with `flags`.
fn walk_no_links(path: &std::path::Path, flags: libc::c_int) -> io::Result<File> {
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let at = |dir: libc::c_int, name: &OsStr, flags: libc::c_int| -> io::Result<File> {
        let name = CString::new(name.as_bytes())
            .map_err(|_| io::Error::other("a path holds a NUL byte"))?;
        // SAFETY: `dir` is an open directory (or AT_FDCWD) and `name` is
        // NUL-terminated.
        let fd = unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let file = unsafe { File::from_raw_fd(fd) };
        if file.metadata()?.file_type().is_symlink() {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        Ok(file)
    };
    let Some((last, on_the_way)) = names.split_last() else {
        return at(libc::AT_FDCWD, OsStr::new("/"), flags);
    };
    let mut dir = at(
        libc::AT_FDCWD,
        OsStr::new("/"),
        libc::O_PATH | libc::O_DIRECTORY,
    )?;
    for name in on_the_way {
        dir = at(dir.as_raw_fd(), name, libc::O_PATH | libc::O_DIRECTORY).map_err(|e| {
            match e.raw_os_error() {
                // `O_NOFOLLOW | O_DIRECTORY` on a link says "not a directory".
                Some(libc::ENOTDIR) if std::fs::symlink_metadata(path).is_ok() => {
                    io::Error::from_raw_os_error(libc::ELOOP)
                }
                _ => e,
            }
        })?;
    }
    at(dir.as_raw_fd(), last, flags)
}

/// The path the kernel knows the open `file` by (its real path now).
pub fn real_path(file: &impl AsRawFd) -> io::Result<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ways_of_opening_refuse_a_link_anywhere_on_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("real");
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::write(root.join("a/b/f"), "x").expect("file");
        std::os::unix::fs::symlink("a", root.join("up")).expect("link");
        std::os::unix::fs::symlink("b/f", root.join("a/last")).expect("link");
        for open in [open_no_links, walk_no_links] {
            // The control: no link on the way.
            open(&root.join("a/b/f"), libc::O_RDONLY).expect("a plain path");
            open(&root.join("a/b"), libc::O_PATH | libc::O_DIRECTORY).expect("a directory");
            for (path, flags) in [
                (root.join("up/b/f"), libc::O_RDONLY),
                (root.join("a/last"), libc::O_RDONLY),
                (root.join("a/last"), libc::O_PATH),
            ] {
                let e = open(&path, flags).expect_err("a link");
                assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{path:?}: {e}");
            }
        }
        let relative = open_no_links(std::path::Path::new("a/b"), libc::O_PATH);
        assert!(relative.is_err(), "a relative path is refused");
    }
}
