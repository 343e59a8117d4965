//! Schedules: reading what a person or a model wrote, checking it at once, and computing runs.

use engram_core::store::jobs::{AfterRun, Job, NewJob, ScheduleRecord};

use super::job::{JobPayload, MissedPolicy};
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::cron::{CronError, CronExpr, resolve_civil};

/// The shortest `every` interval.
pub const MIN_INTERVAL: SignedDuration = SignedDuration::from_secs(1);

/// Why a schedule was refused. Each message is one line naming the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression is malformed or never matches.
    #[error(transparent)]
    Cron(#[from] CronError),
    /// The time zone is not in the time zone database.
    #[error(
        "unknown time zone '{0}': use an IANA name such as Europe/Berlin, America/New_York or UTC"
    )]
    UnknownZone(String),
    /// The system's zone has no IANA name to store.
    #[error(
        "cannot tell the system time zone's IANA name; pass --tz NAME or set [scheduler] timezone in config.toml"
    )]
    NoSystemZone,
    /// The interval is not a duration, or too short.
    #[error(
        "cannot use '{0}' as an interval: give seconds (90) or a duration such as 10m, 1h30m or 1d (at least 1s)"
    )]
    BadInterval(String),
    /// The time is not one we can read.
    #[error(
        "cannot read '{0}' as a time: use RFC 3339 (2025-06-01T09:00:00+02:00), a local time (2025-06-01 09:00, read in the job's time zone), 'now' or 'in 20m'"
    )]
    BadTime(String),
    /// A one-shot time that has already passed.
    #[error("the time {0} has already passed; give a time in the future")]
    InThePast(String),
    /// The schedule has no run left (e.g. a cron expression that matches nothing in ten years).
    #[error("the schedule '{0}' has no run in the next ten years, so it would never fire")]
    NeverFires(String),
    /// More than one (or none) of --cron, --every and --at.
    #[error("give exactly one schedule: a cron expression, an interval (every) or a time (at)")]
    Ambiguous,
    /// A required field is empty.
    #[error("{0}")]
    Invalid(String),
}

/// How a schedule was written, before it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleInput {
    /// A cron expression.
    Cron(String),
    /// An interval: seconds or a duration such as `1h30m`.
    Every(String),
    /// A time: RFC 3339, a local date-time in the job's zone, or `in 20m`.
    At(String),
}

impl ScheduleInput {
    /// Exactly one of the three, or [`ScheduleError::Ambiguous`].
    pub fn one_of(
        cron: Option<String>,
        every: Option<String>,
        at: Option<String>,
    ) -> Result<Self, ScheduleError> {
        match (cron, every, at) {
            (Some(c), None, None) => Ok(Self::Cron(c)),
            (None, Some(e), None) => Ok(Self::Every(e)),
            (None, None, Some(a)) => Ok(Self::At(a)),
            _ => Err(ScheduleError::Ambiguous),
        }
    }
}

/// A checked schedule, ready to compute runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// Once, at this instant.
    At(Timestamp),
    /// On the grid `anchor + k * interval`.
    Every {
        /// The interval.
        interval: SignedDuration,
        /// A point of the grid.
        anchor: Timestamp,
    },
    /// At the wall-clock times the expression names.
    Cron(CronExpr),
}

/// A schedule with its time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct ZonedSchedule {
    /// When.
    pub schedule: Schedule,
    /// The zone cron times are read in, and all times shown in.
    pub tz: TimeZone,
    /// The zone's IANA name.
    pub tz_name: String,
}

/// Resolves a time zone: the one given, else the configured default, else the system's.
pub fn resolve_zone(
    given: Option<&str>,
    default: Option<&str>,
) -> Result<(TimeZone, String), ScheduleError> {
    if let Some(name) = given.or(default) {
        let name = name.trim();
        return TimeZone::get(name)
            .map(|tz| (tz, name.to_string()))
            .map_err(|_| ScheduleError::UnknownZone(name.to_string()));
    }
    let system = TimeZone::try_system().map_err(|_| ScheduleError::NoSystemZone)?;
    let name = system
        .iana_name()
        .ok_or(ScheduleError::NoSystemZone)?
        .to_string();
    Ok((system, name))
}

/// A zone by its stored name.
pub fn zone_named(name: &str) -> Result<TimeZone, ScheduleError> {
    TimeZone::get(name).map_err(|_| ScheduleError::UnknownZone(name.to_string()))
}

