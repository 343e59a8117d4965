//! Which memories a list or a search may look at.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::memory::{Importance, Kind};

/// Conditions a memory must meet. Every search and listing is confined to one user.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// The user whose memories are searched (required).
    pub user_id: String,
    /// Only memories of this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Only memories of this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Only these kinds (any kind when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<Kind>,
    /// Only these categories (any category when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// Only memories created at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// Only memories created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
    /// Only memories at least this important.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_importance: Option<Importance>,
    /// Metadata equalities that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<MetaCondition>,
    /// Also show memories that were invalidated or have expired.
    #[serde(default)]
    pub include_closed: bool,
}

impl Filter {
    /// Everything current of one user.
    pub fn user(user_id: impl Into<String>) -> Self {
        Self {
            user_id: user_id.into(),
            ..Self::default()
        }
    }
}

/// `key=value`: the memory's metadata has `key` at top level and its value equals `value`
/// (strings compare as text; numbers and booleans by their JSON spelling, so `n=3` matches `3`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaCondition {
    /// Top-level metadata key.
    pub key: String,
    /// The value it must have.
    pub value: String,
}

/// The error for a condition not written as `key=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a key=value pair")]
pub struct ParseMetaError(pub String);

impl FromStr for MetaCondition {
    type Err = ParseMetaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok(Self {
                key: key.trim().to_string(),
                value: value.to_string(),
            }),
            _ => Err(ParseMetaError(s.to_string())),
        }
    }
}

impl fmt::Display for MetaCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_conditions_split_at_the_first_equals() {
        let c: MetaCondition = "url=a=b".parse().unwrap();
        assert_eq!((c.key.as_str(), c.value.as_str()), ("url", "a=b"));
        assert!("novalue".parse::<MetaCondition>().is_err());
        assert!("=x".parse::<MetaCondition>().is_err());
        let empty: MetaCondition = "k=".parse().unwrap();
        assert_eq!(empty.value, "");
    }
}
