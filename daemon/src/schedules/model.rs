//! What a schedule is, apart from where it is kept and what fires it: when
//! its ticks fall (a cron expression in a time zone, a fixed period from
//! when it was made, or one instant), the stored record, and a change to
//! it. Pure: the store depends on this file alone, and the fuzz target
//! reads expressions through it.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
pub use roost_wire::api::{Missed, Overlap, ScheduleTimes};

/// Longest cron expression or time zone name read.
const MAX_TEXT: usize = 256;
/// Shortest period of `every`.
const MIN_PERIOD_MS: i64 = 1000;

/// Why a schedule's times cannot be used; each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimesError {
    #[error("give exactly one of cron, every and at (this schedule has {0})")]
    NotOne(&'static str),
    #[error("tz goes with cron only (every and at are absolute)")]
    TzWithoutCron,
    #[error("cron expression '{expr}' is not valid: {reason}")]
    Cron { expr: String, reason: String },
    #[error("cron expression '{0}' never fires (no date matches it): check its day and month")]
    NeverFires(String),
    #[error(
        "time zone '{0}' does not exist: give an IANA name such as Europe/Berlin, \
         America/New_York or UTC"
    )]
    Tz(String),
    #[error("every '{every}' is not a period: {reason} (e.g. 30s, 10m, 1h 30m, 1day)")]
    Every { every: String, reason: String },
    #[error("every '{0}' is shorter than 1 s")]
    TooOften(String),
    #[error("at '{at}' is not an RFC 3339 time: {reason} (e.g. 2026-12-03T07:00:00Z)")]
    At { at: String, reason: String },
    #[error("at '{0}' is in the past: a schedule's one tick must be still to come")]
    Past(String),
    #[error("{0} is longer than {MAX_TEXT} bytes")]
    TooLong(&'static str),
}

/// When the ticks of a schedule fall, read and checked.
#[derive(Debug, Clone)]
pub enum When {
    Cron {
        cron: Box<croner::Cron>,
        tz: chrono_tz::Tz,
    },
    /// `anchor + k × period` for k ≥ 1 (unix ms).
    Every {
        period_ms: i64,
        anchor_ms: i64,
    },
    At {
        at_ms: i64,
    },
}

impl When {
    /// Reads `times`; `anchor_ms` is when the schedule was made (where
    /// `every` counts from).
    pub fn parse(times: &ScheduleTimes, anchor_ms: i64) -> Result<Self, TimesError> {
        let given = [
            times.cron.is_some(),
            times.every.is_some(),
            times.at.is_some(),
        ]
        .iter()
        .filter(|g| **g)
        .count();
        match given {
            0 => return Err(TimesError::NotOne("none")),
            1 => {}
            _ => return Err(TimesError::NotOne("more than one")),
        }
        if times.tz.is_some() && times.cron.is_none() {
            return Err(TimesError::TzWithoutCron);
        }
        if let Some(expr) = &times.cron {
            if expr.len() > MAX_TEXT {
                return Err(TimesError::TooLong("cron"));
            }
            let tz = match times.tz.as_deref() {
                None => chrono_tz::UTC,
                Some(name) if name.len() > MAX_TEXT => return Err(TimesError::TooLong("tz")),
                Some(name) => {
                    chrono_tz::Tz::from_str(name).map_err(|_| TimesError::Tz(name.to_string()))?
                }
            };
            let cron = croner::parser::CronParser::builder()
                .seconds(croner::parser::Seconds::Optional)
                .build()
                .parse(expr)
                .map_err(|e| TimesError::Cron {
                    expr: expr.clone(),
                    reason: e.to_string(),
                })?;
            // A field that matches nothing (`,` alone, or croner's `+`
            // with no weekday after it: an empty list) never fires, and
            // looking for its next tick walks every second, or every day,
            // of thousands of years: refused as written. (A day field of
            // `L`, `W` or `#` alone has no plain values and is fine.)
            let pattern = &cron.pattern;
            for (field, component) in [
                ("second", &pattern.seconds),
                ("minute", &pattern.minutes),
                ("hour", &pattern.hours),
                ("day", &pattern.days),
                ("month", &pattern.months),
                ("weekday", &pattern.days_of_week),
            ] {
                if component.values().is_empty() && !component.has_modifiers() {
                    return Err(TimesError::Cron {
                        expr: expr.clone(),
                        reason: format!("its {field} field matches no {field}"),
                    });
                }
            }
            return Ok(Self::Cron {
                cron: Box::new(cron),
                tz,
            });
        }
        if let Some(every) = &times.every {
            if every.len() > MAX_TEXT {
                return Err(TimesError::TooLong("every"));
            }
            let period = humantime::parse_duration(every).map_err(|e| TimesError::Every {
                every: every.clone(),
                reason: e.to_string(),
            })?;
            let period_ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX);
            if period_ms < MIN_PERIOD_MS {
                return Err(TimesError::TooOften(every.clone()));
            }
            return Ok(Self::Every {
                period_ms,
                anchor_ms,
            });
        }
        let at = times.at.as_deref().unwrap_or_default();
        if at.len() > MAX_TEXT {
            return Err(TimesError::TooLong("at"));
        }
        let at_ms = DateTime::parse_from_rfc3339(at)
            .map_err(|e| TimesError::At {
                at: at.to_string(),
                reason: e.to_string(),
            })?
            .timestamp_millis();
        Ok(Self::At { at_ms })
    }

    /// Reads `times` for a new schedule made at `now_ms`: also refused when
    /// no tick is still to come (a cron expression no date matches, an
    /// `at` in the past).
    pub fn parse_new(times: &ScheduleTimes, now_ms: i64) -> Result<Self, TimesError> {
        let when = Self::parse(times, now_ms)?;
        if when.next_after(now_ms).is_none() {
            return Err(match (&times.cron, &times.at) {
                (Some(expr), _) => TimesError::NeverFires(expr.clone()),
                (_, Some(at)) => TimesError::Past(at.clone()),
                _ => TimesError::NotOne("none"),
            });
        }
        Ok(when)
    }

    /// The first tick after `after_ms`, if there is one.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Self::Cron { cron, tz } => {
                // Whole seconds: a tick in the second `after_ms` is in is
                // not after it.
                let start =
                    tz.from_utc_datetime(&utc(after_ms.div_euclid(1000) * 1000)?.naive_utc());
                cron.find_next_occurrence(&start, false)
                    .ok()
                    .map(|t| t.timestamp_millis())
            }
            Self::Every {
                period_ms,
                anchor_ms,
            } => {
                let k = if after_ms < *anchor_ms {
                    1
                } else {
                    (after_ms - anchor_ms) / period_ms + 1
                };
                anchor_ms.checked_add(k.checked_mul(*period_ms)?)
            }
            Self::At { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
        }
    }

    /// The latest tick after `after_ms` and at or before `until_ms`.
    pub fn latest_in(&self, after_ms: i64, until_ms: i64) -> Option<i64> {
        let latest = match self {
            Self::Cron { cron, tz } => {
                let end = tz.from_utc_datetime(&utc(until_ms.div_euclid(1000) * 1000)?.naive_utc());
                cron.find_previous_occurrence(&end, true)
                    .ok()?
                    .timestamp_millis()
            }
            Self::Every {
                period_ms,
                anchor_ms,
            } => {
                let k = (until_ms.checked_sub(*anchor_ms)?) / period_ms;
                if k < 1 {
                    return None;
                }
                anchor_ms + k * period_ms
            }
            Self::At { at_ms } => *at_ms,
        };
        (latest > after_ms && latest <= until_ms).then_some(latest)
    }
}

