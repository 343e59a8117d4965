//! API tokens, as an engine stores them: an id, the users the token may touch and the SHA-256
//! of its text, never the text itself.
//!
//! Making and checking tokens (random ids and secrets, hashing, constant-time comparison) is
//! the server's business (engram-server's `auth`); the store keeps rows and says when they may
//! have changed, so a server can remember what it checked until then.

use async_trait::async_trait;
use jiff::Timestamp;

use super::StoreError;

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// No token has this id.
    #[error("no token has the id '{0}' (see `engram token list`)")]
    NotFound(String),
    /// The token asked for is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// A stored row cannot be read back.
    #[error("token '{id}' is stored in a form this engram cannot read: {detail}")]
    Unreadable {
        /// The token's id.
        id: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A token as stored: everything but the secret and its hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApiToken {
    /// Public id, part of the token text.
    pub id: String,
    /// A name for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The users whose memories the token may touch, in the order given.
    pub users: Vec<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was last accepted (recorded at most about once a minute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<Timestamp>,
    /// When it was revoked; a revoked token is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Timestamp>,
}

impl ApiToken {
    /// True until the token is revoked.
    pub fn is_active(&self) -> bool {
        self.revoked_at.is_none()
    }
}

/// A token to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// Public id (unique).
    pub id: String,
    /// A name for people.
    pub name: Option<String>,
    /// The users it may touch (checked by the caller, at least one).
    pub users: Vec<String>,
    /// Lowercase hex SHA-256 of the whole token text.
    pub token_hash: String,
    /// When it was created (stored to the microsecond).
    pub created_at: Timestamp,
}

/// A stored token with the hash its text must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenWithHash {
    /// The token.
    pub token: ApiToken,
    /// Lowercase hex SHA-256 of its text.
    pub token_hash: String,
}

/// The API tokens.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Stores a new token. `false` (and nothing written) when its id is taken.
    async fn insert(&self, token: NewToken) -> Result<bool, TokenError>;

    /// Every token, revoked ones included, oldest first.
    async fn list(&self) -> Result<Vec<ApiToken>, TokenError>;

    /// How many tokens are not revoked.
    async fn active_count(&self) -> Result<u64, TokenError>;

    /// Revokes a token: from now on it is refused. Revoking twice keeps the first time.
    async fn revoke(&self, id: &str, now: Timestamp) -> Result<ApiToken, TokenError>;

    /// The token with this id, revoked or not, with its hash; `None` when there is none.
    async fn find(&self, id: &str) -> Result<Option<TokenWithHash>, TokenError>;

    /// Records that a token was just accepted.
    async fn touch(&self, id: &str, now: Timestamp) -> Result<(), TokenError>;

    /// A number that moves whenever a token may have changed, in any process (it may move
    /// more often): while it stands still, a token checked earlier is still what it was.
    async fn change_version(&self) -> Result<i64, TokenError>;

    /// [`TokenStore::change_version`] when it can be had at once, without waiting and without
    /// blocking (`None` otherwise: the caller then asks the long way). A server calls this on
    /// every request.
    fn try_change_version(&self) -> Option<i64>;
}
