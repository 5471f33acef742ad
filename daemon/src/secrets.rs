//! Files holding secrets (bearer tokens, export headers, TLS private keys):
//! readable by roostd and at most its own group, never by other users; and
//! the PEM certificate chains that go with the keys.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The file's text when no other user can read or change it: no access for
/// others, no write for the group, and group read only when the file's
/// group is roostd's own (`root:roost 0640` under the shipped unit). The
/// error says what to fix.
pub fn read_private(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let mode = meta.mode() & 0o777;
    // SAFETY: getegid has no preconditions and cannot fail.
    let own_group = meta.gid() == unsafe { libc::getegid() };
    if mode & 0o037 != 0 || (mode & 0o040 != 0 && !own_group) {
        return Err(format!(
            "mode {mode:o} lets other users read or change it; chmod 600 it (or 640 with \
             roostd's own group as the file's group)"
        ));
    }
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}

/// The PEM certificates in the file at `path` (at least one).
pub fn read_certificates(
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certs)
}

/// The PEM private key (PKCS#8, PKCS#1 or SEC1) in the file at `path`,
/// which [`read_private`]'s rule protects.
pub fn read_private_key(path: &Path) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    use rustls::pki_types::pem::PemObject;
    let text = read_private(path)?;
    rustls::pki_types::PrivateKeyDer::from_pem_slice(text.as_bytes())
        .map_err(|e| format!("no PEM private key: {e}"))
}
