//! The control socket: binding with stale-socket care, mode 0660, the peer
//! credentials of each connection, and who may use it.

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
#[derive(Debug, Clone)]
pub struct PeerCred {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub pid: Option<i32>,
    /// Whether the peer was one of roostd's tools when it connected (per
    /// request, only whether the connecting process has exited since: it may
    /// have handed the socket on).
    pub tool: Option<crate::tools::origin::ToolPeer>,
}

impl Connected<IncomingStream<'_, UnixListener>> for PeerCred {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        match stream.io().peer_cred() {
            Ok(cred) => Self {
                uid: Some(cred.uid()),
                gid: Some(cred.gid()),
                pid: cred.pid(),
                tool: cred.pid().and_then(crate::tools::origin::tool_peer),
            },
            Err(_) => Self {
                uid: None,
                gid: None,
                pid: None,
                tool: None,
            },
        }
    }
}

/// Why a control connection is refused (or the policy cannot be set up).
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    #[error("control.group '{0}' is not a group on this host")]
    UnknownGroup(String),
    #[error("the peer's credentials are unknown")]
    Unknown,
    #[error(
        "uid {uid} may not use this socket: only root, the daemon's user (uid {daemon_uid}) and \
         members of {group} may (control.group)"
    )]
    NotMember {
        uid: u32,
        daemon_uid: u32,
        group: String,
    },
    #[error(
        "uid {uid} may not use this socket: only root and the daemon's user (uid {daemon_uid}) \
         may; set control.group to admit a group"
    )]
    NotAdmitted { uid: u32, daemon_uid: u32 },
}

/// Who may use the control socket: root, the daemon's own user, and members
/// of the configured group (`control.group`, default the daemon's own group,
/// which owns the 0660 socket). The socket's mode already keeps others out at
/// `connect`; this is the check behind it.
#[derive(Debug, Clone)]
pub struct PeerPolicy {
    daemon_uid: u32,
    group: Option<(String, u32)>,
}

impl PeerPolicy {
    /// From `control.group` (a group name; unknown names are an error).
    pub fn new(group: Option<&str>) -> Result<Self, PeerError> {
        // SAFETY: geteuid has no preconditions.
        let daemon_uid = unsafe { libc::geteuid() };
        let group = match group {
            // SAFETY: getegid has no preconditions.
            None => Some(("the daemon's group".to_string(), unsafe { libc::getegid() })),
            Some(name) => Some((
                format!("group '{name}'"),
                group_gid(name).ok_or_else(|| PeerError::UnknownGroup(name.to_string()))?,
            )),
        };
        Ok(Self { daemon_uid, group })
    }

    /// `Err` says why the peer is refused.
    pub fn check(&self, peer: &PeerCred) -> Result<(), PeerError> {
        let Some(uid) = peer.uid else {
            return Err(PeerError::Unknown);
        };
        if uid == 0 || uid == self.daemon_uid {
            return Ok(());
        }
        if let Some((_, gid)) = &self.group
            && (peer.gid == Some(*gid) || user_groups(uid).contains(gid))
        {
            return Ok(());
        }
        let daemon_uid = self.daemon_uid;
        Err(match &self.group {
            Some((group, _)) => PeerError::NotMember {
                uid,
                daemon_uid,
                group: group.clone(),
            },
            None => PeerError::NotAdmitted { uid, daemon_uid },
        })
    }
}

fn group_gid(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    let mut group: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: getgrnam_r writes into `group` and `buf`, which outlive the call.
    let rc = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut group,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some(group.gr_gid)
}

/// Supplementary groups of the user `uid` (empty when unknown).
fn user_groups(uid: u32) -> Vec<u32> {
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf`, which outlive the call.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() {
        return Vec::new();
    }
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut count = groups.len() as libc::c_int;
    // SAFETY: `pw.pw_name` points into `buf`; `groups` has room for `count`.
    let rc = unsafe { libc::getgrouplist(pw.pw_name, pw.pw_gid, groups.as_mut_ptr(), &mut count) };
    if rc < 0 {
        return Vec::new();
    }
    groups.truncate(usize::try_from(count).unwrap_or(0));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32) -> PeerCred {
        PeerCred {
            uid: Some(uid),
            gid: Some(gid),
            pid: Some(1),
            tool: None,
        }
    }

    #[test]
    fn root_and_the_daemon_user_are_admitted_others_are_not() {
        let policy = PeerPolicy {
            daemon_uid: 990,
            group: None,
        };
        assert!(policy.check(&peer(0, 0)).is_ok());
        assert!(policy.check(&peer(990, 990)).is_ok());
        let err = policy
            .check(&peer(1000, 1000))
            .expect_err("stranger")
            .to_string();
        assert!(err.contains("uid 1000 may not use this socket"), "{err}");
        assert!(
            policy
                .check(&PeerCred {
                    uid: None,
                    gid: None,
                    pid: None,
                    tool: None,
                })
                .is_err()
        );
    }

    #[test]
    fn members_of_the_control_group_are_admitted() {
        let policy = PeerPolicy {
            daemon_uid: 990,
            group: Some(("group 'roost'".into(), 4242)),
        };
        assert!(policy.check(&peer(1000, 4242)).is_ok(), "primary group");
        let err = policy
            .check(&peer(1000, 1000))
            .expect_err("not a member")
            .to_string();
        assert!(err.contains("members of group 'roost'"), "{err}");
        assert!(PeerPolicy::new(None).expect("default").group.is_some());
    }

    #[test]
    fn unknown_group_names_are_refused() {
        let err = PeerPolicy::new(Some("no-such-group-roost"))
            .expect_err("unknown")
            .to_string();
        assert!(err.contains("is not a group"), "{err}");
        assert!(PeerPolicy::new(Some("root")).is_ok());
    }
}
