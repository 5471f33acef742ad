//! A capsule's own schedules (`schedules:`, read by `manifest`), written
//! for its route when its session starts: replacing the ones an earlier
//! start wrote, keeping the ticks of those it still names; a schedule made
//! through the API is left alone.

use super::model::{Origin, Schedule};
use crate::manifest::ManifestSchedule;
use crate::store::{Store, StoreError, now_ms};

/// Writes a route's manifest schedules; `true` when there was anything to
/// write (the scheduler should look again).
pub async fn install(
    store: &Store,
    route: &str,
    schedules: &[ManifestSchedule],
) -> Result<bool, StoreError> {
    if schedules.is_empty() && !store.has_manifest_schedules(route).await? {
        return Ok(false);
    }
    let now = now_ms();
    let rows = schedules
        .iter()
        .map(|s| Schedule {
            id: format!("sch_{}", uuid::Uuid::now_v7().simple()),
            route: route.to_string(),
            name: s.name.clone(),
            origin: Origin::Manifest,
            text: s.text.clone(),
            context_id: s.context_id.clone(),
            times: s.times(),
            missed: s.missed,
            overlap: s.overlap,
            paused: false,
            created_ms: now,
            last_tick_ms: None,
            last_task_id: None,
            fired: 0,
            skipped: 0,
            last_error: None,
        })
        .collect();
    store.set_manifest_schedules(route, rows).await?;
    Ok(true)
}
