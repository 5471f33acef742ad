//! Restart backoff: exponential from an initial delay, capped, reset after a run
//! that stayed up long enough, with a give-up limit.

use std::time::Duration;

use crate::config::RestartConfig;

/// Counts consecutive restarts of one session.
#[derive(Debug)]
pub(crate) struct Backoff {
    config: RestartConfig,
    consecutive: u32,
}

/// What supervision should do after a run ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Retry {
    RestartAfter(Duration),
    GiveUp { restarts: u32 },
}

impl Backoff {
    pub(crate) fn new(config: RestartConfig) -> Self {
        Self {
            config,
            consecutive: 0,
        }
    }

    /// Decides after a run that lasted `uptime`.
    pub(crate) fn next(&mut self, uptime: Duration) -> Retry {
        if uptime >= Duration::from_secs(self.config.reset_after_secs) {
            self.consecutive = 0;
        }
        if self.consecutive >= self.config.max_restarts {
            return Retry::GiveUp {
                restarts: self.consecutive,
            };
        }
        let exponent = i32::try_from(self.consecutive).unwrap_or(i32::MAX);
        let delay_ms =
            self.config.initial_backoff_ms as f64 * self.config.multiplier.powi(exponent);
        let cap_ms = (self.config.max_backoff_secs * 1000) as f64;
        self.consecutive += 1;
        Retry::RestartAfter(Duration::from_millis(delay_ms.min(cap_ms) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RestartConfig {
        RestartConfig {
            initial_backoff_ms: 100,
            multiplier: 1.5,
            max_backoff_secs: 1,
            reset_after_secs: 30,
            max_restarts: 8,
        }
    }

    #[test]
    fn grows_caps_and_gives_up() {
        let mut b = Backoff::new(config());
        let delays: Vec<Retry> = (0..9).map(|_| b.next(Duration::ZERO)).collect();
        let ms = |n: &Retry| match n {
            Retry::RestartAfter(d) => d.as_millis(),
            Retry::GiveUp { .. } => 0,
        };
        assert_eq!(ms(&delays[0]), 100);
        assert_eq!(ms(&delays[1]), 150);
        assert_eq!(ms(&delays[2]), 225);
        assert_eq!(ms(&delays[7]), 1000, "capped at max_backoff_secs");
        assert_eq!(delays[8], Retry::GiveUp { restarts: 8 });
    }

    #[test]
    fn a_long_run_resets_the_count() {
        let mut b = Backoff::new(config());
        for _ in 0..5 {
            b.next(Duration::ZERO);
        }
        assert_eq!(
            b.next(Duration::from_secs(31)),
            Retry::RestartAfter(Duration::from_millis(100))
        );
    }
}
