//! Cron expressions: parsing, validation and the next matching instant in a time zone.
//!
//! Accepted forms:
//! - five fields `minute hour day-of-month month day-of-week`, or six with a leading seconds
//!   field (`second minute hour day-of-month month day-of-week`, as in Quartz and most cron
//!   libraries);
//! - in each field `*`, numbers, names (`jan`-`dec`, `sun`-`sat`, any case), ranges `a-b`,
//!   steps `*/n`, `a-b/n` and `a/n` (from `a` to the field's end), and lists of these joined by
//!   commas; `?` means `*` in the day fields; day-of-week 7 is Sunday, like 0;
//! - the names `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and
//!   `@hourly`.
//!
//! Days follow Vixie cron: when both day fields are restricted (neither is `*`), a day matches
//! if either field matches; otherwise the restricted one decides.
//!
//! Times are wall-clock times in the job's zone, and each matching wall-clock time fires at most
//! once:
//! - a matching time that does not exist because clocks jump forward (a spring-forward gap)
//!   fires once, at the first instant after the gap (the moment of the jump, e.g. 03:00 in New
//!   York); several matching times in one gap fire once together;
//! - a matching time that happens twice because clocks fall back fires at its first occurrence
//!   only. (So a job every 15 minutes does not run during the repeated hour; use an `every`
//!   schedule for intervals of elapsed time.)
//!
//! An expression is refused when it is malformed or can never match (such as `0 0 30 2 *`).

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};

/// How many years ahead [`CronExpr::next_after`] looks; `0 0 29 2 *` needs up to eight
/// (2096 -> 2104).
const SEARCH_YEARS: i16 = 10;

/// Why a cron expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron expression '{expr}': {reason}")]
pub struct CronError {
    /// The expression as given.
    pub expr: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    source: String,
    seconds: u64,
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    days: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday = 0.
    weekdays: u8,
    days_unrestricted: bool,
    weekdays_unrestricted: bool,
}

/// One field's rules.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
// 7 is accepted as Sunday and folded onto 0 after parsing.
const WEEKDAY: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

impl CronExpr {
    /// Parses and validates an expression.
    pub fn parse(expr: &str) -> Result<Self, CronError> {
        let fail = |reason: String| CronError {
            expr: expr.to_string(),
            reason,
        };
        let trimmed = expr.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            name if name.starts_with('@') => {
                return Err(fail(format!(
                    "unknown name '{name}' (use @yearly, @monthly, @weekly, @daily or @hourly)"
                )));
            }
            _ => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (second, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            0 => return Err(fail("it is empty".into())),
            n => {
                return Err(fail(format!(
                    "it has {n} fields; use 5 (minute hour day-of-month month day-of-week) or 6 \
                     (with seconds first)"
                )));
            }
        };
        // `?` (from Quartz) means "no particular value" in the two day fields.
        let (day_text, weekday_text) = (any_day(rest[2]), any_day(rest[4]));
        let seconds = parse_field(second, &SECOND).map_err(fail)?;
        let minutes = parse_field(rest[0], &MINUTE).map_err(fail)?;
        let hours = parse_field(rest[1], &HOUR).map_err(fail)?;
        let days = parse_field(day_text, &DAY).map_err(fail)?;
        let months = parse_field(rest[3], &MONTH).map_err(fail)?;
        let mut weekdays = parse_field(weekday_text, &WEEKDAY).map_err(fail)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        let parsed = Self {
            source: trimmed.to_string(),
            seconds,
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            days_unrestricted: day_text == "*",
            weekdays_unrestricted: weekday_text == "*",
        };
        parsed.check_days_exist().map_err(fail)?;
        Ok(parsed)
    }

    /// The expression as given (trimmed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Refuses day-of-month choices that no chosen month has (e.g. the 30th of February).
    fn check_days_exist(&self) -> Result<(), String> {
        if self.days_unrestricted || !self.weekdays_unrestricted {
            // The weekday field alone (or together with the days) always matches some day.
            return Ok(());
        }
        let possible = (1..=12u8)
            .filter(|m| self.months & (1 << m) != 0)
            .any(|m| lowest_bit(self.days) <= longest_month(m));
        if possible {
            return Ok(());
        }
        let chosen: Vec<&str> = (1..=12usize)
            .filter(|&m| self.months & (1 << m) != 0)
            .map(|m| MONTH_NAMES[m - 1])
            .collect();
        Err(format!(
            "day {} never occurs in {}, so it would never run",
            lowest_bit(self.days),
            chosen.join(", ")
        ))
    }

