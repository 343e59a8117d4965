//! Translating SQLite's failures into [`StoreError`]s a person can act on.

use std::path::Path;
use std::time::Duration;

use engram_core::StoreError;
use rusqlite::ErrorCode;

/// Maps a SQLite error on the database at `path` to a store error.
pub(crate) fn from_sqlite(err: rusqlite::Error, path: &Path, busy_timeout: Duration) -> StoreError {
    if let rusqlite::Error::SqliteFailure(failure, message) = &err {
        let detail = message.clone().unwrap_or_else(|| failure.to_string());
        return match failure.code {
            ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => StoreError::Corrupt {
                location: location(path),
                detail,
            },
            ErrorCode::DiskFull => StoreError::DiskFull,
            ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::CannotOpen => {
                StoreError::ReadOnly {
                    location: location(path),
                    detail,
                }
            }
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                StoreError::Busy(busy_timeout.as_secs())
            }
            ErrorCode::SystemIoFailure => StoreError::Backend(format!(
                "input/output error on {}: {detail}",
                path.display()
            )),
            _ => StoreError::Backend(detail),
        };
    }
    StoreError::Backend(err.to_string())
}

/// How a database file is named in messages.
pub(crate) fn location(path: &Path) -> String {
    path.display().to_string()
}
