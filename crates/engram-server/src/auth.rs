//! Who is asking, and which users' memories they may touch.
//!
//! - A request with `Authorization: Bearer <token>` (or `Token <token>`, or the header
//!   `X-API-Key: <token>`, as Mem0's clients send it) must carry an active token: one made with
//!   `engram token create` (checked against the database on every request, so a revocation
//!   takes effect at once) or one listed by hash under `[server] tokens` in config.toml. It may
//!   touch the users the token is bound to.
//! - A request without a token is let in only while no token exists at all, only when the
//!   server listens on a loopback address, and only when its `Host` names this machine (which
//!   stops web pages from reaching the server through DNS rebinding). It may touch every user:
//!   it is the same person who could run `engram` on this machine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use engram_core::store::tokens::TokenStore;
use jiff::Timestamp;

use crate::config::ConfigToken;
use crate::error::{ApiError, ErrorCode};
use crate::tokens::{hash_token, hashes_match, verify_token};

/// How often a token's "last used" time is written, at most.
const TOUCH_INTERVAL: Duration = Duration::from_secs(60);

/// What a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// A local request while no token is configured, or the stdio MCP server: every user.
    Local,
    /// A request with a token: the users it is bound to.
    Token {
        /// The token's public id (`config:<name>` for tokens from config.toml).
        id: String,
        /// The users it may touch, in the order given when it was made.
        users: Vec<String>,
    },
}

impl Access {
    /// True when the request may touch this user's memories.
    pub fn allows(&self, user_id: &str) -> bool {
        match self {
            Access::Local => true,
            Access::Token { users, .. } => users.iter().any(|u| u == user_id),
        }
    }

    /// Refuses users the request may not touch, with a 403 that names the user it asked for.
    pub fn require(&self, user_id: &str) -> Result<(), ApiError> {
        if self.allows(user_id) {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("this token may not touch the memories of user '{user_id}'"),
            ))
        }
    }

    /// Who the audit trail records as making a change.
    pub fn actor(&self) -> String {
        match self {
            Access::Local => "api".to_string(),
            Access::Token { id, .. } => format!("api:{id}"),
        }
    }

    /// The user to act for when the request names none: the token's first user.
    pub fn default_user(&self) -> Option<&str> {
        match self {
            Access::Local => None,
            Access::Token { users, .. } => users.first().map(String::as_str),
        }
    }
}

/// What was learnt from the database while its change version stood at `version`.
#[derive(Debug, Default)]
struct Learnt {
    version: i64,
    /// Whether any token exists (for requests without one).
    configured: Option<bool>,
    /// Accepted tokens, by the SHA-256 of their text.
    accepted: HashMap<String, Access>,
}

/// Checks requests against the tokens in the database and in config.toml.
///
/// What a check learns from the database is remembered for as long as the token store's change
/// version stands still (it moves whenever a token may have changed, in any process: a new or
/// revoked token, and on SQLite any commit at all), so most requests are answered without a
/// database read ([`Authenticator::check_fast`]). Refusals are never remembered.
pub struct Authenticator {
    tokens: Arc<dyn TokenStore>,
    config_tokens: Vec<ConfigToken>,
    loopback: bool,
    last_touch: Mutex<HashMap<String, Instant>>,
    learnt: Mutex<Learnt>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("loopback", &self.loopback)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator for a server listening on a loopback address (`loopback`) or not.
    pub fn new(
        tokens: Arc<dyn TokenStore>,
        config_tokens: Vec<ConfigToken>,
        loopback: bool,
    ) -> Self {
        Self {
            tokens,
            config_tokens,
            loopback,
            last_touch: Mutex::new(HashMap::new()),
            learnt: Mutex::new(Learnt {
                version: i64::MIN,
                ..Learnt::default()
            }),
        }
    }

