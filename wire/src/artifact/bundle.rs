//! Artifact bundles: a zip holding `murmur.yaml` and one payload
//! (`component.wasm`, a native binary named after the artifact, or `skill.md`).
//! Reading checks everything before returning bytes; packing is deterministic so
//! republishing the same directory gives the same sha256.

use std::collections::HashSet;
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipArchive, ZipWriter};

use super::ARTIFACT_MANIFEST;
use super::manifest::{ArtifactManifest, PayloadKind};

/// Bundles larger than this are refused unless configured otherwise.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 64 << 20;

/// A bundle problem; `artifact` names the bundle (`name@version` or a path).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{artifact}: bundle is {size} bytes, over the limit of {max} bytes")]
    TooLarge {
        artifact: String,
        size: u64,
        max: u64,
    },
    #[error("{artifact}: not a readable zip bundle: {message}")]
    NotZip { artifact: String, message: String },
    #[error("{artifact}: entry `{entry}` {reason}; bundles may hold only plain relative files")]
    Unsafe {
        artifact: String,
        entry: String,
        reason: &'static str,
    },
    #[error("{artifact}: entry `{entry}` appears more than once")]
    Duplicate { artifact: String, entry: String },
    #[error("{artifact}: bundle has no {ARTIFACT_MANIFEST} at its root")]
    MissingManifest { artifact: String },
    #[error("{artifact}: invalid {ARTIFACT_MANIFEST}: {message}")]
    Manifest { artifact: String, message: String },
    #[error("{artifact}: bundle has no `{entry}`, the payload a {kind} artifact needs")]
    MissingPayload {
        artifact: String,
        entry: String,
        kind: String,
    },
    #[error("{artifact}: bundle's {ARTIFACT_MANIFEST} says {found}")]
    Mismatch { artifact: String, found: String },
    #[error("{artifact}: cannot read entry `{entry}`: {message}")]
    Entry {
        artifact: String,
        entry: String,
        message: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A checked bundle: its manifest (as parsed and as written) and payload.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub manifest: ArtifactManifest,
    pub manifest_yaml: String,
    pub payload: Vec<u8>,
}

/// One file of a checked zip: its plain relative name, bytes and unix mode.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub content: Vec<u8>,
    pub mode: u32,
}

/// The files of a zip, after the checks every bundle gets: at most
/// `max_bytes` of zip and four times that unpacked, plain relative names
/// (no `..`, no absolute paths, no backslashes), no symlinks, no name twice.
/// `artifact` labels errors.
pub fn entries(bytes: &[u8], artifact: &str, max_bytes: u64) -> Result<Vec<Entry>, BundleError> {
    let label = || artifact.to_string();
    let size = bytes.len() as u64;
    if size > max_bytes {
        return Err(BundleError::TooLarge {
            artifact: label(),
            size,
            max: max_bytes,
        });
    }
    let not_zip = |e: &dyn std::fmt::Display| BundleError::NotZip {
        artifact: label(),
        message: e.to_string(),
    };
    let mut archive = ZipArchive::new(Cursor::new(bytes)).map_err(|e| not_zip(&e))?;
    let mut budget = max_bytes.saturating_mul(4);
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(|e| not_zip(&e))?;
        let name = entry.name().map_err(|e| not_zip(&e))?.into_owned();
        if let Some(reason) = unsafe_entry_name(&name) {
            return Err(BundleError::Unsafe {
                artifact: label(),
                entry: name,
                reason,
            });
        }
        if entry.is_symlink() {
            return Err(BundleError::Unsafe {
                artifact: label(),
                entry: name,
                reason: "is a symlink",
            });
        }
        let key = name.trim_start_matches("./").to_string();
        if !seen.insert(key.clone()) {
            return Err(BundleError::Duplicate {
                artifact: label(),
                entry: name,
            });
        }
        if entry.is_dir() {
            continue;
        }
        let mode = entry.unix_mode().unwrap_or(0o644);
        let mut content = Vec::new();
        let read = (&mut entry)
            .take(budget.saturating_add(1))
            .read_to_end(&mut content)
            .map_err(|e| BundleError::Entry {
                artifact: label(),
                entry: name.clone(),
                message: e.to_string(),
            })? as u64;
        if read > budget {
            return Err(BundleError::TooLarge {
                artifact: label(),
                size: read,
                max: max_bytes.saturating_mul(4),
            });
        }
        budget -= read;
        files.push(Entry {
            name: key,
            content,
            mode,
        });
    }
    // The zip reader keeps only the last of entries sharing a name, so also
    // compare with the central directory's own count.
    if let Some(total) = central_directory_entries(bytes)
        && total as usize != archive.len()
    {
        return Err(BundleError::Duplicate {
            artifact: label(),
            entry: "(several entries share a name)".into(),
        });
    }
    Ok(files)
}

