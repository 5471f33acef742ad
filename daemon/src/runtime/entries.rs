//! The entries (files, directories, links) WASM guests have made in each
//! workdir, net of those they removed, since roostd started: what
//! `capabilities.limits.files` bounds (`files.rs` counts at each call of
//! `wasi:filesystem`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use wasmtime_wasi::p2::FsResult;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;

/// The entries guests have made in each workdir, net of those they removed,
/// since roostd started.
#[derive(Default)]
pub(crate) struct Made(
    std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Arc<AtomicI64>>>,
);

impl Made {
    /// The count of `workdir`'s entries, held to `limit`.
    pub(crate) fn of(&self, workdir: &std::path::Path, limit: u64) -> Entries {
        let mut made = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = made.entry(workdir.to_path_buf()).or_default();
        Entries {
            count: Arc::clone(count),
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
        }
    }
}

/// One workdir's count, as a store holds it.
#[derive(Clone, Default)]
pub(crate) struct Entries {
    count: Arc<AtomicI64>,
    limit: i64,
}

impl Entries {
    /// `Ok` while another entry may be made.
    pub(crate) fn room(&self) -> FsResult<()> {
        match self.count.load(Ordering::Relaxed) < self.limit {
            true => Ok(()),
            false => Err(ErrorCode::Quota.into()),
        }
    }

    pub(crate) fn made(&self, n: i64) {
        self.count.fetch_add(n, Ordering::Relaxed);
    }
}