    /// Whether a wall-clock time matches.
    pub fn matches(&self, dt: DateTime) -> bool {
        has(self.months as u64, dt.month() as u32)
            && self.day_matches(dt.year(), dt.month() as u8, dt.day() as u8)
            && has(self.hours as u64, dt.hour() as u32)
            && has(self.minutes, dt.minute() as u32)
            && has(self.seconds, dt.second() as u32)
    }

    fn day_matches(&self, year: i16, month: u8, day: u8) -> bool {
        let by_day = has(self.days as u64, day as u32);
        let by_weekday = || has(self.weekdays as u64, weekday(year, month, day) as u32);
        match (self.days_unrestricted, self.weekdays_unrestricted) {
            (true, true) => true,
            (true, false) => by_weekday(),
            (false, true) => by_day,
            (false, false) => by_day || by_weekday(),
        }
    }

    /// The first matching wall-clock time strictly after `after`, to the second; `None` if
    /// there is none within ten years.
    pub fn next_civil_after(&self, after: DateTime) -> Option<DateTime> {
        let mut t = Civil::from(after).plus_one_second();
        let last_year = after.year().saturating_add(SEARCH_YEARS);
        loop {
            if t.year > last_year {
                return None;
            }
            if !has(self.months as u64, t.month as u32) {
                match next_bit(self.months as u64, t.month as u32 + 1, 12) {
                    Some(m) => t.month = m as u8,
                    None => {
                        t.year += 1;
                        t.month = lowest_bit(self.months as u32);
                    }
                }
                t.start_of_month();
                continue;
            }
            if t.day > days_in_month(t.year, t.month) {
                t.next_month();
                continue;
            }
            if !self.day_matches(t.year, t.month, t.day) {
                if self.weekdays_unrestricted && !self.days_unrestricted {
                    // Only the day of the month decides: jump straight to the next chosen day.
                    match next_bit(self.days as u64, t.day as u32 + 1, 31) {
                        Some(d) => t.day = d as u8,
                        None => t.day = 32,
                    }
                    t.start_of_day();
                } else {
                    t.next_day();
                }
                continue;
            }
            if !has(self.hours as u64, t.hour as u32) {
                match next_bit(self.hours as u64, t.hour as u32 + 1, 23) {
                    Some(h) => {
                        t.hour = h as u8;
                        t.minute = 0;
                        t.second = 0;
                    }
                    None => t.next_day(),
                }
                continue;
            }
            if !has(self.minutes, t.minute as u32) {
                match next_bit(self.minutes, t.minute as u32 + 1, 59) {
                    Some(m) => {
                        t.minute = m as u8;
                        t.second = 0;
                    }
                    None => t.next_hour(),
                }
                continue;
            }
            if !has(self.seconds, t.second as u32) {
                match next_bit(self.seconds, t.second as u32 + 1, 59) {
                    Some(s) => t.second = s as u8,
                    None => t.next_minute(),
                }
                continue;
            }
            return t.to_datetime();
        }
    }

    /// The first instant strictly after `after` at which the job fires in `tz` (see the module
    /// documentation for clock changes); `None` if there is none within ten years.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let mut civil = tz.to_datetime(after);
        loop {
            civil = self.next_civil_after(civil)?;
            let fires_at = resolve_civil(civil, tz)?;
            if fires_at > after {
                return Some(fires_at);
            }
            // This wall-clock time already happened (its first occurrence, or the end of its
            // gap, lies at or before `after`); look further.
        }
    }
}

/// The instant a wall-clock time stands for, by the scheduler's rules: its only instant; the
/// first of two in a fall-back overlap; the end of the gap for a time skipped by a
/// spring-forward change. `None` only for instants outside the supported range.
pub fn resolve_civil(civil: DateTime, tz: &TimeZone) -> Option<Timestamp> {
    match tz.to_ambiguous_timestamp(civil).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(civil).ok(),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(civil).ok(),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the later offset, the time lands before the jump; the jump itself is
            // the first instant after the gap.
            let inside = after.to_timestamp(civil).ok()?;
            tz.following(inside).next().map(|t| t.timestamp())
        }
    }
}

fn any_day(field: &str) -> &str {
    if field == "?" { "*" } else { field }
}

fn has(bits: u64, value: u32) -> bool {
    value < 64 && bits & (1u64 << value) != 0
}