impl Bundle {
    /// Reads and checks a bundle ([`entries`]), then its manifest and
    /// payload. `artifact` labels errors; `max_bytes` bounds the zip (and
    /// four times that, the unpacked content).
    pub fn read(bytes: &[u8], artifact: &str, max_bytes: u64) -> Result<Self, BundleError> {
        let label = || artifact.to_string();
        let mut files = entries(bytes, artifact, max_bytes)?;
        let manifest_yaml = files
            .iter()
            .position(|e| e.name == ARTIFACT_MANIFEST)
            .map(|i| files.swap_remove(i).content)
            .ok_or_else(|| BundleError::MissingManifest { artifact: label() })?;
        let manifest_yaml =
            String::from_utf8(manifest_yaml).map_err(|_| BundleError::Manifest {
                artifact: label(),
                message: "not UTF-8".into(),
            })?;
        let manifest =
            ArtifactManifest::parse(&manifest_yaml).map_err(|message| BundleError::Manifest {
                artifact: label(),
                message,
            })?;
        let entry = manifest.payload_entry();
        let payload = files
            .into_iter()
            .find(|e| e.name == entry)
            .map(|e| e.content)
            .ok_or_else(|| BundleError::MissingPayload {
                artifact: label(),
                entry: entry.clone(),
                kind: kind_label(&manifest),
            })?;
        Ok(Self {
            manifest,
            manifest_yaml,
            payload,
        })
    }

    /// Checks that the bundle is the artifact that was asked for.
    pub fn expect(&self, artifact: &str, name: &str, version: &str) -> Result<(), BundleError> {
        if self.manifest.name != name || self.manifest.version != version {
            return Err(BundleError::Mismatch {
                artifact: artifact.to_string(),
                found: format!("{}@{}", self.manifest.name, self.manifest.version),
            });
        }
        Ok(())
    }
}

fn kind_label(manifest: &ArtifactManifest) -> String {
    match manifest.payload_kind() {
        PayloadKind::Component => format!("WASM {}", manifest.runtime),
        PayloadKind::Native => "native tool".into(),
        PayloadKind::Skill => "skill".into(),
    }
}

/// Why an entry name is not a plain relative path, if it is not.
fn unsafe_entry_name(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.contains('\0') {
        return Some("has an empty or NUL-containing name");
    }
    if name.starts_with('/') || name.starts_with('\\') || name.get(1..2) == Some(":") {
        return Some("is an absolute path");
    }
    if name.contains('\\') {
        return Some("uses backslashes");
    }
    if name.split('/').any(|part| part == "..") {
        return Some("escapes the bundle (`..`)");
    }
    None
}

/// Total entries the end-of-central-directory record declares (None for zip64).
fn central_directory_entries(bytes: &[u8]) -> Option<u16> {
    const EOCD: [u8; 4] = [0x50, 0x4b, 0x05, 0x06];
    let start = bytes.len().checked_sub(22)?;
    let floor = start.saturating_sub(u16::MAX as usize);
    let at = (floor..=start).rev().find(|&i| bytes[i..i + 4] == EOCD)?;
    let total = u16::from_le_bytes([bytes[at + 10], bytes[at + 11]]);
    (total != u16::MAX).then_some(total)
}

/// Packs an artifact directory (its `murmur.yaml` and payload) into bundle bytes.
/// Returns the manifest too, so the caller can name what it published.
pub fn pack(dir: &Path) -> Result<(ArtifactManifest, Vec<u8>), BundleError> {
    let label = dir.display().to_string();
    let io = |path: PathBuf| move |source| BundleError::Io { path, source };
    let manifest_path = dir.join(ARTIFACT_MANIFEST);
    let manifest_yaml =
        std::fs::read_to_string(&manifest_path).map_err(io(manifest_path.clone()))?;
    let manifest =
        ArtifactManifest::parse(&manifest_yaml).map_err(|message| BundleError::Manifest {
            artifact: label.clone(),
            message,
        })?;
    let entry = manifest.payload_entry();
    let payload_path = dir.join(&entry);
    let meta = std::fs::symlink_metadata(&payload_path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            BundleError::MissingPayload {
                artifact: label.clone(),
                entry: entry.clone(),
                kind: kind_label(&manifest),
            }
        } else {
            BundleError::Io {
                path: payload_path.clone(),
                source,
            }
        }
    })?;
    if !meta.is_file() {
        return Err(BundleError::Unsafe {
            artifact: label,
            entry,
            reason: "is not a regular file",
        });
    }
    let payload = std::fs::read(&payload_path).map_err(io(payload_path.clone()))?;
    let mode = if manifest.payload_kind() == PayloadKind::Native {
        0o755
    } else {
        0o644
    };
    let bytes = write_zip(&[
        (ARTIFACT_MANIFEST, manifest_yaml.as_bytes(), 0o644),
        (&entry, &payload, mode),
    ])
    .map_err(io(dir.to_path_buf()))?;
    Ok((manifest, bytes))
}