fn utc(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// A unix-ms instant as RFC 3339 (UTC, milliseconds).
pub fn rfc3339(ms: i64) -> String {
    utc(ms).map_or_else(String::new, |t| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    })
}

/// Where a schedule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// roostctl or the control API: kept until removed.
    Api,
    /// The capsule's `schedules:`: replaced each time its route's session
    /// starts.
    Manifest,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Manifest => "manifest",
        }
    }

    pub fn parse(s: &str) -> Self {
        if s == "manifest" {
            Self::Manifest
        } else {
            Self::Api
        }
    }
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub id: String,
    pub route: String,
    pub name: String,
    pub origin: Origin,
    pub text: String,
    pub context_id: Option<String>,
    pub times: ScheduleTimes,
    pub missed: Missed,
    pub overlap: Overlap,
    pub paused: bool,
    /// When it was made (unix ms): where `every` counts from.
    pub created_ms: i64,
    /// The last tick fired or passed over (unix ms).
    pub last_tick_ms: Option<i64>,
    pub last_task_id: Option<String>,
    pub fired: u64,
    pub skipped: u64,
    pub last_error: Option<String>,
}

impl Schedule {
    /// When its ticks fall (`None` if what is stored no longer reads, which
    /// only a newer roostd's row could be).
    pub fn when(&self) -> Option<When> {
        When::parse(&self.times, self.created_ms).ok()
    }

    /// Where its next tick is looked for after.
    pub fn cursor_ms(&self) -> i64 {
        self.last_tick_ms.unwrap_or(self.created_ms)
    }

    /// The `messageId` of the task its tick at `tick_ms` fires: the same
    /// for every attempt at that tick, so the route's de-duplication keeps
    /// a second attempt from making a second task.
    pub fn message_id(&self, tick_ms: i64) -> String {
        format!("{}_{tick_ms}", self.id)
    }
}

/// Longest text a schedule's task carries.
const MAX_TEXT_BYTES: usize = 32 * 1024;
/// Longest context id.
const MAX_CONTEXT_BYTES: usize = 256;

/// A schedule's name: 1 to 63 of letters, digits, `-`, `_` and `.`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        return Ok(());
    }
    Err(format!(
        "schedule name '{}' must be 1 to 63 letters, digits, '-', '_' or '.'",
        name.chars().take(80).collect::<String>()
    ))
}

