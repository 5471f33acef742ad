//! Paths a manifest names (`component`, a skill's `source`,
//! `inference.system_prompt_file`, and any field that names a file in the
//! future): the one resolver. A path resolves inside the capsule directory
//! only — relative, plain names (no `..`, no root) — and is opened from that
//! directory one component at a time without following a link (`fsx`), so
//! neither a path nor a symlink the capsule ships reaches a file outside it.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Why a path a manifest names was refused; worded to follow the field's
/// name (`` `component` names … ``).
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("must not be empty")]
    Empty,
    #[error(
        "names '{0}', which leaves the capsule directory: paths in a manifest are relative to \
         it and stay inside it (no absolute path, no `..`)"
    )]
    Leaves(String),
    #[error("names the capsule directory itself, not a file")]
    CapsuleDir,
    #[error(
        "names {}, which does not exist (paths are relative to the manifest's directory)",
        .0.display()
    )]
    Missing(PathBuf),
    #[error(
        "names {}, which cannot be read from inside the capsule directory: {source} (a \
         manifest's files must be regular files in it, not symlinks)",
        path.display()
    )]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `rel` (what a field says) as a path inside `dir`, or why not, worded to
/// follow the field's name. Only the spelling is judged here; [`open`],
/// [`read`] and [`list`] refuse links.
pub fn inside(dir: &Path, rel: &str) -> Result<PathBuf, PathError> {
    if rel.trim().is_empty() {
        return Err(PathError::Empty);
    }
    let mut path = dir.to_path_buf();
    for part in Path::new(rel).components() {
        match part {
            Component::Normal(name) => path.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(PathError::Leaves(rel.to_string()));
            }
        }
    }
    if path == dir {
        return Err(PathError::CapsuleDir);
    }
    Ok(path)
}

/// Every file roostd reads of a capsule's directory for it: `murmur.yaml`,
/// the component, local skills' sources, the system prompt file, and
/// `murmur.lock` when it has artifacts (what `roostctl policy` shows).
pub fn read_by_roostd(m: &super::CapsuleManifest) -> Vec<PathBuf> {
    let mut files = vec![m.manifest_path.clone()];
    match &m.kind {
        super::CapsuleKind::Script { component, .. } => files.push(component.clone()),
        super::CapsuleKind::Agent(spec) => {
            if let super::SystemPrompt::File(path) = &spec.system_prompt {
                files.push(path.clone());
            }
        }
    }
    for a in &m.artifacts {
        if let Some(source) = &a.source {
            files.push(m.manifest_dir.join(source));
        }
    }
    if !m.artifacts.is_empty() {
        files.push(m.manifest_dir.join(roost_wire::artifact::LOCK_FILENAME));
    }
    files
}

/// Opens the regular file `path` (from [`inside`]) for reading, refusing a
/// symlink anywhere below `dir`.
pub fn open(dir: &Path, path: &Path) -> Result<std::fs::File, PathError> {
    crate::fsx::open_read(dir, path).map_err(|e| refused(path, e))
}

/// Reads the file `path` (from [`inside`]) whole, as [`open`] opens it.
pub fn read(dir: &Path, path: &Path) -> Result<Vec<u8>, PathError> {
    crate::fsx::read(dir, path).map_err(|e| refused(path, e))
}

/// The names in the directory `path` (from [`inside`]), opened as [`open`]
/// opens a file; `None` when `path` is not a directory.
pub fn list(dir: &Path, path: &Path) -> Result<Option<Vec<OsString>>, PathError> {
    crate::fsx::list_dir(dir, path).map_err(|e| refused(path, e))
}

fn refused(path: &Path, source: std::io::Error) -> PathError {
    match source.kind() {
        std::io::ErrorKind::NotFound => PathError::Missing(path.to_path_buf()),
        _ => PathError::Unreadable {
            path: path.to_path_buf(),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_stays_inside_the_capsule_directory_and_follows_no_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir(root.join("skills")).expect("mkdir");
        std::fs::write(root.join("skills/guide.md"), "guide").expect("write");
        let outside = tempfile::NamedTempFile::new().expect("outside");
        std::fs::write(outside.path(), "secret").expect("write");
        std::os::unix::fs::symlink(outside.path(), root.join("link.md")).expect("link");
        std::os::unix::fs::symlink(root.join("skills"), root.join("dirlink")).expect("link");

        // The control: a plain file inside reads.
        let ok = inside(root, "./skills/guide.md").expect("inside");
        assert_eq!(read(root, &ok).expect("reads"), b"guide");
        // Spelled to leave: refused before anything is opened.
        for rel in ["/etc/passwd", "../x", "skills/../../x", "", "."] {
            let e = inside(root, rel).expect_err(rel);
            assert!(
                matches!(
                    e,
                    PathError::Empty | PathError::Leaves(_) | PathError::CapsuleDir
                ),
                "{e}"
            );
        }
        // A link, to a file or on the way: refused when opened.
        let link = inside(root, "link.md").expect("spelled inside");
        let e = read(root, &link).expect_err("a symlink");
        assert!(matches!(e, PathError::Unreadable { .. }), "{e}");
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(
            std::fs::read(&link).is_ok(),
            "the control: following the link would have read the file"
        );
        let via = inside(root, "dirlink/guide.md").expect("spelled inside");
        assert!(read(root, &via).is_err());
        assert!(list(root, &inside(root, "dirlink").expect("in")).is_err());
        let names = list(root, &root.join("skills")).expect("lists");
        assert_eq!(names, Some(vec![OsString::from("guide.md")]));
        assert_eq!(list(root, &ok).expect("a file"), None);
    }
}
