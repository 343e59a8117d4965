//! Time phrases in queries: "yesterday", "last week", "in May", "3 days ago", "in 2023".
//!
//! A query that names a time is asking about memories from then. [`time_window`] finds the
//! first such phrase and turns it into a window of time, read in the user's zone relative to
//! now; ranking then favours memories created inside it. A query that asks *when* something
//! happened ([`asks_when`]) is best answered by a memory that says when ([`mentions_time`]).

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, ToSpan};

/// A span of time a query refers to: `[since, until)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeWindow {
    /// Start (inclusive).
    pub since: Timestamp,
    /// End (exclusive).
    pub until: Timestamp,
    /// The words of the query that named it.
    pub phrase: String,
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("monday", Weekday::Monday),
    ("tuesday", Weekday::Tuesday),
    ("wednesday", Weekday::Wednesday),
    ("thursday", Weekday::Thursday),
    ("friday", Weekday::Friday),
    ("saturday", Weekday::Saturday),
    ("sunday", Weekday::Sunday),
];

/// January = 1; full names and three-letter abbreviations ("sep" and "sept" both work).
fn month_number(word: &str) -> Option<i8> {
    MONTHS
        .iter()
        .position(|m| *m == word || (word.len() == 3 && m.starts_with(word)))
        .or_else(|| (word == "sept").then_some(8))
        .and_then(|i| i8::try_from(i + 1).ok())
}

fn number(word: &str) -> Option<i64> {
    match word {
        "a" | "an" | "one" => Some(1),
        "two" => Some(2),
        "three" => Some(3),
        "four" => Some(4),
        "five" => Some(5),
        "six" => Some(6),
        "seven" => Some(7),
        "eight" => Some(8),
        "nine" => Some(9),
        "ten" => Some(10),
        "couple" => Some(2),
        "few" => Some(3),
        _ => word.parse().ok().filter(|n| (1..=1000).contains(n)),
    }
}

fn year(word: &str) -> Option<i16> {
    word.parse::<i16>()
        .ok()
        .filter(|y| (1900..=2200).contains(y) && word.len() == 4)
}

struct Calendar<'a> {
    today: Date,
    tz: &'a TimeZone,
}

impl Calendar<'_> {
    fn start(&self, date: Date) -> Option<Timestamp> {
        date.to_zoned(self.tz.clone()).ok().map(|z| z.timestamp())
    }

    /// `[from, from + length)` in days, weeks, months or years.
    fn window(&self, from: Date, length: Span, phrase: String) -> Option<TimeWindow> {
        let until = from.checked_add(length).ok()?;
        Some(TimeWindow {
            since: self.start(from)?,
            until: self.start(until)?,
            phrase,
        })
    }

    fn week_start(&self, date: Date) -> Date {
        let back = i64::from(date.weekday().to_monday_zero_offset());
        date.checked_sub(back.days()).unwrap_or(date)
    }

    fn month_start(&self, date: Date) -> Date {
        date.first_of_month()
    }

    fn year_start(&self, date: Date) -> Date {
        Date::new(date.year(), 1, 1).unwrap_or(date)
    }
}

