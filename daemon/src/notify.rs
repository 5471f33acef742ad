//! The systemd notify protocol (READY, STOPPING, STATUS, WATCHDOG) over the
//! datagram socket named by `NOTIFY_SOCKET`; a no-op when it is unset.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Sends notifications to the service manager, if there is one.
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` (a path, or `@name` for an abstract socket).
    pub fn from_env() -> Self {
        let target = std::env::var("NOTIFY_SOCKET").ok().and_then(|name| {
            let addr = match name.strip_prefix('@') {
                Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name.as_bytes()),
                None => SocketAddr::from_pathname(&name),
            };
            match (UnixDatagram::unbound(), addr) {
                (Ok(socket), Ok(addr)) => Some((socket, addr)),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(socket = %name, error = %e, "NOTIFY_SOCKET unusable");
                    None
                }
            }
        });
        Self { target }
    }

    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one state message such as `READY=1`.
    pub fn notify(&self, message: &str) {
        if let Some((socket, addr)) = &self.target
            && let Err(e) = socket.send_to_addr(message.as_bytes(), addr)
        {
            tracing::warn!(error = %e, message, "sd_notify failed");
        }
    }

    /// Half the watchdog period when `WATCHDOG_USEC` asks for pings to this process.
    pub fn watchdog_interval() -> Option<Duration> {
        if let Ok(pid) = std::env::var("WATCHDOG_PID")
            && pid.trim() != std::process::id().to_string()
        {
            return None;
        }
        let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
        (usec > 0).then(|| Duration::from_micros(usec / 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let notifier = Notifier {
            target: Some((
                UnixDatagram::unbound().expect("socket"),
                SocketAddr::from_pathname(&path).expect("addr"),
            )),
        };
        notifier.notify("READY=1");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");
    }
}
