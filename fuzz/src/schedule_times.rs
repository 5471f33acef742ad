//! A schedule's times as an operator or a manifest writes them: a cron
//! expression with its time zone, a period, an instant. Beyond "no panic":
//! the next tick after an instant is after it, the latest tick in a window
//! is inside it, and the next tick is the latest one up to itself.

use roostd::schedules::model::{ScheduleTimes, When};

const NOW: i64 = 1_796_380_918_000;

/// One input.
pub fn run(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (first, second) = text.split_once('\n').unwrap_or((text, ""));
    let owned = |s: &str| Some(s.to_string());
    let times = match kind % 4 {
        0 => ScheduleTimes {
            cron: owned(first),
            ..ScheduleTimes::default()
        },
        1 => ScheduleTimes {
            cron: owned(first),
            tz: owned(second),
            ..ScheduleTimes::default()
        },
        2 => ScheduleTimes {
            every: owned(first),
            ..ScheduleTimes::default()
        },
        _ => ScheduleTimes {
            at: owned(first),
            ..ScheduleTimes::default()
        },
    };
    // What roostd keeps: a schedule with a tick still to come. One that
    // never fires is refused after one walk of croner's search (a bounded
    // few thousand years, ~40 ms at most outside the sanitizer, which
    // makes it seconds: walked again below it would only time out).
    let Ok(when) = When::parse_new(&times, NOW) else {
        return;
    };
    for after in [NOW, NOW + 999, i64::MIN / 4, i64::MAX / 4] {
        if let Some(next) = when.next_after(after) {
            assert!(next > after, "{times:?}: {next} after {after}");
            assert_eq!(when.latest_in(after, next), Some(next), "{times:?}");
        }
    }
    if let Some(latest) = when.latest_in(NOW - 86_400_000, NOW) {
        assert!(
            latest > NOW - 86_400_000 && latest <= NOW,
            "{times:?}: {latest}"
        );
    }
}
