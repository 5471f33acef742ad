//! The control socket: binding with stale-socket care, mode 0660, and the peer
//! credentials of each connection.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::{UnixListener, UnixStream};

/// Why the control socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("another roostd is already listening on {}; stop it first or use --socket", path.display())]
    InUse { path: PathBuf },
    #[error("cannot bind control socket {}: {source}", path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Binds `path`, replacing a stale socket file only when nothing answers on it.
pub async fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let bind_err = |source| SocketError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(bind_err)?;
    }
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            return Err(SocketError::InUse {
                path: path.to_path_buf(),
            });
        }
        tracing::info!(path = %path.display(), "removing stale control socket");
        std::fs::remove_file(path).map_err(bind_err)?;
    }
    let listener = UnixListener::bind(path).map_err(bind_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(bind_err)?;
    Ok(listener)
}

/// Who is on the other end of a control connection.
#[derive(Debug, Clone, Copy)]
pub struct PeerCred {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub pid: Option<i32>,
}

impl Connected<IncomingStream<'_, UnixListener>> for PeerCred {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        match stream.io().peer_cred() {
            Ok(cred) => Self {
                uid: Some(cred.uid()),
                gid: Some(cred.gid()),
                pid: cred.pid(),
            },
            Err(_) => Self {
                uid: None,
                gid: None,
                pid: None,
            },
        }
    }
}
