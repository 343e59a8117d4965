//! Time as a dependency: production code asks a [`Clock`], tests hand in a [`FixedClock`].

use std::fmt::Debug;
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync + Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to; for tests that travel in time.
#[derive(Debug)]
pub struct FixedClock {
    now: Mutex<Timestamp>,
}

impl FixedClock {
    /// A clock stopped at `now`.
    pub fn new(now: Timestamp) -> Self {
        Self {
            now: Mutex::new(now),
        }
    }

    /// Moves the clock to `now`.
    pub fn set(&self, now: Timestamp) {
        *self.lock() = now;
    }

    /// Moves the clock forward (or backward, for a negative duration).
    pub fn advance(&self, by: SignedDuration) {
        let mut guard = self.lock();
        *guard = guard.saturating_add(by).unwrap_or(*guard);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Timestamp> {
        // A poisoned lock still holds a valid timestamp.
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        *self.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_clock_moves_only_when_told() {
        let start: Timestamp = "2024-02-29T12:00:00Z".parse().unwrap();
        let clock = FixedClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(SignedDuration::from_hours(24));
        assert_eq!(clock.now().to_string(), "2024-03-01T12:00:00Z");
    }
}
