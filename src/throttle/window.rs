//! Run windows (FLT-3): the UTC hours in which a backfill's batches may
//! start.
//!
//! A window is a start hour and an end hour of the UTC day, the end
//! exclusive; one whose end is not after its start wraps past midnight
//! (22 to 6 is ten hours at night). Equal hours would make a window that
//! never opens, so they are refused. Outside its window a runner's gate
//! holds the claim back as a throttle condition (`outside_window`) that
//! names the next opening; it gives back the claim's open batch
//! transaction meanwhile, like any throttle.

use chrono::{DateTime, Duration, DurationRound, Timelike, Utc};
use std::fmt;

/// A run window: batches start only from `start_hour:00` to
/// `end_hour:00` UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunWindow {
    start_hour: u8,
    end_hour: u8,
}

/// Why a window is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// An hour outside 0..=23.
    #[error("a run window's hours are 0 to 23 (UTC), got {0}")]
    Hour(u64),
    /// Equal start and end hours: a window that can never open.
    #[error(
        "a run window from {0}:00 to {0}:00 UTC never opens: its end must differ from its start"
    )]
    NeverOpens(u8),
}

impl RunWindow {
    /// The window from `start_hour` to `end_hour` (UTC, end exclusive,
    /// wrapping past midnight when the end is not after the start).
    pub fn new(start_hour: u64, end_hour: u64) -> Result<RunWindow, WindowError> {
        let hour = |h: u64| {
            u8::try_from(h)
                .ok()
                .filter(|h| *h < 24)
                .ok_or(WindowError::Hour(h))
        };
        let (start_hour, end_hour) = (hour(start_hour)?, hour(end_hour)?);
        if start_hour == end_hour {
            return Err(WindowError::NeverOpens(start_hour));
        }
        Ok(RunWindow {
            start_hour,
            end_hour,
        })
    }

    /// The start hour (UTC).
    pub fn start_hour(&self) -> u8 {
        self.start_hour
    }

    /// The end hour (UTC, exclusive).
    pub fn end_hour(&self) -> u8 {
        self.end_hour
    }

    /// Whether a batch may start at `at`.
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        let hour = u8::try_from(at.hour()).unwrap_or(0);
        if self.start_hour < self.end_hour {
            (self.start_hour..self.end_hour).contains(&hour)
        } else {
            hour >= self.start_hour || hour < self.end_hour
        }
    }

    /// The next instant at or after `at` at which the window is open.
    pub fn next_opening(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        if self.contains(at) {
            return at;
        }
        let hour_start = at.duration_trunc(Duration::hours(1)).unwrap_or(at);
        let hours = (i64::from(self.start_hour) - i64::from(at.hour()) + 24) % 24;
        hour_start + Duration::hours(hours)
    }
}

impl fmt::Display for RunWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:00-{:02}:00 UTC", self.start_hour, self.end_hour)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(hour: u32, minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 5, hour, minute, 0).unwrap()
    }

    #[test]
    fn flt03_a_window_holds_its_hours_and_wraps_past_midnight() {
        let day = RunWindow::new(9, 17).unwrap();
        assert!(day.contains(at(9, 0)) && day.contains(at(16, 59)));
        assert!(!day.contains(at(17, 0)) && !day.contains(at(8, 59)));
        assert_eq!(day.next_opening(at(18, 30)), at(9, 0) + Duration::days(1));
        assert_eq!(day.next_opening(at(3, 10)), at(9, 0));
        assert_eq!(day.next_opening(at(10, 0)), at(10, 0));
        let night = RunWindow::new(22, 6).unwrap();
        assert!(night.contains(at(23, 0)) && night.contains(at(0, 0)) && night.contains(at(5, 59)));
        assert!(!night.contains(at(6, 0)) && !night.contains(at(21, 59)));
        assert_eq!(night.next_opening(at(12, 45)), at(22, 0));
        assert_eq!(night.to_string(), "22:00-06:00 UTC");
    }

    #[test]
    fn flt03_a_window_that_never_opens_or_has_no_such_hour_is_refused() {
        assert_eq!(RunWindow::new(5, 5), Err(WindowError::NeverOpens(5)));
        assert_eq!(RunWindow::new(24, 5), Err(WindowError::Hour(24)));
        assert_eq!(RunWindow::new(0, 99), Err(WindowError::Hour(99)));
    }
}
