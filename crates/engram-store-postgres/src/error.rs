//! Translating the driver's and the pool's failures into [`StoreError`]s a person can act on,
//! each one line that names the database (never its password).

use std::time::Duration;

use engram_core::StoreError;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;

/// Where a connection URL points, as a URL without its password (and without options):
/// `postgresql://engram@db.example.com:5432/memory`, or for a Unix socket
/// `postgresql://engram@/memory?host=/run/postgresql`.
pub fn describe_url(url: &str) -> String {
    match url.parse::<tokio_postgres::Config>() {
        Ok(config) => describe_config(&config),
        Err(_) => "an unreadable PostgreSQL URL".to_string(),
    }
}

pub(crate) fn describe_config(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let mut tcp = Vec::new();
    let mut sockets = Vec::new();
    for (i, host) in config.get_hosts().iter().enumerate() {
        match host {
            Host::Tcp(name) => tcp.push(format!("{name}:{}", port(i))),
            Host::Unix(dir) => sockets.push((dir.display().to_string(), port(i))),
        }
    }
    let user = config.get_user().unwrap_or("");
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    let database = config.get_dbname().unwrap_or(user);
    if tcp.is_empty() && !sockets.is_empty() {
        let hosts: Vec<&str> = sockets.iter().map(|(dir, _)| dir.as_str()).collect();
        let mut url = format!("postgresql://{at}/{database}?host={}", hosts.join(","));
        if sockets[0].1 != 5432 {
            url.push_str(&format!("&port={}", sockets[0].1));
        }
        return url;
    }
    let hosts = if tcp.is_empty() {
        "localhost:5432".to_string()
    } else {
        tcp.join(",")
    };
    format!("postgresql://{at}{hosts}/{database}")
}

/// Maps a driver error on the database described by `location` to a store error.
pub(crate) fn from_pg(err: &tokio_postgres::Error, location: &str) -> StoreError {
    if let Some(db) = err.as_db_error() {
        let code = db.code();
        let message = db.message();
        if *code == SqlState::DISK_FULL || *code == SqlState::OUT_OF_MEMORY {
            return StoreError::DiskFull;
        }
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return StoreError::Backend(format!(
                "PostgreSQL refused the login ({location}): {message}"
            ));
        }
        if *code == SqlState::INVALID_CATALOG_NAME {
            return StoreError::Unavailable {
                location: location.to_string(),
                detail: "the database does not exist; create it first (createdb)".to_string(),
            };
        }
        if *code == SqlState::INSUFFICIENT_PRIVILEGE || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        {
            return StoreError::ReadOnly {
                location: location.to_string(),
                detail: message.to_string(),
            };
        }
        if *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::LOCK_NOT_AVAILABLE
        {
            return StoreError::Backend(format!(
                "{location} was busy with another process's change ({message}); try again"
            ));
        }
        let class = code.code().get(..2).unwrap_or("");
        // 08: connection exception, 57: operator intervention (shutdown, restart), 53: resources.
        if matches!(class, "08" | "57" | "53") {
            return unavailable(location, message);
        }
        return StoreError::Backend(format!("PostgreSQL ({location}): {message}"));
    }
    if err.is_closed() {
        return unavailable(location, "the connection was closed");
    }
    // Without a server message: the connection could not be made or broke (an I/O error
    // somewhere in the chain), or engram and the database disagree (anything else).
    let mut detail = err.to_string();
    let mut io = false;
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        detail = inner.to_string();
        io |= inner.is::<std::io::Error>();
        source = inner.source();
    }
    if io {
        unavailable(location, &detail)
    } else {
        StoreError::Backend(format!("PostgreSQL ({location}): {err}"))
    }
}

fn unavailable(location: &str, detail: &str) -> StoreError {
    StoreError::Unavailable {
        location: location.to_string(),
        detail: detail.to_string(),
    }
}

/// Maps a pool error (no connection could be had) to a store error.
pub(crate) fn from_pool(
    err: deadpool_postgres::PoolError,
    location: &str,
    max_size: usize,
    wait: Duration,
) -> StoreError {
    use deadpool_postgres::PoolError;
    match err {
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => unavailable(
            location,
            &format!(
                "all {max_size} connections of this process stayed busy for {} s (raise \
                 ENGRAM_DATABASE_POOL_SIZE, or try again)",
                wait.as_secs_f64()
            ),
        ),
        PoolError::Timeout(_) => {
            unavailable(location, "connecting timed out; is the server running?")
        }
        PoolError::Backend(e) => from_pg(&e, location),
        PoolError::Closed => StoreError::Backend("the database connection pool is closed".into()),
        PoolError::NoRuntimeSpecified => {
            StoreError::Backend("the database pool has no async runtime".into())
        }
        PoolError::PostCreateHook(e) => StoreError::Backend(format!(
            "a new connection to {location} could not be set up: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_described_without_their_password() {
        let text =
            describe_url("postgres://engram:s3cret@db.example.com:6543/memory?sslmode=require");
        assert_eq!(text, "postgresql://engram@db.example.com:6543/memory");
        assert!(!text.contains("s3cret"));
        let socket = describe_url("postgresql://postgres@%2Frun%2Fpg/postgres");
        assert_eq!(socket, "postgresql://postgres@/postgres?host=/run/pg");
        let other_port = describe_url("postgresql:///engram?host=/tmp&port=6000&user=me");
        assert_eq!(other_port, "postgresql://me@/engram?host=/tmp&port=6000");
        assert_eq!(describe_url("mysql://x"), "an unreadable PostgreSQL URL");
    }
}
