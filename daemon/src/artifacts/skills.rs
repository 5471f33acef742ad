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
    let text = tokio::task::spawn_blocking({
        let (name, dir, source) = (name.clone(), manifest_dir.to_path_buf(), source.to_string());
        move || read_local_skill(&name, &dir, &source)
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

/// The text of the skill `source` names, inside the capsule directory `dir`
/// and read without following a link (`manifest::paths`, the one rule for
/// paths a manifest names).
pub(super) fn read_local_skill(
    name: &str,
    dir: &Path,
    source: &str,
) -> Result<String, ArtifactError> {
    use crate::manifest::paths;
    let outside = |m| ArtifactError::SkillOutside {
        name: name.to_string(),
        message: format!("`source` {m}"),
    };
    let path = paths::inside(dir, source).map_err(outside)?;
    if std::fs::symlink_metadata(&path).is_err() {
        return Err(ArtifactError::SkillSourceMissing {
            name: name.to_string(),
            path,
        });
    }
    let file = match paths::list(dir, &path).map_err(outside)? {
        None => path,
        Some(names) => {
            let found = names
                .into_iter()
                .find(|n| n.to_string_lossy().eq_ignore_ascii_case("skill.md"))
                .ok_or_else(|| ArtifactError::SkillNoSkillMd {
                    name: name.to_string(),
                    path: path.clone(),
                })?;
            path.join(found)
        }
    };
    let bytes = paths::read(dir, &file).map_err(outside)?;
    String::from_utf8(bytes).map_err(|e| ArtifactError::SkillRead {
        name: name.to_string(),
        path: file,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}
