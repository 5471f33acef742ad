//! `roostctl publish`: an artifact directory packed into a registry.

use super::*;

pub(super) fn publish(
    out: &mut impl Write,
    dir: &std::path::Path,
    registry: Option<PathBuf>,
    platform: Option<String>,
    json: bool,
) -> Result<i32, CliError> {
    use crate::artifact::{GENERIC_PLATFORM, LocalRegistry, PayloadKind, bundle};
    let registry = registry
        .or_else(|| std::env::var_os(paths::REGISTRY_ENV).map(PathBuf::from))
        .unwrap_or_else(paths::default_registry);
    if registry.to_str().is_some_and(|r| r.contains("://")) {
        return Err(CliError::Usage(format!(
            "publish writes to a registry directory; '{}' is a URL (HTTP registries are read-only)",
            registry.display()
        )));
    }
    let (manifest, bytes) = bundle::pack(dir)?;
    let platform = match platform {
        Some(p) => {
            let valid = p == GENERIC_PLATFORM
                || p.split_once('-').is_some_and(|(os, arch)| {
                    !os.is_empty()
                        && !arch.is_empty()
                        && p.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
            if !valid {
                return Err(CliError::Usage(format!(
                    "--platform '{p}' must be `any` or `<os>-<arch>` such as {}",
                    crate::artifact::current_platform()
                )));
            }
            p
        }
        None if manifest.payload_kind() == PayloadKind::Native => {
            crate::artifact::current_platform()
        }
        None => GENERIC_PLATFORM.to_string(),
    };
    let published = LocalRegistry::new(&registry).publish(&manifest, &bytes, &platform)?;
    if json {
        let value = serde_json::json!({
            "name": manifest.name,
            "version": manifest.version,
            "runtime": manifest.runtime,
            "platform": published.bundle.platform,
            "path": registry.join(&published.bundle.path),
            "sha256": published.bundle.sha256,
            "size": published.bundle.size,
            "unchanged": published.unchanged,
        });
        serde_json::to_writer_pretty(&mut *out, &value)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        writeln!(out)?;
    } else {
        let verb = if published.unchanged {
            "already published (same bytes)"
        } else {
            "published"
        };
        writeln!(
            out,
            "{}@{} ({} {}, {}) {verb}\n  sha256 {}\n  {}",
            manifest.name,
            manifest.version,
            manifest.runtime,
            manifest.payload_kind_label(),
            published.bundle.platform,
            published.bundle.sha256,
            registry.join(&published.bundle.path).display()
        )?;
    }
    Ok(0)
}
