//! `roostctl publish`: an artifact directory packed into a registry: a
//! directory roostctl writes itself, the daemon's own registry over its
//! socket (`--to-daemon`, the default when the daemon in use is the system one,
//! whose registry only its own user can write), or the registry of the
//! cluster the daemon is a node of (`--cluster`), which every node reads.

use super::print::{Output, print_json};
use super::*;
use crate::api::PublishReport;

/// Where a bundle goes.
pub(super) enum Target {
    Directory(PathBuf),
    Daemon,
    Cluster,
}

impl Target {
    /// `--registry DIR`, else `--to-daemon`, else `$ROOST_REGISTRY`, else the
    /// daemon's registry when roostctl talks to the system daemon, else the
    /// default registry directory.
    pub(super) fn choose(
        registry: Option<PathBuf>,
        to_daemon: bool,
        cluster: bool,
        client: &Client,
    ) -> Self {
        if cluster {
            return Self::Cluster;
        }
        if let Some(dir) = registry {
            return Self::Directory(dir);
        }
        if to_daemon {
            return Self::Daemon;
        }
        if let Some(dir) = std::env::var_os(paths::REGISTRY_ENV) {
            return Self::Directory(PathBuf::from(dir));
        }
        if paths::is_system_socket(client.socket()) {
            return Self::Daemon;
        }
        Self::Directory(paths::default_registry())
    }
}

pub(super) async fn publish(
    out: &mut impl Write,
    client: &Client,
    dir: &std::path::Path,
    target: Target,
    platform: Option<String>,
    how: Output,
) -> Result<u8, CliError> {
    use crate::artifact::{GENERIC_PLATFORM, LocalRegistry, PayloadKind, bundle};
    let (manifest, bytes) = bundle::pack(dir)?;
    let platform = match platform {
        Some(p) => {
            if !crate::artifact::valid_platform(&p) {
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
    let report = match target {
        Target::Daemon => client.publish(bytes, &platform, false).await?,
        Target::Cluster => client.publish(bytes, &platform, true).await?,
        Target::Directory(registry) => {
            if registry.to_str().is_some_and(|r| r.contains("://")) {
                return Err(CliError::Usage(format!(
                    "publish writes to a registry directory; '{}' is a URL (HTTP registries \
                     are read-only)",
                    registry.display()
                )));
            }
            let published = LocalRegistry::new(&registry).publish(&manifest, &bytes, &platform)?;
            PublishReport {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                runtime: manifest.runtime.to_string(),
                platform: published.bundle.platform.clone(),
                path: registry.join(&published.bundle.path).display().to_string(),
                sha256: published.bundle.sha256.clone(),
                size: published.bundle.size,
                unchanged: published.unchanged,
                kind: manifest.payload_kind_label().to_string(),
            }
        }
    };
    if how.json {
        print_json(out, &report)?;
    } else if how.quiet {
        writeln!(out, "{}@{}", report.name, report.version)?;
    } else {
        let verb = if report.unchanged {
            "already published (same bytes)"
        } else {
            "published"
        };
        writeln!(
            out,
            "{}@{} ({} {}, {}) {verb}\n  sha256 {}\n  {}",
            report.name,
            report.version,
            report.runtime,
            report.kind,
            report.platform,
            report.sha256,
            report.path
        )?;
    }
    Ok(super::exit::OK)
}
