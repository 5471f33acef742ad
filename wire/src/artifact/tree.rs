//! A capsule directory as one zip, for `roostctl start` to upload when
//! roostd cannot read the directory itself (under systemd it cannot see
//! `/home` or another user's files): every regular file below it, in name
//! order (so the same directory packs to the same bytes), `.git/` left
//! out. A symlink to a file is refused (roostd follows no link a capsule
//! ships, and an upload must not turn one into a file read with the
//! operator's rights); a link to a directory is left out. roostd reads it back with the checks every bundle gets
//! ([`super::bundle::entries`]).

use std::path::Path;

use super::bundle::{BundleError, write_zip};

/// The manifest every uploaded capsule has at its root.
pub const CAPSULE_MANIFEST: &str = "murmur.yaml";

/// Packs `dir` (which must hold `murmur.yaml`); refused past `max_bytes`
/// of zip, with the size in the message.
pub fn pack_tree(dir: &Path, max_bytes: u64) -> Result<Vec<u8>, BundleError> {
    let label = dir.display().to_string();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BundleError::Io { path, source }
    };
    let manifest = dir.join(CAPSULE_MANIFEST);
    if manifest.is_symlink() {
        return Err(BundleError::Unsafe {
            artifact: label,
            entry: CAPSULE_MANIFEST.into(),
            reason: "is a symlink: a capsule's files must be regular files inside it",
        });
    }
    if !manifest.is_file() {
        return Err(BundleError::MissingManifest { artifact: label });
    }
    let mut files: Vec<(String, Vec<u8>, u32)> = Vec::new();
    let mut total = 0u64;
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let here = if rel.is_empty() {
            dir.to_path_buf()
        } else {
            dir.join(&rel)
        };
        for entry in std::fs::read_dir(&here).map_err(io(&here))? {
            let entry = entry.map_err(io(&here))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                return Err(BundleError::Unsafe {
                    artifact: label,
                    entry: entry.file_name().to_string_lossy().into_owned(),
                    reason: "has a name that is not UTF-8",
                });
            };
            let path = entry.path();
            let rel_name = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            // A link to a directory is left out (it could loop, or lead
            // anywhere); a link to a file is refused: roostd would not
            // follow it, and read here it would be the operator's file.
            let linked = entry.file_type().map_err(io(&path))?.is_symlink();
            let meta = std::fs::metadata(&path).map_err(io(&path))?;
            if meta.is_dir() {
                if !linked && name != ".git" {
                    stack.push(rel_name);
                }
                continue;
            }
            if linked && meta.is_file() {
                return Err(BundleError::Unsafe {
                    artifact: label,
                    entry: rel_name,
                    reason: "is a symlink: a capsule's files must be regular files inside it",
                });
            }
            if !meta.is_file() {
                continue;
            }
            total += meta.len();
            if total > max_bytes.saturating_mul(4) {
                return Err(BundleError::TooLarge {
                    artifact: label,
                    size: total,
                    max: max_bytes,
                });
            }
            let content = std::fs::read(&path).map_err(io(&path))?;
            let mode = if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0
            {
                0o755
            } else {
                0o644
            };
            files.push((rel_name, content, mode));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let entries: Vec<(&str, &[u8], u32)> = files
        .iter()
        .map(|(name, content, mode)| (name.as_str(), content.as_slice(), *mode))
        .collect();
    let zip = write_zip(&entries).map_err(io(dir))?;
    if zip.len() as u64 > max_bytes {
        return Err(BundleError::TooLarge {
            artifact: label,
            size: zip.len() as u64,
            max: max_bytes,
        });
    }
    Ok(zip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capsule_directory_packs_to_the_same_checked_files_without_git() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::write(root.join(CAPSULE_MANIFEST), "name: x\n").expect("manifest");
        std::fs::create_dir_all(root.join("skills/notes")).expect("dirs");
        std::fs::write(root.join("skills/notes/skill.md"), "notes").expect("skill");
        std::fs::create_dir_all(root.join(".git")).expect("git");
        std::fs::write(root.join(".git/HEAD"), "ref").expect("head");
        std::os::unix::fs::symlink("/", root.join("everything")).expect("dir link");
        let first = pack_tree(root, 1 << 20).expect("pack");
        assert_eq!(
            first,
            pack_tree(root, 1 << 20).expect("again"),
            "deterministic"
        );
        let files = crate::artifact::bundle::entries(&first, "x", 1 << 20).expect("checked");
        let names: Vec<&str> = files.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["murmur.yaml", "skills/notes/skill.md"]);
        // A link to a file (here, to one outside) is refused, not read.
        let outside = tempfile::NamedTempFile::new().expect("outside");
        std::os::unix::fs::symlink(outside.path(), root.join("notes.md")).expect("file link");
        let err = pack_tree(root, 1 << 20)
            .expect_err("a file link")
            .to_string();
        assert!(err.contains("notes.md") && err.contains("symlink"), "{err}");
        std::fs::remove_file(root.join("notes.md")).expect("rm link");
        let err = pack_tree(root, 8).expect_err("too large").to_string();
        assert!(err.contains("over the limit"), "{err}");
        std::fs::remove_file(root.join(CAPSULE_MANIFEST)).expect("rm");
        assert!(matches!(
            pack_tree(root, 1 << 20),
            Err(BundleError::MissingManifest { .. })
        ));
    }
}
