//! Local skills: a `skill.md` read from a path relative to the capsule dir
//! (a file, or a directory holding `skill.md` in any letter case).

use super::*;

/// A skill whose `skill.md` comes from a path (file, or directory holding a
/// `skill.md` in any letter case) relative to the capsule dir.
pub(super) async fn local_skill(
    artifact: &ArtifactRef,
    manifest_dir: &Path,
    source: &str,
) -> Result<Installed, ArtifactError> {
    let name = artifact.name.clone();
    let path = manifest_dir.join(source);
    let text = tokio::task::spawn_blocking({
        let name = name.clone();
        move || read_local_skill(&name, &path)
    })
    .await
    .map_err(|e| ArtifactError::SkillRead {
        name: name.clone(),
        path: manifest_dir.join(source),
        source: std::io::Error::other(e),
    })??;
    let manifest = ArtifactManifest {
        name: name.clone(),
        version: artifact.version.clone(),
        runtime: ArtifactRuntime::Skill,
        implementation: None,
        description: format!("Local skill from {source}"),
        tags: vec!["skill".into()],
        input_schema: None,
        output_schema: None,
        hook: None,
    };
    Ok(Installed {
        name,
        version: artifact.version.clone(),
        runtime: ArtifactRuntime::Skill,
        implementation: None,
        sha256: None,
        origin: Origin::Local,
        manifest_yaml: serde_yaml::to_string(&manifest).unwrap_or_default(),
        manifest,
        payload: Payload::Skill(text.into()),
    })
}

pub(super) fn read_local_skill(name: &str, path: &Path) -> Result<String, ArtifactError> {
    let read_err = |path: &Path| {
        let name = name.to_string();
        let path = path.to_path_buf();
        move |source| ArtifactError::SkillRead { name, path, source }
    };
    if !path.exists() {
        return Err(ArtifactError::SkillSourceMissing {
            name: name.to_string(),
            path: path.to_path_buf(),
        });
    }
    let file = if path.is_dir() {
        let mut found = None;
        for entry in std::fs::read_dir(path).map_err(read_err(path))? {
            let entry = entry.map_err(read_err(path))?;
            if entry
                .file_name()
                .to_string_lossy()
                .eq_ignore_ascii_case("skill.md")
            {
                found = Some(entry.path());
                break;
            }
        }
        found.ok_or_else(|| ArtifactError::SkillNoSkillMd {
            name: name.to_string(),
            path: path.to_path_buf(),
        })?
    } else {
        path.to_path_buf()
    };
    std::fs::read_to_string(&file).map_err(read_err(&file))
}