    /// True when at least one token exists (in the database or the config).
    pub async fn tokens_configured(&self) -> Result<bool, ApiError> {
        if !self.config_tokens.is_empty() {
            return Ok(true);
        }
        self.tokens
            .active_count()
            .await
            .map(|n| n > 0)
            .map_err(ApiError::from)
    }

    /// Decides what a request may do from what earlier checks learnt, without touching the
    /// database beyond a non-blocking look at its change version. `None` means "not known":
    /// call [`Authenticator::check`].
    pub fn check_fast(&self, headers: &HeaderMap) -> Option<Result<Access, ApiError>> {
        let version = self.tokens.try_change_version()?;
        let learnt = self.learnt.lock().unwrap_or_else(|e| e.into_inner());
        if learnt.version != version {
            return None;
        }
        let Some(presented) = credential(headers) else {
            let configured = learnt.configured?;
            return Some(self.anonymous(headers, configured));
        };
        let text = match presented {
            Ok(text) => text,
            Err(e) => return Some(Err(e)),
        };
        if let Some(access) = self.config_token(text) {
            return Some(Ok(access));
        }
        let access = learnt.accepted.get(&hash_token(text))?.clone();
        if let Access::Token { id, .. } = &access
            && self.touch_due(id)
        {
            return None;
        }
        Some(Ok(access))
    }

    /// Decides what a request with these headers may do, reading the database.
    pub async fn check(&self, headers: &HeaderMap) -> Result<Access, ApiError> {
        // Read first: a change that lands meanwhile moves the version on, so what is learnt
        // here is never taken for newer than it is.
        let version = self.tokens.change_version().await.map_err(ApiError::from)?;
        let Some(presented) = credential(headers) else {
            let configured = self.tokens_configured().await?;
            self.learn(version, |l| l.configured = Some(configured));
            return self.anonymous(headers, configured);
        };
        let text = presented?;
        if let Some(access) = self.config_token(text) {
            return Ok(access);
        }
        let token = verify_token(self.tokens.as_ref(), text)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Unauthorized,
                    "the token is not valid (unknown, wrong or revoked)",
                )
            })?;
        self.touch(&token.id).await;
        let access = Access::Token {
            id: token.id,
            users: token.users,
        };
        let hash = hash_token(text);
        self.learn(version, |l| {
            l.accepted.insert(hash, access.clone());
        });
        Ok(access)
    }

    /// Records something learnt at data version `version`, dropping what an older version
    /// taught.
    fn learn(&self, version: i64, record: impl FnOnce(&mut Learnt)) {
        let mut learnt = self.learnt.lock().unwrap_or_else(|e| e.into_inner());
        if learnt.version != version {
            *learnt = Learnt {
                version,
                ..Learnt::default()
            };
        }
        record(&mut learnt);
    }

    fn config_token(&self, text: &str) -> Option<Access> {
        if self.config_tokens.is_empty() {
            return None;
        }
        let hash = hash_token(text);
        // Compare with every entry, so the time taken does not say which one matched.
        let mut found = None;
        for (i, token) in self.config_tokens.iter().enumerate() {
            if hashes_match(&hash, &token.sha256.to_ascii_lowercase()) && found.is_none() {
                found = Some((i, token));
            }
        }
        found.map(|(i, token)| Access::Token {
            id: format!(
                "config:{}",
                token.name.clone().unwrap_or_else(|| (i + 1).to_string())
            ),
            users: token.users.clone(),
        })
    }

    fn anonymous(&self, headers: &HeaderMap, tokens_configured: bool) -> Result<Access, ApiError> {
        if !self.loopback || tokens_configured {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "a bearer token is required (Authorization: Bearer <token>; create one with `engram token create --user NAME`)",
            ));
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !is_local_host(host) {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "requests without a token must address this machine (Host: localhost, 127.0.0.1 or [::1]), not '{host}'"
                ),
            ));
        }
        Ok(Access::Local)
    }

    /// True when the token's last use was recorded a minute ago or more (or never).
    fn touch_due(&self, id: &str) -> bool {
        let last = self.last_touch.lock().unwrap_or_else(|e| e.into_inner());
        last.get(id).is_none_or(|at| at.elapsed() >= TOUCH_INTERVAL)
    }

    /// Records use, at most once a minute per token; a failure only costs the timestamp.
    async fn touch(&self, id: &str) {
        {
            let mut last = self.last_touch.lock().unwrap_or_else(|e| e.into_inner());
            if last.get(id).is_some_and(|at| at.elapsed() < TOUCH_INTERVAL) {
                return;
            }
            last.insert(id.to_string(), Instant::now());
        }
        if let Err(e) = self.tokens.touch(id, Timestamp::now()).await {
            tracing::warn!(token = id, error = %e, "cannot record the token's last use");
        }
    }
}