/// Writes a zip with fixed timestamps (so equal inputs give equal bytes).
pub fn write_zip(entries: &[(&str, &[u8], u32)]) -> std::io::Result<Vec<u8>> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, content, mode) in entries {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .last_modified_time(DateTime::default())
            .unix_permissions(*mode);
        zip.start_file(*name, options)?;
        zip.write_all(content)?;
    }
    Ok(zip.finish()?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOL: &str = "name: echo\nversion: 1.0.0\nruntime: tool\n";

    fn read(bytes: &[u8]) -> Result<Bundle, BundleError> {
        Bundle::read(bytes, "echo@1.0.0", DEFAULT_MAX_BUNDLE_BYTES)
    }

    #[test]
    fn pack_then_read_round_trips_and_is_deterministic() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("murmur.yaml"), TOOL).expect("write");
        std::fs::write(dir.path().join("component.wasm"), b"\0asm...").expect("write");
        let (manifest, first) = pack(dir.path()).expect("pack");
        let (_, second) = pack(dir.path()).expect("pack");
        assert_eq!(manifest.name, "echo");
        assert_eq!(first, second, "packing must be deterministic");
        let bundle = read(&first).expect("read");
        assert_eq!(bundle.payload, b"\0asm...");
        bundle.expect("x", "echo", "1.0.0").expect("matches");
        let err = bundle.expect("x", "echo", "2.0.0").expect_err("mismatch");
        assert!(err.to_string().contains("says echo@1.0.0"), "{err}");
    }

    #[test]
    fn escaping_absolute_and_symlink_entries_are_refused() {
        for (name, needle) in [
            ("../evil", "escapes the bundle"),
            ("tools/../../evil", "escapes the bundle"),
            ("/etc/evil", "absolute path"),
        ] {
            let bytes = write_zip(&[("murmur.yaml", TOOL.as_bytes(), 0o644), (name, b"x", 0o644)])
                .expect("zip");
            let err = read(&bytes).expect_err(name).to_string();
            assert!(err.contains(needle) && err.contains(name), "{name}: {err}");
            assert!(err.starts_with("echo@1.0.0"), "{err}");
        }
        let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("murmur.yaml", SimpleFileOptions::default())
            .expect("start");
        zip.write_all(TOOL.as_bytes()).expect("write");
        zip.add_symlink(
            "component.wasm",
            "/etc/shadow",
            SimpleFileOptions::default(),
        )
        .expect("symlink");
        let bytes = zip.finish().expect("finish").into_inner();
        let err = read(&bytes).expect_err("symlink").to_string();
        assert!(err.contains("`component.wasm` is a symlink"), "{err}");
    }

    #[test]
    fn duplicates_missing_parts_and_size_are_refused() {
        // Two entries whose names differ in one byte, then made equal.
        let mut bytes = write_zip(&[
            ("murmur.yaml", TOOL.as_bytes(), 0o644),
            ("component.wasm", b"a", 0o644),
            ("component.wasX", b"b", 0o644),
        ])
        .expect("zip");
        let needle = b"component.wasX";
        let mut i = 0;
        while i + needle.len() <= bytes.len() {
            if &bytes[i..i + needle.len()] == needle {
                bytes[i + needle.len() - 1] = b'm';
            }
            i += 1;
        }
        let err = read(&bytes).expect_err("duplicate").to_string();
        assert!(
            err.contains("more than once") || err.contains("share a name"),
            "{err}"
        );

        let no_payload = write_zip(&[("murmur.yaml", TOOL.as_bytes(), 0o644)]).expect("zip");
        let err = read(&no_payload).expect_err("payload").to_string();
        assert!(err.contains("no `component.wasm`"), "{err}");

        let no_manifest = write_zip(&[("component.wasm", b"x", 0o644)]).expect("zip");
        let err = read(&no_manifest).expect_err("manifest").to_string();
        assert!(err.contains("no murmur.yaml"), "{err}");

        let err = Bundle::read(&no_payload, "echo@1.0.0", 10)
            .expect_err("size")
            .to_string();
        assert!(err.contains("over the limit of 10 bytes"), "{err}");

        let err = read(b"not a zip").expect_err("garbage").to_string();
        assert!(err.contains("not a readable zip"), "{err}");
    }
}