/// The lowest set bit at or above `from`, if it is at most `max`.
fn next_bit(bits: u64, from: u32, max: u32) -> Option<u32> {
    if from > max {
        return None;
    }
    let masked = bits & (u64::MAX << from);
    let bit = masked.trailing_zeros();
    (bit <= max).then_some(bit)
}

fn lowest_bit(bits: u32) -> u8 {
    bits.trailing_zeros() as u8
}

fn is_leap(year: i16) -> bool {
    let y = year as i32;
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(year: i16, month: u8) -> u8 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn longest_month(month: u8) -> u8 {
    days_in_month(2000, month)
}

/// Day of the week, Sunday = 0 (Sakamoto's method, proleptic Gregorian).
fn weekday(year: i16, month: u8, day: u8) -> u8 {
    const T: [i32; 12] = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
    let mut y = year as i32;
    if month < 3 {
        y -= 1;
    }
    let w = (y + y / 4 - y / 100 + y / 400 + T[month as usize - 1] + day as i32).rem_euclid(7);
    w as u8
}

/// A wall-clock time in plain integers, cheap to step field by field.
#[derive(Debug, Clone, Copy)]
struct Civil {
    year: i16,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
}

impl Civil {
    fn plus_one_second(self) -> Self {
        let mut t = self;
        if t.second < 59 {
            t.second += 1;
        } else {
            t.next_minute();
        }
        t
    }

    fn start_of_month(&mut self) {
        self.day = 1;
        self.start_of_day();
    }

    fn start_of_day(&mut self) {
        self.hour = 0;
        self.minute = 0;
        self.second = 0;
    }

    fn next_month(&mut self) {
        if self.month == 12 {
            self.month = 1;
            self.year = self.year.saturating_add(1);
        } else {
            self.month += 1;
        }
        self.start_of_month();
    }

    /// The next day; may leave `day` past the month's end, which the search loop rolls over.
    fn next_day(&mut self) {
        self.day += 1;
        self.start_of_day();
    }

    fn next_hour(&mut self) {
        self.minute = 0;
        self.second = 0;
        if self.hour == 23 {
            self.next_day();
        } else {
            self.hour += 1;
        }
    }

    fn next_minute(&mut self) {
        self.second = 0;
        if self.minute == 59 {
            self.next_hour();
        } else {
            self.minute += 1;
        }
    }

    fn to_datetime(self) -> Option<DateTime> {
        DateTime::new(
            self.year,
            self.month as i8,
            self.day as i8,
            self.hour as i8,
            self.minute as i8,
            self.second as i8,
            0,
        )
        .ok()
    }
}

impl From<DateTime> for Civil {
    fn from(dt: DateTime) -> Self {
        Self {
            year: dt.year(),
            month: dt.month() as u8,
            day: dt.day() as u8,
            hour: dt.hour() as u8,
            minute: dt.minute() as u8,
            second: dt.second() as u8,
        }
    }
}

/// Parses one field into a bit set of its allowed values.
fn parse_field(text: &str, field: &Field) -> Result<u64, String> {
    let mut bits = 0u64;
    for item in text.split(',') {
        bits |= parse_item(item, field)?;
    }
    Ok(bits)
}

fn parse_item(item: &str, field: &Field) -> Result<u64, String> {
    let name = field.name;
    if item.is_empty() {
        return Err(format!("the {name} field has an empty list item"));
    }
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => {
            let step: u32 = step
                .parse()
                .map_err(|_| format!("the step '{step}' in the {name} field is not a number"))?;
            if step == 0 {
                return Err(format!("the step in the {name} field must be at least 1"));
            }
            (range, Some(step))
        }
        None => (item, None),
    };
    let (start, end) = if range == "*" {
        (field.min, field.max)
    } else if let Some((a, b)) = range.split_once('-') {
        let a = parse_value(a, field)?;
        let b = parse_value(b, field)?;
        if a > b {
            return Err(format!(
                "the {name} range '{range}' runs backwards; write it as two ranges joined by a comma"
            ));
        }
        (a, b)
    } else {
        let a = parse_value(range, field)?;
        // `a/n` runs from a to the end of the field.
        (a, if step.is_some() { field.max } else { a })
    };
    let step = step.unwrap_or(1);
    let mut bits = 0u64;
    let mut v = start;
    while v <= end {
        bits |= 1u64 << v;
        v += step;
    }
    Ok(bits)
}

