//! Capsules uploaded over the control socket (`roostctl start` of a
//! directory roostd cannot read): each a zip checked as every bundle is
//! (`roost_wire::artifact::bundle::entries`), unpacked once into
//! `<state_dir>/uploads/<sha256>/` (roostd's own, 0700) and started from
//! there. The same bytes again reuse the directory.

use std::path::{Path, PathBuf};

use roost_wire::artifact::tree::CAPSULE_MANIFEST;

/// Why an upload was refused.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(transparent)]
    Bundle(#[from] roost_wire::artifact::BundleError),
    #[error("the uploaded capsule has no {CAPSULE_MANIFEST} at its root")]
    NoManifest,
    #[error("cannot store the uploaded capsule in {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What was stored.
#[derive(Debug)]
pub struct Stored {
    /// The capsule's `murmur.yaml` in its upload directory.
    pub manifest: PathBuf,
    pub sha256: String,
    pub files: u64,
    pub bytes: u64,
}

/// The directory under the state dir uploads are unpacked in.
pub const DIR: &str = "uploads";

/// Checks and unpacks `zip` under `<state_dir>/uploads/` (blocking I/O).
pub fn store(state_dir: &Path, zip: &[u8], max_bytes: u64) -> Result<Stored, UploadError> {
    let files = roost_wire::artifact::bundle::entries(zip, "the uploaded capsule", max_bytes)?;
    if !files.iter().any(|f| f.name == CAPSULE_MANIFEST) {
        return Err(UploadError::NoManifest);
    }
    let sha256 = roost_wire::artifact::sha256_hex(zip);
    let uploads = state_dir.join(DIR);
    let dest = uploads.join(&sha256);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| UploadError::Io { path, source }
    };
    let stored = Stored {
        manifest: dest.join(CAPSULE_MANIFEST),
        sha256: sha256.clone(),
        files: files.len() as u64,
        bytes: files.iter().map(|f| f.content.len() as u64).sum(),
    };
    if dest.join(CAPSULE_MANIFEST).is_file() {
        return Ok(stored);
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&uploads)
            .map_err(io(&uploads))?;
    }
    // Unpacked beside its place, then renamed into it whole.
    let staging = uploads.join(format!(".{sha256}.{}", uuid::Uuid::now_v7().simple()));
    let unpacked = (|| {
        for file in &files {
            // Names are plain relative paths (checked by `entries`).
            let path = staging.join(&file.name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, &file.content).map_err(io(&path))?;
            let mode = if file.mode & 0o111 != 0 { 0o755 } else { 0o644 };
            std::fs::set_permissions(
                &path,
                <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(mode),
            )
            .map_err(io(&path))?;
        }
        match std::fs::rename(&staging, &dest) {
            Ok(()) => Ok(()),
            // Another upload of the same bytes got there first.
            Err(_) if dest.join(CAPSULE_MANIFEST).is_file() => {
                let _ = std::fs::remove_dir_all(&staging);
                Ok(())
            }
            Err(e) => Err(UploadError::Io {
                path: dest.clone(),
                source: e,
            }),
        }
    })();
    if unpacked.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    unpacked.map(|()| stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_is_unpacked_once_and_refused_without_a_manifest_or_with_an_escape() {
        let state = tempfile::tempdir().expect("tempdir");
        let zip = roost_wire::artifact::bundle::write_zip(&[
            ("murmur.yaml", b"name: up\n", 0o644),
            ("bin/tool", b"#!/bin/sh\n", 0o755),
        ])
        .expect("zip");
        let first = store(state.path(), &zip, 1 << 20).expect("stored");
        assert_eq!(
            std::fs::read(&first.manifest).expect("manifest"),
            b"name: up\n"
        );
        let tool = first.manifest.with_file_name("bin").join("tool");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&tool).expect("tool").permissions(),
        );
        assert_eq!(mode & 0o777, 0o755);
        let again = store(state.path(), &zip, 1 << 20).expect("again");
        assert_eq!(again.manifest, first.manifest);
        let no_manifest =
            roost_wire::artifact::bundle::write_zip(&[("other.yaml", b"x", 0o644)]).expect("zip");
        assert!(matches!(
            store(state.path(), &no_manifest, 1 << 20),
            Err(UploadError::NoManifest)
        ));
        let escape = roost_wire::artifact::bundle::write_zip(&[
            ("murmur.yaml", b"x", 0o644),
            ("../escape", b"x", 0o644),
        ])
        .expect("zip");
        let err = store(state.path(), &escape, 1 << 20)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("escapes"), "{err}");
        assert!(!state.path().join("escape").exists());
    }
}
