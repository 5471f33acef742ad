//! Files holding secrets (bearer tokens, export headers): readable by
//! roostd and at most its own group, never by other users.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The file's text when no other user can read or change it: no access for
/// others, no write for the group, and group read only when the file's
/// group is roostd's own (`root:roost 0640` under the shipped unit). The
/// error says what to fix.
pub fn read_private(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let mode = meta.mode() & 0o777;
    // SAFETY: getegid has no preconditions and cannot fail.
    let own_group = meta.gid() == unsafe { libc::getegid() };
    if mode & 0o037 != 0 || (mode & 0o040 != 0 && !own_group) {
        return Err(format!(
            "mode {mode:o} lets other users read or change it; chmod 600 it (or 640 with \
             roostd's own group as the file's group)"
        ));
    }
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}
