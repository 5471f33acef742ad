//! Installing artifacts into a session's bookkeeping dir: `tools/<name>/`
//! with its manifest, native binary or skill, and a generic manifest for
//! each allow-listed shell binary; never through a link (`crate::fsx`).

use super::*;

/// The generic manifest of an allow-listed shell binary.
pub(super) fn shell_manifest(binary: &str) -> ArtifactManifest {
    ArtifactManifest {
        name: binary.to_string(),
        version: "0.0.0".into(),
        runtime: ArtifactRuntime::Tool,
        implementation: Some(Implementation::Native),
        description: format!(
            "Run `{binary}` (allow-listed in capabilities.shell.allow) in the workdir. \
             Input: {{\"command\": \"…\"}}."
        ),
        tags: vec!["shell".into()],
        input_schema: serde_yaml::from_str(
            "{type: object, properties: {command: {type: string}}, required: [command]}",
        )
        .ok(),
        output_schema: None,
        hook: None,
    }
}

/// Writes `tools/<name>/murmur.yaml`, the native binary (0755) or `skill.md`.
/// Into a fresh tool dir files are written directly; an existing one (a resume,
/// a pull over an older version) has its files replaced by rename, so a reader
/// or a still-running binary never sees a half-written file.
pub fn install_one(root: &Path, dir: &Path, item: &Installed) -> std::io::Result<()> {
    let tool_dir = dir.join("tools").join(&item.name);
    let fresh = !tool_dir.exists();
    crate::fsx::create_dir_all(root, &tool_dir)?;
    let write = |path: &Path, bytes: &[u8], mode: u32| {
        if fresh {
            write_new(root, path, bytes, mode)
        } else {
            crate::fsx::replace(root, path, bytes, mode)
        }
    };
    write(
        &tool_dir.join(ARTIFACT_MANIFEST),
        item.manifest_yaml.as_bytes(),
        0o644,
    )?;
    match &item.payload {
        Payload::Native(bytes) => write(&tool_dir.join(&item.name), bytes, 0o755)?,
        Payload::Skill(text) => write(&tool_dir.join("skill.md"), text.as_bytes(), 0o644)?,
        Payload::Tool(_) | Payload::Hook(_) => {}
    }
    Ok(())
}

/// Installs every staged artifact (a few at a time: on a real disk each file is
/// a journal round trip), then a generic manifest for each shell binary that
/// has none. `dir` lies below `root`, the session's workdir; no link below
/// `root` is followed ([`crate::fsx`]).
pub fn install(
    root: &Path,
    dir: &Path,
    items: &[Installed],
    shell_allow: &[String],
) -> std::io::Result<()> {
    crate::fsx::create_dir_all(root, &dir.join("tools"))?;
    let workers = items.len().clamp(1, 4);
    let chunk = items.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .try_for_each(|item| install_one(root, dir, item))
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| std::io::Error::other("install thread panicked"))?
        })
    })?;
    for binary in shell_allow {
        let path = dir.join("tools").join(binary).join(ARTIFACT_MANIFEST);
        let yaml = serde_yaml::to_string(&shell_manifest(binary)).map_err(std::io::Error::other)?;
        crate::fsx::write_if_absent(root, &path, yaml.as_bytes(), 0o644)?;
    }
    Ok(())
}

/// A file in a tool dir roostd just made: exclusive, so nothing already there
/// (a planted link) is written through.
fn write_new(root: &Path, path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = crate::fsx::create_new(root, path, mode)?;
    if mode & 0o111 != 0 {
        // Exactly `mode`, whatever the umask (an executable must stay runnable).
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    file.write_all(bytes)
}
