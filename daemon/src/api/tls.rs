//! The gateway's own TLS (`a2a.tls`): its certificate and key, and the CA
//! client certificates must chain to (mutual TLS), read from files into a
//! rustls server config that SIGHUP replaces; connections already open
//! keep the one they were made with.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::pki_types::CertificateDer;

use crate::config::{ClientAuth, TlsSettings};

/// Why `a2a.tls` cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("a2a.tls.{what} {path}: {why}")]
    File {
        what: &'static str,
        path: String,
        why: String,
    },
    #[error("a2a.tls: {0}")]
    Config(String),
}

/// The config new connections are accepted with.
pub struct ServerTls(RwLock<Arc<rustls::ServerConfig>>);

impl ServerTls {
    pub fn load(settings: &TlsSettings) -> Result<Self, TlsError> {
        Ok(Self(RwLock::new(Arc::new(server_config(settings)?))))
    }

    /// Reads the files again: new connections use them; on an error the
    /// running config stays (and the error says why).
    pub fn reload(&self, settings: &TlsSettings) -> Result<(), TlsError> {
        let config = Arc::new(server_config(settings)?);
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config;
        Ok(())
    }

    pub(super) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ))
    }
}

fn certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    crate::secrets::read_certificates(path).map_err(|why| TlsError::File {
        what,
        path: path.display().to_string(),
        why,
    })
}

fn server_config(settings: &TlsSettings) -> Result<rustls::ServerConfig, TlsError> {
    let chain = certificates(&settings.cert_file, "cert_file")?;
    let key_fail = |why: String| TlsError::File {
        what: "key_file",
        path: settings.key_file.display().to_string(),
        why,
    };
    let key = crate::secrets::read_private_key(&settings.key_file).map_err(key_fail)?;
    let builder = rustls::ServerConfig::builder();
    let builder = match &settings.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certificates(path, "client_ca_file")?);
            if added == 0 {
                return Err(TlsError::File {
                    what: "client_ca_file",
                    path: path.display().to_string(),
                    why: "no certificate in it is a usable CA".into(),
                });
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots));
            let verifier = match settings.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| TlsError::Config(format!("client_ca_file: {e}")))?,
            )
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| key_fail(format!("does not go with cert_file: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
