//! The standard `process_*` series, read from `/proc/self` at each scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::NoExemplar;

/// Reads `/proc/self` when scraped; holds nothing but the system's units.
#[derive(Debug)]
pub struct Process {
    ticks_per_sec: f64,
    page_bytes: f64,
    boot_secs: f64,
}

impl Process {
    pub fn new() -> Self {
        // SAFETY: sysconf has no preconditions.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let boot_secs = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        Self {
            ticks_per_sec: if ticks > 0 { ticks as f64 } else { 100.0 },
            page_bytes: if page > 0 { page as f64 } else { 4096.0 },
            boot_secs,
        }
    }
}

/// Fields of `/proc/self/stat` after the command name, numbered as in
/// proc(5) from 3 (`state`).
fn stat_fields() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(
        rest.split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(f) = stat_fields() else {
            return Ok(());
        };
        // proc(5) field n is f[n - 4] here (field 3, state, was skipped).
        let field = |n: usize| f.get(n - 4).copied().unwrap_or(0) as f64;
        let cpu = (field(14) + field(15)) / self.ticks_per_sec;
        encoder
            .encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, f64>(&cpu, None as NoExemplar)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                field(24) * self.page_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                field(23),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                self.boot_secs + field(22) / self.ticks_per_sec,
            ),
            ("process_threads", "Number of OS threads", field(20)),
            (
                "process_open_fds",
                "Number of open file descriptors",
                std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count) as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                max_fds(),
            ),
        ];
        for (name, help, value) in gauges {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&value)?;
        }
        Ok(())
    }
}

fn max_fds() -> f64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur as f64
    } else {
        0.0
    }
}