/// The text of a schedule's tasks and their context id.
pub fn check_text(text: &str, context_id: Option<&str>) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("a schedule's text is empty: give the message its tasks carry".into());
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "a schedule's text is {} bytes; at most {MAX_TEXT_BYTES}",
            text.len()
        ));
    }
    if let Some(context) = context_id
        && (context.is_empty()
            || context.len() > MAX_CONTEXT_BYTES
            || context.chars().any(char::is_control))
    {
        return Err(format!(
            "context id must be 1 to {MAX_CONTEXT_BYTES} bytes without control characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(
        cron: Option<&str>,
        tz: Option<&str>,
        every: Option<&str>,
        at: Option<&str>,
    ) -> ScheduleTimes {
        ScheduleTimes {
            cron: cron.map(str::to_string),
            tz: tz.map(str::to_string),
            every: every.map(str::to_string),
            at: at.map(str::to_string),
        }
    }

    const MONDAY_2026_11_30: i64 = 1_795_996_800_000; // 00:00 UTC

    #[test]
    fn cron_in_a_time_zone() {
        let when = When::parse(
            &times(Some("0 7 * * 1-5"), Some("Europe/Berlin"), None, None),
            0,
        )
        .expect("reads");
        // 07:00 in Berlin is 06:00 UTC in winter.
        let next = when.next_after(MONDAY_2026_11_30).expect("fires");
        assert_eq!(rfc3339(next), "2026-11-30T06:00:00.000Z");
        let after = when.next_after(next).expect("fires again");
        assert_eq!(rfc3339(after), "2026-12-01T06:00:00.000Z");
        // Friday's tick, then Monday's.
        let friday = when
            .next_after(MONDAY_2026_11_30 + 4 * 86_400_000)
            .expect("friday");
        assert_eq!(rfc3339(friday), "2026-12-04T06:00:00.000Z");
        assert_eq!(
            rfc3339(when.next_after(friday).expect("monday")),
            "2026-12-07T06:00:00.000Z"
        );
        // The latest of the ticks missed between two instants.
        let latest = when
            .latest_in(MONDAY_2026_11_30, MONDAY_2026_11_30 + 3 * 86_400_000 + 1)
            .expect("one passed");
        assert_eq!(rfc3339(latest), "2026-12-02T06:00:00.000Z");
        assert_eq!(when.latest_in(latest, latest + 1000), None);
    }

    #[test]
    fn every_counts_from_its_anchor() {
        let when = When::parse(&times(None, None, Some("10m"), None), 1_000).expect("reads");
        assert_eq!(when.next_after(0), Some(601_000));
        assert_eq!(when.next_after(601_000), Some(1_201_000));
        assert_eq!(when.latest_in(0, 1_300_000), Some(1_201_000));
        assert_eq!(when.latest_in(1_201_000, 1_300_000), None);
        assert_eq!(when.latest_in(0, 500_000), None);
    }

    #[test]
    fn bad_times_say_what_to_fix() {
        let now = MONDAY_2026_11_30;
        let bad = |t: ScheduleTimes| When::parse_new(&t, now).expect_err("refused").to_string();
        assert!(bad(times(Some("0 0 30 2 *"), None, None, None)).contains("never fires"));
        assert!(bad(times(Some("0 7 * *"), None, None, None)).contains("not valid"));
        assert!(
            bad(times(Some("0 7 * * *"), Some("Mars/Olympus"), None, None))
                .contains("does not exist")
        );
        assert!(bad(times(None, None, None, Some("2020-01-01T00:00:00Z"))).contains("in the past"));
        assert!(bad(times(None, None, None, Some("tomorrow"))).contains("RFC 3339"));
        assert!(bad(times(None, None, Some("0s"), None)).contains("shorter than 1 s"));
        assert!(bad(times(None, None, Some("often"), None)).contains("not a period"));
        assert!(bad(times(Some("* * * * *"), None, Some("1m"), None)).contains("exactly one"));
        assert!(bad(times(None, None, None, None)).contains("exactly one"));
        assert!(bad(times(None, Some("UTC"), Some("1m"), None)).contains("cron only"));
        // A time field that matches nothing is refused as it is read (the
        // fuzzer's find: looking for its next tick took 12 s), naming it.
        for (expr, field) in [
            (", * * * * *", "second"),
            ("37 , * * 1 *", "minute"),
            ("37 * , * * *", "hour"),
            ("0 0 1 , *", "month"),
            ("0 0 , * *", "day"),
            ("5 21 2 9 +", "weekday"),
            ("0 0 29 2 +", "weekday"),
        ] {
            let said = When::parse(&times(Some(expr), None, None, None), now)
                .expect_err(expr)
                .to_string();
            assert!(
                said.contains(&format!("its {field} field matches no")),
                "{said}"
            );
        }
        // The control: a list with every item there reads.
        for fires in [
            "0 5,35 8,20 * * *",
            "0 0 L 2 *",
            "0 0 * * 5L",
            "0 0 15W * *",
            "0 0 13 * +5",
        ] {
            When::parse_new(&times(Some(fires), None, None, None), now).expect(fires);
        }
        let at = When::parse_new(
            &times(None, None, None, Some("2026-12-03T07:00:00+01:00")),
            now,
        )
        .expect("to come");
        assert_eq!(
            at.next_after(now).map(rfc3339).as_deref(),
            Some("2026-12-03T06:00:00.000Z")
        );
    }
}
