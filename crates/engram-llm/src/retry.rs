//! When to send a failed request again, and how long to wait first.

use std::time::Duration;

use reqwest::header::HeaderMap;

/// Exponential backoff: attempt `n + 1` waits `base_delay * 2^(n-1)`, capped at `max_delay`; a
/// server's Retry-After replaces the computed wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included (3 by default; 1 means never retry).
    pub max_attempts: u32,
    /// Wait before the first retry (1 s by default; make it small in tests).
    pub base_delay: Duration,
    /// Longest wait (60 s by default). A server asking for a longer wait is not retried: the
    /// error goes to the user with the server's wait in it.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn never() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// How long to wait after failed attempt number `attempt` (1-based) before the next one, or
    /// `None` when there is no next one: the attempts are used up, or the server asked for a
    /// wait longer than `max_delay`.
    pub fn delay_after(&self, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        if let Some(wait) = retry_after {
            return (wait <= self.max_delay).then_some(wait);
        }
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        Some(self.base_delay.saturating_mul(factor).min(self.max_delay))
    }
}

/// The wait a server asks for: `retry-after-ms` (OpenAI), else `retry-after` in seconds or as
/// an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(wait) = text("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
    {
        return Some(wait);
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let when = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = jiff::Timestamp::now().duration_until(when);
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let p = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        };
        let waits: Vec<u64> = (1..10)
            .map(|a| p.delay_after(a, None).unwrap().as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(p.delay_after(10, None), None);
        assert_eq!(RetryPolicy::default().delay_after(3, None), None, "3 tries");
        assert_eq!(RetryPolicy::never().delay_after(1, None), None);
    }

    #[test]
    fn retry_after_is_honoured_unless_too_long() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.delay_after(1, Some(Duration::from_secs(7))),
            Some(Duration::from_secs(7))
        );
        assert_eq!(p.delay_after(1, Some(Duration::from_secs(3600))), None);
    }

    #[test]
    fn reads_retry_after_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(
            retry_after(&h),
            Some(Duration::ZERO),
            "a past date means now"
        );
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }
}
