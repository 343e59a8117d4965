//! Reading times and durations the way people write them.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// The error for text that is neither a time nor a duration engram understands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot read '{0}' as a time (try 2024-05-08T13:56:00Z, 2024-05-08 13:56, 2024-05-08, now, today, yesterday, or an age such as 7d or 2h30m)"
)]
pub struct TimeParseError(pub String);

/// The error for text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read '{0}' as a duration (try 90, 45s, 10m, 1h30m, 7d or 2w)")]
pub struct DurationParseError(pub String);

/// Reads a point in time.
///
/// Accepts RFC 3339 (`2024-05-08T13:56:00Z`, with any offset), a civil date-time without offset
/// (`2024-05-08T13:56`, `2024-05-08 13:56:00`) or a date (`2024-05-08`, midnight), both read in
/// `tz`; `now`, `today` and `yesterday`; and an age before `now` such as `7d` or `2h30m`.
/// Times are kept to the microsecond.
pub fn parse_time(input: &str, now: Timestamp, tz: &TimeZone) -> Result<Timestamp, TimeParseError> {
    let s = input.trim();
    let err = || TimeParseError(input.to_string());
    let parsed = match s.to_ascii_lowercase().as_str() {
        "" => return Err(err()),
        "now" => now,
        "today" => start_of_day(now, tz, 0).ok_or_else(err)?,
        "yesterday" => start_of_day(now, tz, 1).ok_or_else(err)?,
        _ => {
            if let Ok(ts) = s.parse::<Timestamp>() {
                ts
            } else if let Ok(dt) = s.parse::<DateTime>() {
                dt.to_zoned(tz.clone()).map_err(|_| err())?.timestamp()
            } else if let Ok(date) = s.parse::<Date>() {
                date.to_zoned(tz.clone()).map_err(|_| err())?.timestamp()
            } else if let Ok(age) = parse_duration(s) {
                now.checked_sub(age).map_err(|_| err())?
            } else {
                return Err(err());
            }
        }
    };
    Ok(truncate_to_micros(parsed))
}

fn start_of_day(now: Timestamp, tz: &TimeZone, days_back: i64) -> Option<Timestamp> {
    let date = now.to_zoned(tz.clone()).date();
    let date = date.checked_sub(jiff::Span::new().days(days_back)).ok()?;
    Some(date.to_zoned(tz.clone()).ok()?.timestamp())
}

/// Drops sub-microsecond precision; engram stores times in microseconds.
pub fn truncate_to_micros(ts: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(ts.as_microsecond()).unwrap_or(ts)
}

/// Reads a duration: a bare number of seconds (`90`), or numbers with units `s`, `m`, `h`, `d`, `w`
/// run together (`1h30m`, `7d`). Also accepts the ISO 8601 / jiff friendly forms (`PT1H`, `2 hours`).
pub fn parse_duration(input: &str) -> Result<SignedDuration, DurationParseError> {
    let s = input.trim();
    let err = || DurationParseError(input.to_string());
    if s.is_empty() {
        return Err(err());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return i64::try_from(secs)
            .map(SignedDuration::from_secs)
            .map_err(|_| err());
    }
    let mut total: i64 = 0;
    let mut digits = String::new();
    let mut saw_unit = false;
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit: i64 = match ch.to_ascii_lowercase() {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return fallback_duration(s).ok_or_else(err),
        };
        let n: i64 = digits.parse().map_err(|_| err())?;
        digits.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(err)?;
        saw_unit = true;
    }
    if !digits.is_empty() || !saw_unit {
        return fallback_duration(s).ok_or_else(err);
    }
    Ok(SignedDuration::from_secs(total))
}

fn fallback_duration(s: &str) -> Option<SignedDuration> {
    s.parse::<SignedDuration>()
        .ok()
        .filter(|d| !d.is_negative())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn now() -> Timestamp {
        "2024-05-08T13:56:00Z".parse().unwrap()
    }

    #[test]
    fn reads_the_usual_spellings() {
        let utc = TimeZone::UTC;
        let cases = [
            ("2023-05-08T13:56:00Z", "2023-05-08T13:56:00Z"),
            ("2023-05-08T15:56:00+02:00", "2023-05-08T13:56:00Z"),
            ("2023-05-08 13:56", "2023-05-08T13:56:00Z"),
            ("2023-05-08", "2023-05-08T00:00:00Z"),
            ("now", "2024-05-08T13:56:00Z"),
            ("today", "2024-05-08T00:00:00Z"),
            ("yesterday", "2024-05-07T00:00:00Z"),
            ("7d", "2024-05-01T13:56:00Z"),
            ("1h30m", "2024-05-08T12:26:00Z"),
        ];
        for (input, want) in cases {
            let got = parse_time(input, now(), &utc).unwrap();
            assert_eq!(got.to_string(), want, "{input}");
        }
    }

    #[test]
    fn civil_times_are_read_in_the_given_zone() {
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        let got = parse_time("2023-05-08 13:56", now(), &berlin).unwrap();
        assert_eq!(got.to_string(), "2023-05-08T11:56:00Z");
    }

    #[test]
    fn rejects_nonsense_with_a_hint() {
        let err = parse_time("last tuesday-ish", now(), &TimeZone::UTC).unwrap_err();
        assert!(err.to_string().contains("2024-05-08T13:56:00Z"));
        assert!(parse_time("", now(), &TimeZone::UTC).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("2w").unwrap().as_secs(), 1_209_600);
        assert_eq!(parse_duration("PT1H").unwrap().as_secs(), 3600);
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    proptest! {
        #[test]
        fn unit_durations_add_up(h in 0i64..1000, m in 0i64..1000, s in 0i64..1000) {
            let d = parse_duration(&format!("{h}h{m}m{s}s")).unwrap();
            prop_assert_eq!(d.as_secs(), h * 3600 + m * 60 + s);
        }

        #[test]
        fn never_panics(input in "\\PC{0,24}") {
            let _ = parse_time(&input, now(), &TimeZone::UTC);
            let _ = parse_duration(&input);
        }
    }
}
