//! A pids cgroup per jailed tool call: `pids.max` bounds the tool's processes
//! and threads even for root (whom RLIMIT_NPROC does not bind), and whatever
//! is left in the group when the call ends is killed.

use std::path::{Path, PathBuf};

/// Where roostd makes its per-tool groups: a writable directory of the pids
/// controller (cgroup v1 `pids` hierarchy, under roostd's own group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidsCgroups {
    base: PathBuf,
}

impl PidsCgroups {
    /// Finds (and creates) `roostd-tools` under roostd's own group of the v1
    /// pids hierarchy, if this host has one roostd may write; `None` otherwise
    /// (cgroup v2 without a delegated subtree, or no permission).
    pub fn detect() -> Option<Self> {
        let mount = Path::new("/sys/fs/cgroup/pids");
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "pids")
                .then(|| path.trim_start_matches('/').to_string())
        })?;
        let base = mount.join(rel).join("roostd-tools");
        std::fs::create_dir_all(&base).ok()?;
        let this = Self { base };
        // Proves that groups can be made and limited here.
        let probe = this.create(1).ok()?;
        drop(probe);
        Some(this)
    }

    /// A fresh group allowing at most `max` tasks (processes and threads).
    pub fn create(&self, max: u64) -> std::io::Result<ToolCgroup> {
        let dir = self
            .base
            .join(format!("tool-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir(&dir)?;
        let group = ToolCgroup { dir };
        std::fs::write(group.dir.join("pids.max"), max.to_string())?;
        Ok(group)
    }
}

/// One tool call's group; dropping it kills what is left inside and removes it.
#[derive(Debug)]
pub struct ToolCgroup {
    dir: PathBuf,
}

impl ToolCgroup {
    /// The file a process writes its pid to in order to join.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn members(&self) -> Vec<i32> {
        std::fs::read_to_string(self.procs_file())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for ToolCgroup {
    fn drop(&mut self) {
        // Kill stragglers (children that left the process group) until the
        // group is empty, then remove it; a group still busy after that is
        // retried in the background so a slow exit cannot leak it.
        for _ in 0..50 {
            let members = self.members();
            if members.is_empty() && std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            for pid in members {
                // SAFETY: kill(2) on a process inside this tool's own group.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let dir = self.dir.clone();
        std::thread::spawn(move || {
            for _ in 0..100 {
                if std::fs::remove_dir(&dir).is_ok() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            tracing::warn!(dir = %dir.display(), "cannot remove a tool's pids cgroup");
        });
    }
}
