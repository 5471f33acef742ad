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