/// Reads a duration for `every`.
pub fn parse_interval(text: &str) -> Result<SignedDuration, ScheduleError> {
    let interval = engram_core::time::parse_duration(text)
        .map_err(|_| ScheduleError::BadInterval(text.to_string()))?;
    if interval < MIN_INTERVAL {
        return Err(ScheduleError::BadInterval(text.to_string()));
    }
    Ok(interval)
}

/// Reads a one-shot time: RFC 3339 with an offset, a local date-time or date read in `tz`
/// (clock changes resolved as for cron), `now`, or `in DURATION` / `+DURATION` from `now`.
pub fn parse_at(text: &str, now: Timestamp, tz: &TimeZone) -> Result<Timestamp, ScheduleError> {
    let s = text.trim();
    let bad = || ScheduleError::BadTime(text.to_string());
    if s.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    let relative = s
        .strip_prefix("in ")
        .or_else(|| s.strip_prefix('+'))
        .map(str::trim);
    if let Some(rest) = relative {
        let by = engram_core::time::parse_duration(rest).map_err(|_| bad())?;
        return now.checked_add(by).map_err(|_| bad());
    }
    if let Ok(ts) = s.parse::<Timestamp>() {
        return Ok(ts);
    }
    let civil = match s.parse::<DateTime>() {
        Ok(dt) => dt,
        Err(_) => s
            .parse::<Date>()
            .map_err(|_| bad())?
            .to_datetime(jiff::civil::Time::midnight()),
    };
    resolve_civil(civil, tz).ok_or_else(bad)
}

impl ZonedSchedule {
    /// Checks what was written and builds the schedule; `now` anchors `every` grids and
    /// resolves relative times.
    pub fn from_input(
        input: &ScheduleInput,
        tz: TimeZone,
        tz_name: String,
        now: Timestamp,
    ) -> Result<Self, ScheduleError> {
        let schedule = match input {
            ScheduleInput::Cron(expr) => Schedule::Cron(CronExpr::parse(expr)?),
            ScheduleInput::Every(text) => Schedule::Every {
                interval: parse_interval(text)?,
                anchor: Timestamp::from_millisecond(now.as_millisecond()).unwrap_or(now),
            },
            ScheduleInput::At(text) => {
                let at = parse_at(text, now, &tz)?;
                // A second of slack, so "now" itself is accepted.
                if at.as_millisecond() < now.as_millisecond() - 1_000 {
                    return Err(ScheduleError::InThePast(
                        at.to_zoned(tz.clone())
                            .strftime("%Y-%m-%d %H:%M:%S %Z")
                            .to_string(),
                    ));
                }
                Schedule::At(at)
            }
        };
        let zoned = Self {
            schedule,
            tz,
            tz_name,
        };
        Ok(zoned)
    }

    /// The schedule of a stored job.
    pub fn of_job(job: &Job) -> Result<Self, ScheduleError> {
        let tz = zone_named(&job.tz)?;
        let schedule = match &job.schedule {
            ScheduleRecord::At { at_ms } => Schedule::At(millis(*at_ms)),
            ScheduleRecord::Every {
                every_ms,
                anchor_ms,
            } => Schedule::Every {
                interval: SignedDuration::from_millis(*every_ms),
                anchor: millis(*anchor_ms),
            },
            ScheduleRecord::Cron { expr } => Schedule::Cron(CronExpr::parse(expr)?),
        };
        Ok(Self {
            schedule,
            tz,
            tz_name: job.tz.clone(),
        })
    }

    /// The stored form.
    pub fn to_record(&self) -> ScheduleRecord {
        match &self.schedule {
            Schedule::At(at) => ScheduleRecord::At {
                at_ms: at.as_millisecond(),
            },
            Schedule::Every { interval, anchor } => ScheduleRecord::Every {
                every_ms: interval.as_millis() as i64,
                anchor_ms: anchor.as_millisecond(),
            },
            Schedule::Cron(expr) => ScheduleRecord::Cron {
                expr: expr.as_str().to_string(),
            },
        }
    }

