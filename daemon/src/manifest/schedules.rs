//! `schedules:` in a `murmur.yaml`: the capsule's own schedules, read and
//! checked with the manifest (written for its route when its session
//! starts, by `schedules::manifest`).

use serde::Deserialize;

use crate::schedules::model::{Missed, Overlap, ScheduleTimes, When, check_name, check_text};

/// One entry of `schedules:` as written. (No `at`: a one-off instant is an
/// operator's, `roostctl schedule add --at`.)
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSchedule {
    pub name: String,
    pub text: String,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub tz: Option<String>,
    #[serde(default)]
    pub every: Option<String>,
    #[serde(default)]
    pub context_id: Option<String>,
    #[serde(default)]
    pub missed: Missed,
    #[serde(default)]
    pub overlap: Overlap,
}

impl ManifestSchedule {
    pub fn times(&self) -> ScheduleTimes {
        ScheduleTimes {
            cron: self.cron.clone(),
            tz: self.tz.clone(),
            every: self.every.clone(),
            at: None,
        }
    }
}

/// Checks `schedules:` (unique names, a text, times that fire): the field
/// at fault and why.
pub(super) fn check(schedules: &[ManifestSchedule], now_ms: i64) -> Result<(), (String, String)> {
    let mut seen = std::collections::HashSet::new();
    for (i, s) in schedules.iter().enumerate() {
        let field = format!("schedules[{i}]");
        check_name(&s.name).map_err(|e| (field.clone(), e))?;
        if !seen.insert(s.name.as_str()) {
            return Err((field, format!("repeats the name '{}'", s.name)));
        }
        check_text(&s.text, s.context_id.as_deref()).map_err(|e| (field.clone(), e))?;
        When::parse_new(&s.times(), now_ms).map_err(|e| (field, e.to_string()))?;
    }
    Ok(())
}
