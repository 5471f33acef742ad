//! The artifact format shared by `roostctl publish` and roostd's staging: the
//! artifact manifest, the zip bundle, `murmur.lock`, and the registry's on-disk
//! layout (index plus `<name>/<version>/` bundles). Files only; no network.

pub mod bundle;
pub mod lock;
pub mod manifest;
pub mod names;
pub mod registry;
pub mod tree;

pub use bundle::{Bundle, BundleError, DEFAULT_MAX_BUNDLE_BYTES};
pub use lock::{LOCK_FILENAME, LockEntry, LockError, MurmurLock};
pub use manifest::{ArtifactManifest, ArtifactRuntime, HookBinding, Implementation, PayloadKind};
pub use registry::{
    BundleRef, GENERIC_PLATFORM, INDEX_FILENAME, IndexEntry, LayoutError, LocalRegistry, Published,
    RegistryIndex, current_platform, valid_platform,
};

/// File name of the manifest inside a bundle (and inside an installed tool dir).
pub const ARTIFACT_MANIFEST: &str = "murmur.yaml";

/// Hex sha256 of some bytes, the form every hash in the format takes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}
