//! Which processes roostd started as tools, and for which session: the
//! control socket asks before it serves a peer, so a tool that reaches the
//! socket (same uid, `network.unix_sockets`) is still refused.
//!
//! A peer counts as a tool when any of these holds: roostd is among its
//! ancestors; its session id (every tool starts its own, `setsid`) is a live
//! tool's; it sits in one of roostd's per-tool pids cgroups. The first catches
//! what a tool starts, the second a child that a tool left behind (reparented
//! to init but still in the tool's session), the third one that also called
//! `setsid` (where the host has the cgroups).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn live() -> &'static Mutex<HashMap<i32, String>> {
    static LIVE: OnceLock<Mutex<HashMap<i32, String>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// Keeps a running tool's pid (its session and process group leader)
/// registered under its session id until dropped.
pub struct Registered(i32);

impl Registered {
    pub fn new(pid: i32, session_id: &str) -> Self {
        if let Ok(mut live) = live().lock() {
            live.insert(pid, session_id.to_string());
        }
        Self(pid)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut live) = live().lock() {
            live.remove(&self.0);
        }
    }
}

/// A peer that roostd started as (or that was started by) a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPeer {
    /// The session whose tool it is, when roostd can tell.
    pub session_id: Option<String>,
    /// Which test caught it.
    pub by: &'static str,
}

/// `Some` when `pid` is a tool or descends from one — or is gone: a peer
/// whose connecting process has exited (a tool that connected, forked and
/// left the socket to a child) cannot be vouched for.
pub fn tool_peer(pid: i32) -> Option<ToolPeer> {
    let own = std::process::id() as i32;
    let session_of = |pid: i32| live().lock().ok().and_then(|l| l.get(&pid).cloned());
    let Some(first) = Stat::read(pid) else {
        return Some(exited());
    };
    // roostd's only children are its tools (each registered while it runs):
    // with none running, nobody can descend from one through roostd, and
    // what a finished call left in its group or cgroup was killed with it.
    if live().lock().is_ok_and(|l| l.is_empty()) {
        return None;
    }
    if let Some(session_id) = session_of(first.session) {
        return Some(ToolPeer {
            session_id: Some(session_id),
            by: "its session is a tool's",
        });
    }
    // Up the parent chain: the ancestor whose parent is roostd is the tool.
    let mut at = pid;
    for _ in 0..4096 {
        let Some(stat) = Stat::read(at) else { break };
        if stat.ppid == own {
            return Some(ToolPeer {
                session_id: session_of(at),
                by: "roostd is its ancestor",
            });
        }
        if stat.ppid <= 1 {
            break;
        }
        at = stat.ppid;
    }
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    if cgroups.lines().any(|l| l.contains("/roostd-tools/tool-")) {
        return Some(ToolPeer {
            session_id: None,
            by: "it is in a tool's pids cgroup",
        });
    }
    None
}

/// For a connection whose peer was no tool when it connected: `Some` when
/// the process that connected has exited since (it may have handed the
/// socket to a child and gone). One `stat`, not the whole walk: a live
/// process cannot gain or lose roostd as an ancestor.
pub fn gone(pid: i32) -> Option<ToolPeer> {
    (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then(exited)
}

fn exited() -> ToolPeer {
    ToolPeer {
        session_id: None,
        by: "the process that connected has exited",
    }
}

/// The fields of `/proc/<pid>/stat` this module reads.
struct Stat {
    ppid: i32,
    session: i32,
}

impl Stat {
    fn read(pid: i32) -> Option<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid pgrp session …`; comm may hold spaces and ')'.
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let _state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        let _pgrp = fields.next()?;
        let session = fields.next()?.parse().ok()?;
        Some(Self { ppid, session })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_of_this_process_are_tools_and_others_are_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        assert_eq!(
            tool_peer(pid),
            None,
            "no tool runs: nothing to descend from"
        );
        let other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let running = Registered::new(other.id() as i32, "ses_other");
        let peer = tool_peer(pid).expect("a child of this process");
        assert_eq!(peer.by, "roostd is its ancestor");
        assert_eq!(peer.session_id, None, "not registered");
        drop(running);
        let mut other = other;
        let _ = other.kill();
        let _ = other.wait();
        let _running = Registered::new(1 << 30, "ses_placeholder");
        {
            let _registered = Registered::new(pid, "ses_test");
            assert_eq!(
                tool_peer(pid).and_then(|p| p.session_id).as_deref(),
                Some("ses_test")
            );
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tool_peer(1), None, "init is nobody's tool");
        assert!(gone(pid).is_some(), "a reaped peer is gone");
        assert!(gone(std::process::id() as i32).is_none());
        assert_eq!(
            tool_peer(pid).map(|p| p.by),
            Some("the process that connected has exited"),
            "a reaped peer is not vouched for"
        );
        assert_eq!(
            tool_peer(std::process::id() as i32),
            None,
            "roostd itself is not a tool"
        );
    }
}