    /// The first run strictly after `after`, if any. A one-shot time is returned while it
    /// has not passed `after` (it may equal it).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        match &self.schedule {
            Schedule::At(at) => (*at >= after).then_some(*at),
            Schedule::Every { interval, anchor } => next_on_grid(*anchor, *interval, after),
            Schedule::Cron(expr) => expr.next_after(after, &self.tz),
        }
    }

    /// The first run of a new or re-enabled job: a one-shot time (which may be `now`), else
    /// the first scheduled time after `now` (an `every` job first runs one interval after it
    /// was added). Refuses a schedule that never fires.
    pub fn first_run(&self, now: Timestamp) -> Result<Timestamp, ScheduleError> {
        self.next_after(now).ok_or_else(|| match &self.schedule {
            Schedule::At(at) => ScheduleError::InThePast(at.to_string()),
            Schedule::Every { interval, .. } => {
                ScheduleError::NeverFires(format!("every {interval:#}"))
            }
            Schedule::Cron(expr) => ScheduleError::NeverFires(expr.as_str().to_string()),
        })
    }

    /// A short description: `cron 0 9 * * * (Europe/Berlin)`, `every 1h30m`, `at 2025-06-01 09:00 CEST`.
    pub fn describe(&self) -> String {
        match &self.schedule {
            Schedule::At(at) => format!("at {}", self.show(*at)),
            Schedule::Every { interval, .. } => format!("every {}", friendly_duration(*interval)),
            Schedule::Cron(expr) => format!("cron {} ({})", expr.as_str(), self.tz_name),
        }
    }

    /// An instant as a wall-clock time in this schedule's zone, with the zone's abbreviation.
    pub fn show(&self, at: Timestamp) -> String {
        at.to_zoned(self.tz.clone())
            .strftime("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    }
}

/// The first grid point `anchor + k * interval` strictly after `after`. Computed from the
/// anchor, never from when a run finished, so runs do not drift.
pub fn next_on_grid(
    anchor: Timestamp,
    interval: SignedDuration,
    after: Timestamp,
) -> Option<Timestamp> {
    let step = interval.as_millis();
    if step <= 0 {
        return None;
    }
    // Grid points are whole milliseconds, so "after `after`" is "after its whole millisecond".
    let anchor_ms = anchor.as_millisecond() as i128;
    let after_ms = after.as_millisecond() as i128;
    let k = if after_ms < anchor_ms {
        0
    } else {
        (after_ms - anchor_ms).div_euclid(step) + 1
    };
    i64::try_from(anchor_ms + k * step)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
}

/// A stored millisecond time.
pub fn millis(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// `1h30m`, `45s`, `2d`: how people write intervals.
pub fn friendly_duration(d: SignedDuration) -> String {
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if out.is_empty() {
        out.push_str(&format!("{}ms", d.as_millis()));
    }
    out
}

/// A job to add, as a person or a model describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// A name for people.
    pub name: String,
    /// The message the agent gets.
    pub message: String,
    /// When it runs.
    pub schedule: ScheduleInput,
    /// Its zone (default: the configured one, else the system's).
    pub tz: Option<String>,
    /// Its session (default `cron:<id>`).
    pub session_key: Option<String>,
    /// What to do about missed runs.
    pub missed: MissedPolicy,
    /// Keep a one-shot job (disabled) after it ran instead of deleting it.
    pub keep_after_run: bool,
    /// Where to deliver the answer, if anywhere.
    pub deliver_to: Option<(String, String)>,
}

impl JobRequest {
    /// A job with the defaults: default zone and session, run-once for missed runs, one-shots
    /// deleted after running.
    pub fn new(
        name: impl Into<String>,
        message: impl Into<String>,
        schedule: ScheduleInput,
    ) -> Self {
        Self {
            name: name.into(),
            message: message.into(),
            schedule,
            tz: None,
            session_key: None,
            missed: MissedPolicy::RunOnce,
            keep_after_run: false,
            deliver_to: None,
        }
    }

    /// Checks everything and builds the job to store, with its first run.
    pub fn prepare(
        &self,
        now: Timestamp,
        default_zone: Option<&str>,
    ) -> Result<(NewJob, ZonedSchedule), ScheduleError> {
        if self.name.trim().is_empty() {
            return Err(ScheduleError::Invalid("a job needs a name".into()));
        }
        if self.message.trim().is_empty() {
            return Err(ScheduleError::Invalid(
                "a job needs a message (what the agent should do)".into(),
            ));
        }
        if let Some(session) = &self.session_key
            && (session.trim().is_empty() || session.chars().any(char::is_control))
        {
            return Err(ScheduleError::Invalid(
                "a session key must be non-empty text on one line".into(),
            ));
        }
        let (tz, tz_name) = resolve_zone(self.tz.as_deref(), default_zone)?;
        let zoned = ZonedSchedule::from_input(&self.schedule, tz, tz_name, now)?;
        let first = zoned.first_run(now)?;
        let (channel, to) = match &self.deliver_to {
            Some((channel, to)) => (Some(channel.clone()), Some(to.clone())),
            None => (None, None),
        };
        let job = NewJob {
            name: self.name.trim().to_string(),
            schedule: zoned.to_record(),
            tz: zoned.tz_name.clone(),
            payload: JobPayload {
                message: self.message.clone(),
                deliver: self.deliver_to.is_some(),
                channel,
                to,
            }
            .to_record(),
            session_key: self.session_key.clone(),
            missed: self.missed.as_str().to_string(),
            delete_after_run: matches!(zoned.schedule, Schedule::At(_)) && !self.keep_after_run,
            next_run_at_ms: first.as_millisecond(),
        };
        Ok((job, zoned))
    }
}

/// What becomes of a job after a scheduled run that finished at `finished`: one-shots are
/// deleted or disabled; others run next at the first scheduled time after the run finished
/// (occurrences that passed during a long run are skipped, never queued).
pub fn after_scheduled_run(job: &Job, finished: Timestamp) -> AfterRun {
    match ZonedSchedule::of_job(job) {
        Ok(zoned) => match zoned.schedule {
            Schedule::At(_) if job.delete_after_run => AfterRun::Delete,
            Schedule::At(_) => AfterRun::Disable,
            _ => AfterRun::Reschedule(zoned.next_after(finished).map(|t| t.as_millisecond())),
        },
        // A schedule this build cannot read any more: stop the job rather than guess.
        Err(_) => AfterRun::Reschedule(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn every_stays_on_its_grid_whenever_runs_finish() {
        let anchor = ts("2024-01-01T00:00:00Z");
        let hour = SignedDuration::from_hours(1);
        // A run scheduled at 01:00 that finished at 01:07 runs next at 02:00, not 02:07.
        assert_eq!(
            next_on_grid(anchor, hour, ts("2024-01-01T01:07:00Z")),
            Some(ts("2024-01-01T02:00:00Z"))
        );
        // Exactly on a grid point: the next one.
        assert_eq!(
            next_on_grid(anchor, hour, ts("2024-01-01T02:00:00Z")),
            Some(ts("2024-01-01T03:00:00Z"))
        );
        // A sub-millisecond past a grid point is still after it.
        assert_eq!(
            next_on_grid(anchor, hour, ts("2024-01-01T01:59:59.9999Z")),
            Some(ts("2024-01-01T02:00:00Z"))
        );
        // Before the anchor: the anchor is the first point.
        assert_eq!(
            next_on_grid(anchor, hour, ts("2023-12-31T23:00:00Z")),
            Some(anchor)
        );
    }

    #[test]
    fn a_thousand_runs_do_not_drift() {
        let anchor = ts("2024-01-01T00:00:00Z");
        let every = SignedDuration::from_secs(90);
        let mut scheduled = anchor;
        for _ in 0..1000 {
            // Each run takes 7 s; the next one is still on the 90 s grid.
            let finished = scheduled.checked_add(SignedDuration::from_secs(7)).unwrap();
            scheduled = next_on_grid(anchor, every, finished).unwrap();
        }
        assert_eq!(
            scheduled,
            anchor
                .checked_add(SignedDuration::from_secs(90_000))
                .unwrap()
        );
    }

    #[test]
    fn at_times_are_read_in_the_jobs_zone() {
        let now = ts("2024-03-01T00:00:00Z");
        let ny = TimeZone::get("America/New_York").unwrap();
        assert_eq!(
            parse_at("2024-03-10 09:00", now, &ny).unwrap(),
            ts("2024-03-10T13:00:00Z")
        );
        // 02:30 does not exist on 2024-03-10 in New York: the end of the gap.
        assert_eq!(
            parse_at("2024-03-10T02:30", now, &ny).unwrap(),
            ts("2024-03-10T07:00:00Z")
        );
        assert_eq!(
            parse_at("2024-03-10T02:30:00+01:00", now, &ny).unwrap(),
            ts("2024-03-10T01:30:00Z")
        );
        assert_eq!(
            parse_at("in 20m", now, &ny).unwrap(),
            ts("2024-03-01T00:20:00Z")
        );
        assert_eq!(
            parse_at("+1h", now, &ny).unwrap(),
            ts("2024-03-01T01:00:00Z")
        );
        assert_eq!(
            parse_at("2024-03-02", now, &ny).unwrap(),
            ts("2024-03-02T05:00:00Z")
        );
        assert!(matches!(
            parse_at("tomorrowish", now, &ny),
            Err(ScheduleError::BadTime(_))
        ));
    }

    fn request(schedule: ScheduleInput) -> JobRequest {
        JobRequest::new("n", "m", schedule)
    }

    #[test]
    fn bad_schedules_fail_when_added() {
        let now = ts("2024-03-01T00:00:00Z");
        let utc = Some("UTC");
        let cases: Vec<(ScheduleInput, Option<&str>, &str)> = vec![
            (
                ScheduleInput::Cron("0 0 30 2 *".into()),
                None,
                "never occurs in February",
            ),
            (
                ScheduleInput::Cron("61 * * * *".into()),
                None,
                "out of range",
            ),
            (
                ScheduleInput::Cron("0 9 * * *".into()),
                Some("Mars/Olympus"),
                "unknown time zone 'Mars/Olympus'",
            ),
            (
                ScheduleInput::Every("0".into()),
                None,
                "cannot use '0' as an interval",
            ),
            (
                ScheduleInput::Every("soon".into()),
                None,
                "cannot use 'soon'",
            ),
            (
                ScheduleInput::At("2024-02-01T00:00:00Z".into()),
                None,
                "has already passed",
            ),
            (
                ScheduleInput::At("someday".into()),
                None,
                "cannot read 'someday' as a time",
            ),
        ];
        for (input, zone, want) in cases {
            let mut req = request(input.clone());
            req.tz = zone.map(str::to_string);
            let err = req.prepare(now, utc).unwrap_err().to_string();
            assert!(err.contains(want), "{input:?}: {err}");
        }
        let mut req = request(ScheduleInput::Every("1m".into()));
        req.message = " ".into();
        assert!(req.prepare(now, utc).is_err());
    }

    #[test]
    fn prepared_jobs_carry_zone_first_run_and_one_shot_rules() {
        let now = ts("2024-03-01T12:00:00Z");
        let mut req = request(ScheduleInput::Cron("0 9 * * *".into()));
        req.tz = Some("Europe/Berlin".into());
        let (job, _) = req.prepare(now, Some("UTC")).unwrap();
        assert_eq!(job.tz, "Europe/Berlin");
        assert_eq!(
            job.next_run_at_ms,
            ts("2024-03-02T08:00:00Z").as_millisecond()
        );
        assert!(!job.delete_after_run);
        let (job, _) = request(ScheduleInput::At("in 1h".into()))
            .prepare(now, Some("UTC"))
            .unwrap();
        assert!(job.delete_after_run);
        assert_eq!(job.tz, "UTC");
        let (job, _) = request(ScheduleInput::Every("30".into()))
            .prepare(now, Some("Asia/Tokyo"))
            .unwrap();
        assert_eq!(
            job.next_run_at_ms,
            ts("2024-03-01T12:00:30Z").as_millisecond()
        );
        assert!(matches!(
            ScheduleInput::one_of(Some("x".into()), Some("y".into()), None),
            Err(ScheduleError::Ambiguous)
        ));
    }

    #[test]
    fn descriptions_use_the_jobs_zone() {
        let now = ts("2024-07-01T12:00:00Z");
        let mut req = request(ScheduleInput::At("2024-07-02 09:00".into()));
        req.tz = Some("Europe/Berlin".into());
        let (_, zoned) = req.prepare(now, None).unwrap();
        assert_eq!(zoned.describe(), "at 2024-07-02 09:00:00 CEST");
        let (_, zoned) = request(ScheduleInput::Every("5400".into()))
            .prepare(now, Some("UTC"))
            .unwrap();
        assert_eq!(zoned.describe(), "every 1h30m");
    }

    proptest! {
        #[test]
        fn grid_points_are_strictly_later_and_on_the_grid(
            anchor in 0i64..4_000_000_000_000,
            step in 1_000i64..100_000_000,
            offset in -10_000_000_000i64..10_000_000_000,
        ) {
            let anchor_ts = Timestamp::from_millisecond(anchor).unwrap();
            let after = Timestamp::from_millisecond((anchor + offset).max(0)).unwrap();
            let next = next_on_grid(anchor_ts, SignedDuration::from_millis(step), after).unwrap();
            prop_assert!(next > after);
            prop_assert_eq!((next.as_millisecond() - anchor).rem_euclid(step), 0);
            if next > anchor_ts {
                prop_assert!(next.as_millisecond() - step <= after.as_millisecond());
            }
        }
    }
}