/// The header Mem0's open-source server reads API keys from.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The token a request presents, if any: `Authorization: Bearer <token>` (or `Token <token>`,
/// as Mem0's clients send it), else `X-API-Key: <token>`. A malformed header is an error, not
/// an absent token.
fn credential(headers: &HeaderMap) -> Option<Result<&str, ApiError>> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        return Some(authorization(value));
    }
    let value = headers.get(API_KEY_HEADER)?;
    Some(
        value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "the X-API-Key header is empty")),
    )
}

/// The token of an `Authorization: Bearer <token>` or `Authorization: Token <token>` header.
fn authorization(value: &axum::http::HeaderValue) -> Result<&str, ApiError> {
    value
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            let token = token.trim();
            (["bearer", "token"]
                .iter()
                .any(|s| scheme.eq_ignore_ascii_case(s))
                && !token.is_empty())
            .then_some(token)
        })
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unauthorized,
                "the Authorization header must read 'Bearer <token>' (or 'Token <token>')",
            )
        })
}

/// True for a Host header naming this machine (with or without a port).
pub fn is_local_host(host: &str) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        })
    };
    matches!(
        name.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use engram_store_sqlite::SqliteStore;
    use tempfile::TempDir;

    use crate::tokens::create_token;

    fn setup(
        loopback: bool,
        config: Vec<ConfigToken>,
    ) -> (TempDir, Arc<SqliteStore>, Authenticator) {
        let dir = TempDir::new().unwrap();
        let tokens = Arc::new(SqliteStore::open(dir.path().join("engram.db")).unwrap());
        let auth = Authenticator::new(tokens.clone(), config, loopback);
        (dir, tokens, auth)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[tokio::test]
    async fn local_requests_are_open_until_a_token_exists() {
        let (_dir, tokens, auth) = setup(true, vec![]);
        let local = headers(&[("host", "127.0.0.1:8420")]);
        assert_eq!(auth.check(&local).await.unwrap(), Access::Local);
        let err = auth
            .check(&headers(&[("host", "evil.example:8420")]))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Forbidden);

        let (token, text) = create_token(
            tokens.as_ref(),
            None,
            &["alice".to_string()],
            Timestamp::now(),
        )
        .await
        .unwrap();
        assert_eq!(
            auth.check(&local).await.unwrap_err().code,
            ErrorCode::Unauthorized
        );
        let with = headers(&[
            ("host", "127.0.0.1"),
            ("authorization", &format!("Bearer {text}")),
        ]);
        let access = auth.check(&with).await.unwrap();
        assert!(access.allows("alice") && !access.allows("bob"));
        assert_eq!(access.actor(), format!("api:{}", token.id));
        assert_eq!(access.default_user(), Some("alice"));
    }

    #[tokio::test]
    async fn tokens_are_read_from_bearer_token_and_x_api_key_alike() {
        let (_dir, tokens, auth) = setup(false, vec![]);
        let (_, text) = create_token(
            tokens.as_ref(),
            None,
            &["alice".to_string()],
            Timestamp::now(),
        )
        .await
        .unwrap();
        for (name, value) in [
            ("authorization", format!("Bearer {text}")),
            ("authorization", format!("Token {text}")),
            ("authorization", format!("token  {text} ")),
            ("x-api-key", text.clone()),
        ] {
            let access = auth.check(&headers(&[(name, &value)])).await.unwrap();
            assert!(
                access.allows("alice") && !access.allows("bob"),
                "{name}: {value}"
            );
        }
        let err = auth
            .check(&headers(&[("x-api-key", "engram_000_wrong")]))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Unauthorized);
    }

    #[tokio::test]
    async fn beyond_loopback_a_token_is_always_needed() {
        let (_dir, _tokens, auth) = setup(false, vec![]);
        let err = auth
            .check(&headers(&[("host", "localhost")]))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Unauthorized);
    }

    #[tokio::test]
    async fn wrong_and_malformed_tokens_are_refused_even_when_open() {
        let (_dir, _tokens, auth) = setup(true, vec![]);
        for value in ["Bearer nope", "Basic abc", "Bearer", "engram_x", "Token  "] {
            let err = auth
                .check(&headers(&[("host", "localhost"), ("authorization", value)]))
                .await
                .unwrap_err();
            assert_eq!(err.code, ErrorCode::Unauthorized, "{value}");
        }
    }

    #[tokio::test]
    async fn config_tokens_are_matched_by_hash() {
        let text = "my-long-random-config-token";
        let config = vec![ConfigToken {
            name: Some("laptop".into()),
            sha256: hash_token(text).to_ascii_uppercase(),
            users: vec!["me".into()],
        }];
        let (_dir, _tokens, auth) = setup(false, config);
        let access = auth
            .check(&headers(&[("authorization", &format!("bearer {text}"))]))
            .await
            .unwrap();
        assert_eq!(access.actor(), "api:config:laptop");
        assert!(access.allows("me"));
        assert!(auth.tokens_configured().await.unwrap());
    }

    #[tokio::test]
    async fn the_fast_path_answers_what_was_learnt_until_the_database_changes() {
        let (_dir, tokens, auth) = setup(true, vec![]);
        let (token, text) = create_token(
            tokens.as_ref(),
            None,
            &["alice".to_string()],
            Timestamp::now(),
        )
        .await
        .unwrap();
        let bearer = format!("Bearer {text}");
        let with = headers(&[("host", "localhost"), ("authorization", &bearer)]);
        assert!(auth.check_fast(&with).is_none(), "nothing learnt yet");
        auth.check(&with).await.unwrap();
        // Recording the token's use (another connection) moved the version: learn again.
        auth.check(&with).await.unwrap();
        assert!(matches!(
            auth.check_fast(&with),
            Some(Ok(Access::Token { .. }))
        ));
        let anonymous = headers(&[("host", "localhost")]);
        assert!(auth.check_fast(&anonymous).is_none());
        assert_eq!(
            auth.check(&anonymous).await.unwrap_err().code,
            ErrorCode::Unauthorized
        );
        let fast = auth.check_fast(&anonymous).unwrap().unwrap_err();
        assert_eq!(fast.code, ErrorCode::Unauthorized);
        // A revocation by another connection is seen at once.
        let other = SqliteStore::open(tokens.path()).unwrap();
        other.revoke(&token.id, Timestamp::now()).await.unwrap();
        assert!(auth.check_fast(&with).is_none());
        assert_eq!(
            auth.check(&with).await.unwrap_err().code,
            ErrorCode::Unauthorized
        );
        assert!(
            auth.check_fast(&with).is_none(),
            "refusals are not remembered"
        );
    }

    #[test]
    fn local_host_names() {
        for ok in [
            "localhost",
            "localhost:1",
            "127.0.0.1:80",
            "[::1]:8420",
            "[::1]",
            "LOCALHOST",
        ] {
            assert!(is_local_host(ok), "{ok}");
        }
        for bad in [
            "",
            "example.com",
            "127.0.0.2",
            "localhost.evil.com",
            "10.0.0.1:80",
        ] {
            assert!(!is_local_host(bad), "{bad}");
        }
    }
}