/// The time window the first time phrase of `query` names, if any.
pub fn time_window(query: &str, now: Timestamp, tz: &TimeZone) -> Option<TimeWindow> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let cal = Calendar {
        today: now.to_zoned(tz.clone()).date(),
        tz,
    };
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    for i in 0..words.len() {
        let phrase = |n: usize| words[i..(i + n).min(words.len())].join(" ");
        let found = match (w(i), w(i + 1), w(i + 2)) {
            ("today", _, _) | ("tonight", _, _) => cal.window(cal.today, 1.day(), phrase(1)),
            ("this", "morning" | "afternoon" | "evening", _) => {
                cal.window(cal.today, 1.day(), phrase(2))
            }
            ("yesterday", _, _) => {
                cal.window(cal.today.checked_sub(1.day()).ok()?, 1.day(), phrase(1))
            }
            ("this", "week", _) => cal.window(cal.week_start(cal.today), 1.week(), phrase(2)),
            ("last" | "past" | "previous", "week", _) => cal.window(
                cal.week_start(cal.today).checked_sub(1.week()).ok()?,
                1.week(),
                phrase(2),
            ),
            ("this", "month", _) => cal.window(cal.month_start(cal.today), 1.month(), phrase(2)),
            ("last" | "past" | "previous", "month", _) => cal.window(
                cal.month_start(cal.today).checked_sub(1.month()).ok()?,
                1.month(),
                phrase(2),
            ),
            ("this", "year", _) => cal.window(cal.year_start(cal.today), 1.year(), phrase(2)),
            ("last" | "past" | "previous", "year", _) => cal.window(
                cal.year_start(cal.today).checked_sub(1.year()).ok()?,
                1.year(),
                phrase(2),
            ),
            ("recently" | "lately", _, _) => {
                cal.window(cal.today.checked_sub(30.days()).ok()?, 31.days(), phrase(1))
            }
            (n, unit, "ago") if number(n).is_some() => {
                let n = number(n)?;
                let (back, length) = match unit.trim_end_matches('s') {
                    "day" => (n.days(), 1.day()),
                    "week" => (n.weeks(), 1.week()),
                    "month" => (n.months(), 1.month()),
                    "year" => (n.years(), 1.year()),
                    _ => continue,
                };
                let at = cal.today.checked_sub(back).ok()?;
                let from = match unit.trim_end_matches('s') {
                    "week" => cal.week_start(at),
                    "month" => cal.month_start(at),
                    "year" => cal.year_start(at),
                    _ => at,
                };
                cal.window(from, length, phrase(3))
            }
            (weekday, _, _) if matches!(w(i.wrapping_sub(1)), "on" | "last") => {
                let Some(&(_, day)) = WEEKDAYS.iter().find(|(name, _)| *name == weekday) else {
                    continue;
                };
                // The most recent such day before today.
                let mut date = cal.today.checked_sub(1.day()).ok()?;
                while date.weekday() != day {
                    date = date.checked_sub(1.day()).ok()?;
                }
                cal.window(date, 1.day(), words[i - 1..=i].join(" "))
            }
            (month, next, _)
                if month_number(month).is_some()
                    && matches!(w(i.wrapping_sub(1)), "in" | "during" | "since" | "of")
                    || (month_number(month).is_some() && year(next).is_some()) =>
            {
                let m = month_number(month)?;
                // "may" alone is too often the verb; it needs "in May" or "May 2023".
                if month == "may" && year(next).is_none() && w(i.wrapping_sub(1)) != "in" {
                    continue;
                }
                let y = match year(next) {
                    Some(y) => y,
                    // The latest such month that has begun.
                    None if m <= cal.today.month() => cal.today.year(),
                    None => cal.today.year() - 1,
                };
                let from = Date::new(y, m, 1).ok()?;
                let n = if year(next).is_some() { 2 } else { 1 };
                cal.window(from, 1.month(), phrase(n))
            }
            (y, _, _)
                if year(y).is_some()
                    && matches!(w(i.wrapping_sub(1)), "in" | "during" | "since" | "of") =>
            {
                let from = Date::new(year(y)?, 1, 1).ok()?;
                cal.window(from, 1.year(), phrase(1))
            }
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

fn lowercase_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether the query asks when something happened: "When did ...", "What year ...", "How long
/// ago ...".
pub fn asks_when(query: &str) -> bool {
    let words = lowercase_words(query);
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    if w(0) == "when" {
        return true;
    }
    (0..words.len()).any(|i| {
        matches!(
            (w(i), w(i + 1), w(i + 2)),
            (
                "what" | "which",
                "year" | "month" | "date" | "day" | "week" | "time",
                _
            ) | ("since", "when", _)
                | ("how", "long", "ago")
        )
    })
}

/// Whether a text says when something happened: a relative time ("yesterday", "last week",
/// "two days ago", "this weekend"), a weekday, a month named as a date, or a year.
pub fn mentions_time(text: &str) -> bool {
    let words = lowercase_words(text);
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    (0..words.len()).any(|i| match w(i) {
        "yesterday" | "today" | "tonight" | "tomorrow" | "ago" | "recently" | "lately"
        | "weekend" => true,
        "last" | "next" | "this" | "past" => matches!(
            w(i + 1),
            "week"
                | "month"
                | "year"
                | "night"
                | "morning"
                | "afternoon"
                | "evening"
                | "summer"
                | "winter"
                | "spring"
                | "fall"
                | "autumn"
        ),
        word if WEEKDAYS.iter().any(|(name, _)| *name == word) => true,
        // Full month names only ("mar" or "jan" in a text are rarely dates); "may" only as a
        // date ("in May", "May 5", "May 2023").
        "may" => {
            w(i.wrapping_sub(1)) == "in"
                || w(i + 1).parse::<u16>().is_ok_and(|n| (1..=31).contains(&n))
                || year(w(i + 1)).is_some()
        }
        word if word.len() > 3 && MONTHS.contains(&word) => true,
        word => year(word).is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A Thursday.
    fn now() -> Timestamp {
        "2024-05-16T15:00:00Z".parse().unwrap()
    }

    fn window(query: &str) -> Option<(String, String, String)> {
        time_window(query, now(), &TimeZone::UTC)
            .map(|w| (w.since.to_string(), w.until.to_string(), w.phrase))
    }

    fn range(since: &str, until: &str, phrase: &str) -> Option<(String, String, String)> {
        Some((
            format!("{since}T00:00:00Z"),
            format!("{until}T00:00:00Z"),
            phrase.to_string(),
        ))
    }

    #[test]
    fn relative_days_weeks_months_years() {
        assert_eq!(
            window("what did I eat yesterday?"),
            range("2024-05-15", "2024-05-16", "yesterday")
        );
        assert_eq!(
            window("plans for today"),
            range("2024-05-16", "2024-05-17", "today")
        );
        assert_eq!(
            window("what happened last week"),
            range("2024-05-06", "2024-05-13", "last week")
        );
        assert_eq!(
            window("this week's tasks"),
            range("2024-05-13", "2024-05-20", "this week")
        );
        assert_eq!(
            window("trips last month"),
            range("2024-04-01", "2024-05-01", "last month")
        );
        assert_eq!(
            window("books read last year"),
            range("2023-01-01", "2024-01-01", "last year")
        );
        assert_eq!(
            window("what did we decide 3 days ago"),
            range("2024-05-13", "2024-05-14", "3 days ago")
        );
        assert_eq!(window("a couple of weeks ago"), None);
        assert_eq!(
            window("two weeks ago"),
            range("2024-04-29", "2024-05-06", "two weeks ago")
        );
    }

    #[test]
    fn named_months_years_and_weekdays() {
        assert_eq!(
            window("what did I do in May?"),
            range("2024-05-01", "2024-06-01", "may")
        );
        assert_eq!(
            window("in September"),
            range("2023-09-01", "2023-10-01", "september")
        );
        assert_eq!(
            window("March 2023 trip"),
            range("2023-03-01", "2023-04-01", "march 2023")
        );
        assert_eq!(
            window("what happened in 2022"),
            range("2022-01-01", "2023-01-01", "2022")
        );
        assert_eq!(
            window("what did I say on monday"),
            range("2024-05-13", "2024-05-14", "on monday")
        );
        assert_eq!(
            window("last thursday"),
            range("2024-05-09", "2024-05-10", "last thursday")
        );
    }

    #[test]
    fn ordinary_words_are_not_times() {
        assert_eq!(window("may I ask about python"), None);
        assert_eq!(window("the year of the dragon"), None);
        assert_eq!(window("what is my favourite colour"), None);
        assert_eq!(window("1984 by orwell"), None);
    }

    #[test]
    fn questions_about_when() {
        for q in [
            "When did Ana move to Lisbon?",
            "What year did we buy the car",
            "which month was the trip",
            "How long ago did I start running?",
        ] {
            assert!(asks_when(q), "{q}");
        }
        for q in [
            "What did Ana say when she moved?",
            "where is the car",
            "what is my favourite colour",
        ] {
            assert!(!asks_when(q), "{q}");
        }
    }

    #[test]
    fn texts_that_say_when() {
        for t in [
            "We went hiking yesterday!",
            "I started two weeks ago",
            "Last week was busy",
            "the concert on Saturday",
            "back in May we moved",
            "it opened in 2019",
            "see you this weekend",
            "my birthday is on 3 August",
        ] {
            assert!(mentions_time(t), "{t}");
        }
        for t in [
            "I may go",
            "that was the last straw",
            "I love painting",
            "she has 1000 followers",
        ] {
            assert!(!mentions_time(t), "{t}");
        }
    }

    #[test]
    fn windows_follow_the_time_zone() {
        let tokyo = TimeZone::get("Asia/Tokyo").unwrap();
        // 15:00 UTC is already the next day in Tokyo.
        let w = time_window("today", now(), &tokyo).unwrap();
        assert_eq!(w.since.to_string(), "2024-05-16T15:00:00Z");
    }

    proptest! {
        #[test]
        fn time_words_never_panic(text in "\\PC{0,60}") {
            let _ = asks_when(&text);
            let _ = mentions_time(&text);
        }

        #[test]
        fn never_panics_and_windows_are_ordered(query in "\\PC{0,60}") {
            if let Some(w) = time_window(&query, now(), &TimeZone::UTC) {
                prop_assert!(w.since < w.until);
            }
        }
    }
}
