//! A bound on how often one kind of warning is logged.
//!
//! Some warnings are caused by clients (a refused uid, a connection past the
//! cap, a call past its limit): without a bound, a local client could fill
//! the journal with them, one connection at a time.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines of one kind logged per [`WINDOW`]; the rest are counted.
const LINES_PER_WINDOW: u32 = 10;
const WINDOW: Duration = Duration::from_secs(60);

/// A budget of [`LINES_PER_WINDOW`] lines a minute for one kind of warning.
#[derive(Debug)]
pub struct LogBudget(Mutex<Window>);

#[derive(Debug)]
struct Window {
    started: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

/// How many lines the budget held back since the last one logged; displays
/// as nothing when none were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suppressed(u64);

impl fmt::Display for Suppressed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, " ({n} similar messages suppressed)"),
        }
    }
}

impl LogBudget {
    pub const fn new() -> Self {
        Self(Mutex::new(Window {
            started: None,
            logged: 0,
            suppressed: 0,
        }))
    }

    /// `Some` if one more line may be logged now, carrying the count of
    /// lines held back before it; `None` if this one is to be held back.
    pub fn allow(&self) -> Option<Suppressed> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<Suppressed> {
        let mut window = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if window.started.is_none_or(|started| now >= started + WINDOW) {
            window.started = Some(now);
            window.logged = 0;
        }
        if window.logged < LINES_PER_WINDOW {
            window.logged += 1;
            Some(Suppressed(std::mem::take(&mut window.suppressed)))
        } else {
            window.suppressed += 1;
            None
        }
    }
}

impl Default for LogBudget {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_ten_lines_a_minute_and_counts_the_rest() {
        let budget = LogBudget::new();
        let start = Instant::now();
        for _ in 0..LINES_PER_WINDOW {
            assert_eq!(budget.allow_at(start), Some(Suppressed(0)));
        }
        for _ in 0..1000 {
            assert_eq!(budget.allow_at(start + Duration::from_secs(1)), None);
        }
        let next = budget.allow_at(start + WINDOW).unwrap();
        assert_eq!(next.to_string(), " (1000 similar messages suppressed)");
    }
}
