//! What the fuzz targets share: a fixed clock and zones, and servers built once per process.

use std::sync::OnceLock;

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// The instant every target treats as now (so runs are repeatable).
pub fn now() -> Timestamp {
    "2024-05-16T15:00:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Zones worth trying: UTC and one with daylight-saving changes.
pub fn zones() -> [TimeZone; 2] {
    [
        TimeZone::UTC,
        TimeZone::get("Europe/Berlin").unwrap_or(TimeZone::UTC),
    ]
}

/// A current-thread runtime for async targets.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("no runtime: {e}"))
    })
}

/// A temporary folder that lives as long as the process.
pub fn scratch() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}")))
        .path()
}

/// Texts stored for the searches and requests to find.
pub const SEED_TEXTS: &[&str] = &[
    "Alice moved to Berlin in May",
    "prefers tabs over spaces in Python",
    "went hiking in the Alps last week",
    "北京的天气很好",
    "the deploy runs every Friday at 5pm",
    "café au lait, naïve résumé",
];

/// True when `a` and `b` are the same JSON, numbers equal or within a few units in the last
/// place: serde_json (without its `float_roundtrip` feature, which engram does not turn on) may
/// read a long number back one unit in the last place away from the value it wrote.
pub fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y
                || match (x.as_f64(), y.as_f64()) {
                    (Some(x), Some(y)) => {
                        (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
                    }
                    _ => false,
                }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same_json(vx, vy))
        }
        _ => a == b,
    }
}