fn parse_value(text: &str, field: &Field) -> Result<u32, String> {
    let name = field.name;
    if let Ok(v) = text.parse::<u32>() {
        if v < field.min || v > field.max {
            return Err(format!(
                "{v} is out of range for the {name} field ({}-{})",
                field.min, field.max
            ));
        }
        return Ok(v);
    }
    let lower = text.to_ascii_lowercase();
    if let Some(i) = field.names.iter().position(|n| *n == lower) {
        return Ok(i as u32 + field.min);
    }
    if text.is_empty() {
        return Err(format!("the {name} field has an empty range bound"));
    }
    let upper = text.to_ascii_uppercase();
    let digits_then = |suffix: char| {
        upper
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
    };
    if upper.contains('#') || upper == "LW" || digits_then('L') || digits_then('W') {
        return Err(format!(
            "'{text}' in the {name} field uses L, W or # (Quartz extensions), which engram does \
             not support"
        ));
    }
    let hint = if field.names.is_empty() {
        String::new()
    } else {
        format!(" or a name such as {}", field.names[0])
    };
    Err(format!(
        "'{text}' in the {name} field is not a number{hint}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::ToSpan;
    use jiff::civil::Date;
    use proptest::prelude::*;

    fn cron(s: &str) -> CronExpr {
        CronExpr::parse(s).unwrap()
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn tz(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap()
    }

    /// The next `n` firing instants after `start`, as RFC 3339 in the zone.
    fn next_n(expr: &str, zone: &str, start: &str, n: usize) -> Vec<String> {
        let expr = cron(expr);
        let zone = tz(zone);
        let mut t = ts(start);
        let mut out = Vec::new();
        for _ in 0..n {
            t = expr.next_after(t, &zone).unwrap();
            out.push(
                t.to_zoned(zone.clone())
                    .strftime("%Y-%m-%dT%H:%M:%S%:z")
                    .to_string(),
            );
        }
        out
    }

    #[test]
    fn reads_the_usual_forms() {
        let c = cron("*/15 9-17 * * mon-fri");
        assert!(c.matches("2024-06-03T09:45:00".parse().unwrap())); // a Monday
        assert!(!c.matches("2024-06-01T09:45:00".parse().unwrap())); // a Saturday
        assert!(!c.matches("2024-06-03T18:00:00".parse().unwrap()));
        let c = cron("30 0 12 1,15 JAN-MAR ?");
        assert!(c.matches("2024-02-15T12:00:30".parse().unwrap()));
        assert!(!c.matches("2024-04-15T12:00:30".parse().unwrap()));
        assert!(cron("0 0 * * 7").matches("2024-06-02T00:00:00".parse().unwrap())); // Sunday
        assert!(cron("0 0 * * 5-7").matches("2024-06-02T00:00:00".parse().unwrap()));
        assert_eq!(cron("@daily"), cron("0 0 * * *").with_source("@daily"));
        assert!(cron("@hourly").matches("2024-06-02T07:00:00".parse().unwrap()));
        assert!(cron("5/20 * * * *").matches("2024-06-02T07:45:00".parse().unwrap()));
    }

    impl CronExpr {
        fn with_source(mut self, s: &str) -> Self {
            self.source = s.into();
            self
        }
    }

    #[test]
    fn refuses_bad_expressions_in_one_line_naming_the_problem() {
        let cases = [
            ("", "it is empty"),
            ("* * * *", "4 fields"),
            (
                "60 * * * *",
                "60 is out of range for the minute field (0-59)",
            ),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day-of-month field (1-31)"),
            ("* * * 13 *", "month field"),
            ("* * * * 8", "day-of-week field (0-7)"),
            ("*/0 * * * *", "at least 1"),
            ("5-1 * * * *", "runs backwards"),
            (
                "* * * foo *",
                "'foo' in the month field is not a number or a name such as jan",
            ),
            ("0 0 L * *", "Quartz"),
            ("0 0 * * 5#3", "Quartz"),
            ("@reboot", "unknown name '@reboot'"),
            ("0 0 30 2 *", "day 30 never occurs in February"),
            (
                "0 0 31 4,6,9,11 *",
                "day 31 never occurs in April, June, September, November",
            ),
            ("1,,2 * * * *", "empty list item"),
        ];
        for (expr, want) in cases {
            let err = CronExpr::parse(expr).unwrap_err().to_string();
            assert!(err.contains(want), "{expr}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        // Restricting both day fields can always match, so it is allowed.
        assert!(CronExpr::parse("0 0 30 2 mon").is_ok());
    }

    #[test]
    fn feb_29_runs_only_in_leap_years() {
        assert_eq!(
            next_n("0 0 29 2 *", "UTC", "2023-01-01T00:00:00Z", 3),
            [
                "2024-02-29T00:00:00+00:00",
                "2028-02-29T00:00:00+00:00",
                "2032-02-29T00:00:00+00:00"
            ]
        );
        // 2100 is not a leap year: eight years from 2096 to 2104.
        assert_eq!(
            next_n("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", 1),
            ["2104-02-29T00:00:00+00:00"]
        );
    }

    #[test]
    fn new_york_spring_forward_runs_once_at_the_end_of_the_gap() {
        // 2024-03-10: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist that day.
        assert_eq!(
            next_n("30 2 * * *", "America/New_York", "2024-03-09T12:00:00Z", 3),
            [
                "2024-03-10T03:00:00-04:00",
                "2024-03-11T02:30:00-04:00",
                "2024-03-12T02:30:00-04:00"
            ]
        );
        // Every quarter hour: the four skipped times collapse into one run at 03:00.
        assert_eq!(
            next_n(
                "*/15 * * * *",
                "America/New_York",
                "2024-03-10T06:40:00Z",
                4
            ),
            [
                "2024-03-10T01:45:00-05:00",
                "2024-03-10T03:00:00-04:00",
                "2024-03-10T03:15:00-04:00",
                "2024-03-10T03:30:00-04:00"
            ]
        );
    }

    #[test]
    fn new_york_fall_back_runs_once() {
        // 2024-11-03: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice.
        assert_eq!(
            next_n("30 1 * * *", "America/New_York", "2024-11-02T12:00:00Z", 3),
            [
                "2024-11-03T01:30:00-04:00",
                "2024-11-04T01:30:00-05:00",
                "2024-11-05T01:30:00-05:00"
            ]
        );
        // Asked during the second 01:xx hour, the repeated time is not run again.
        assert_eq!(
            next_n("30 1 * * *", "America/New_York", "2024-11-03T06:10:00Z", 1),
            ["2024-11-04T01:30:00-05:00"]
        );
        assert_eq!(
            next_n("0 * * * *", "America/New_York", "2024-11-03T04:30:00Z", 3),
            [
                "2024-11-03T01:00:00-04:00",
                "2024-11-03T02:00:00-05:00",
                "2024-11-03T03:00:00-05:00"
            ]
        );
    }

    #[test]
    fn berlin_both_directions() {
        // 2024-03-31: 02:00 CET jumps to 03:00 CEST.
        assert_eq!(
            next_n("30 2 * * *", "Europe/Berlin", "2024-03-30T12:00:00Z", 2),
            ["2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"]
        );
        // 2024-10-27: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
        assert_eq!(
            next_n("30 2 * * *", "Europe/Berlin", "2024-10-26T12:00:00Z", 2),
            ["2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"]
        );
        // A daily 09:00 job keeps 09:00 local across both changes.
        assert_eq!(
            next_n("0 9 * * *", "Europe/Berlin", "2024-03-30T10:00:00Z", 2),
            ["2024-03-31T09:00:00+02:00", "2024-04-01T09:00:00+02:00"]
        );
    }

    #[test]
    fn seconds_field_and_sub_second_starts() {
        assert_eq!(
            next_n("*/20 * * * * *", "UTC", "2024-01-01T00:00:00.5Z", 3),
            [
                "2024-01-01T00:00:20+00:00",
                "2024-01-01T00:00:40+00:00",
                "2024-01-01T00:01:00+00:00"
            ]
        );
    }

    #[test]
    fn vixie_day_rules() {
        // The 13th or any Friday.
        assert_eq!(
            next_n("0 0 13 * fri", "UTC", "2024-09-01T00:00:00Z", 3),
            [
                "2024-09-06T00:00:00+00:00",
                "2024-09-13T00:00:00+00:00",
                "2024-09-20T00:00:00+00:00"
            ]
        );
    }

    #[test]
    fn weekday_formula_agrees_with_jiff() {
        let mut d = Date::new(1999, 12, 25).unwrap();
        for _ in 0..2000 {
            let ours = weekday(d.year(), d.month() as u8, d.day() as u8);
            assert_eq!(ours as i8, d.weekday().to_sunday_zero_offset());
            d = d.checked_add(1.day()).unwrap();
        }
    }

    /// An independent oracle: walk instants minute by minute and apply the documented rules
    /// directly (the generated expressions fire on whole minutes, and every zone used changes
    /// its clocks on whole minutes).
    fn oracle_next(
        expr: &CronExpr,
        after: Timestamp,
        tz: &TimeZone,
        limit_minutes: i64,
    ) -> Option<Timestamp> {
        let minute = jiff::SignedDuration::from_mins(1);
        let mut t = after;
        for _ in 0..limit_minutes {
            let before = t;
            t = t.checked_add(minute).unwrap();
            let civil = tz.to_datetime(t);
            // The first occurrence of a wall-clock time is the one a fold's earlier offset gives.
            let first_occurrence = tz
                .to_ambiguous_timestamp(civil)
                .earlier()
                .is_ok_and(|earliest| earliest == t);
            if expr.matches(civil) && first_occurrence {
                return Some(t);
            }
            // Clocks jumped forward just now: fire if a skipped wall-clock minute matched.
            let mut skipped = tz.to_datetime(before);
            loop {
                skipped = skipped.checked_add(minute).unwrap();
                if skipped >= civil {
                    break;
                }
                if expr.matches(skipped) {
                    return Some(t);
                }
            }
        }
        None
    }

    fn field_text(min: u32, max: u32) -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_string()),
            (min..=max).prop_map(|v| v.to_string()),
            (min..=max, min..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
            (1u32..=7).prop_map(|s| format!("*/{s}")),
            (min..=max, min..=max).prop_map(|(a, b)| format!("{a},{b}")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn parse_never_panics(input in "\\PC{0,40}") {
            let _ = CronExpr::parse(&input);
        }

        #[test]
        fn parse_never_panics_on_cron_like_text(input in "[0-9*/,\\-a-zA-Z?#LW@ ]{0,30}") {
            if let Ok(expr) = CronExpr::parse(&input) {
                let _ = expr.next_after(ts("2024-03-10T06:00:00Z"), &tz("America/New_York"));
            }
        }

        #[test]
        fn next_is_later_and_matches(
            minute in field_text(0, 59),
            hour in field_text(0, 23),
            day in field_text(1, 31),
            month in field_text(1, 12),
            weekday in field_text(0, 6),
            zone in prop_oneof![Just("UTC"), Just("America/New_York"), Just("Europe/Berlin"), Just("Australia/Lord_Howe")],
            start in 1_700_000_000i64..1_900_000_000,
        ) {
            let text = format!("{minute} {hour} {day} {month} {weekday}");
            let Ok(expr) = CronExpr::parse(&text) else { return Ok(()) };
            let zone = tz(zone);
            let after = Timestamp::from_second(start).unwrap();
            let next = expr.next_after(after, &zone);
            prop_assert!(next.is_some(), "{text} never fires after {after}");
            let next = next.unwrap();
            prop_assert!(next > after);
            let civil = zone.to_datetime(next);
            // Either the wall-clock time matches, or it is the end of a gap that swallowed a match.
            let in_gap_end = zone.preceding(next.checked_add(jiff::SignedDuration::from_secs(1)).unwrap())
                .next()
                .is_some_and(|tr| tr.timestamp() == next);
            prop_assert!(expr.matches(civil) || in_gap_end, "{text}: {next} ({civil}) does not match");
        }

        #[test]
        fn agrees_with_a_minute_by_minute_oracle_around_clock_changes(
            minute in field_text(0, 59),
            hour in prop_oneof![Just("*".to_string()), (0u32..=3).prop_map(|h| h.to_string()), Just("1-3".to_string())],
            zone in prop_oneof![Just("America/New_York"), Just("Europe/Berlin"), Just("Australia/Lord_Howe")],
            transition in prop_oneof![Just("2024-03-10T05:00:00Z"), Just("2024-11-03T04:30:00Z"), Just("2024-03-31T00:00:00Z"), Just("2024-10-26T23:30:00Z"), Just("2024-04-06T14:00:00Z"), Just("2024-10-05T15:00:00Z")],
            offset_minutes in 0i64..240,
        ) {
            let text = format!("{minute} {hour} * * *");
            let expr = CronExpr::parse(&text).unwrap();
            let zone = tz(zone);
            let after = ts(transition).checked_add(jiff::SignedDuration::from_mins(offset_minutes)).unwrap();
            // Within a day and a half the oracle is exhaustive.
            let ours = expr.next_after(after, &zone);
            let theirs = oracle_next(&expr, after, &zone, 36 * 60);
            if let Some(theirs) = theirs {
                prop_assert_eq!(ours, Some(theirs), "{}", text);
            } else {
                prop_assert!(ours.is_some_and(|t| t.duration_since(after).as_secs() >= 36 * 3600));
            }
        }
    }
}
