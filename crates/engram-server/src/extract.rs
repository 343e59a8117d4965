//! Reading requests: JSON bodies and query strings, with errors that name the field.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode};

/// A JSON body, parsed strictly: it must be sent as `application/json`, fit the route's size
/// limit, and match the expected shape (unknown fields are refused by the types themselves).
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(req.headers().get(header::CONTENT_TYPE)) {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "the body must be JSON, sent with Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the request body is larger than this route accepts (see max_body_bytes and \
                     max_batch_body_bytes under [server] in config.toml)",
                )
            } else {
                ApiError::invalid(format!("cannot read the request body: {rejection}"))
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// The route's path parameters (`{id}` in `/v1/memories/{id}`), refused in the API's JSON error
/// shape: axum's own `Path` answers a plain-text 400 (for a segment that is not UTF-8 once
/// percent-decoded, say), which no client of a JSON API expects.
#[derive(Debug, Clone)]
pub struct PathParam<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParam<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(PathParam(value)),
            // A route whose parameters do not fit its handler: the server's fault.
            Err(rejection) if rejection.status().is_server_error() => Err(ApiError::new(
                ErrorCode::Internal,
                format!(
                    "the route's parameters cannot be read: {}",
                    rejection.body_text()
                ),
            )),
            Err(rejection) => Err(ApiError::invalid(format!(
                "the path is not valid: {}",
                rejection.body_text()
            ))),
        }
    }
}

fn is_json(content_type: Option<&axum::http::HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Parses a JSON document into `T`, telling bad JSON (`invalid_json`) from JSON of the wrong
/// shape (`invalid_request`, with the path of the offending field).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::new(
                ErrorCode::InvalidJson,
                format!("the body is not valid JSON: {inner}"),
            )
        } else if path.is_empty() || path == "." {
            ApiError::invalid(strip_position(&inner.to_string()))
        } else {
            ApiError::invalid(format!("{path}: {}", strip_position(&inner.to_string())))
        }
    })?;
    deserializer.end().map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    Ok(value)
}

/// serde_json's message without " at line 1 column 7" (the field path says where).
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(cut) => message[..cut].to_string(),
        None => message.to_string(),
    }
}

/// A query string as (key, value) pairs, in order, percent-decoded; keys may repeat.
#[derive(Debug, Clone, Default)]
pub struct QueryPairs(Vec<(String, String)>);

impl QueryPairs {
    /// Parses `a=1&b=2&a=3` (the part after `?`).
    pub fn parse(query: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// Every (key, value) pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Refuses keys not in `known`, naming them and the ones that are accepted.
    pub fn only(&self, known: &[&str]) -> Result<(), ApiError> {
        for (key, _) in &self.0 {
            if !known.contains(&key.as_str()) {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter '{key}' (expected one of: {})",
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The one value of `key`, if given; given twice is an error.
    pub fn single(&self, key: &str) -> Result<Option<&str>, ApiError> {
        let mut values = self
            .0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str());
        let first = values.next();
        if values.next().is_some() {
            return Err(ApiError::invalid(format!(
                "query parameter '{key}' is given more than once"
            )));
        }
        Ok(first)
    }

    /// Every value of `key`, each split at commas, without empty pieces.
    pub fn list(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Every value of `key`, as given (no comma splitting).
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The value of `key` parsed as a number within `min..=max`.
    pub fn number(&self, key: &str, min: usize, max: usize) -> Result<Option<usize>, ApiError> {
        let Some(raw) = self.single(key)? else {
            return Ok(None);
        };
        let n: usize = raw.trim().parse().map_err(|_| {
            ApiError::invalid(format!(
                "query parameter '{key}' must be a whole number, got '{raw}'"
            ))
        })?;
        if n < min || n > max {
            return Err(ApiError::invalid(format!(
                "query parameter '{key}' must be between {min} and {max}, got {n}"
            )));
        }
        Ok(Some(n))
    }

    /// The value of `key` as a boolean (`true`/`false`/`1`/`0`).
    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.single(key)?.map(|s| s.trim().to_ascii_lowercase()) {
            None => Ok(false),
            Some(v) if v == "true" || v == "1" || v.is_empty() => Ok(true),
            Some(v) if v == "false" || v == "0" => Ok(false),
            Some(v) => Err(ApiError::invalid(format!(
                "query parameter '{key}' must be true or false, got '{v}'"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        n: u8,
    }

    #[test]
    fn bad_json_and_bad_shapes_are_told_apart() {
        let err = parse_json::<Body>(b"{\"name\": ").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidJson);
        let err = parse_json::<Body>(b"{\"name\": \"a\", \"items\": [{\"n\": 1}, {\"m\": 2}]}")
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest);
        assert!(
            err.message.starts_with("items[1].m: unknown field `m`"),
            "{}",
            err.message
        );
        let err = parse_json::<Body>(b"{\"items\": []}").unwrap_err();
        assert_eq!(err.message, "missing field `name`");
        let err = parse_json::<Body>(b"{\"name\": \"a\", \"items\": []} x").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidJson);
    }

    #[test]
    fn query_pairs_repeat_and_split() {
        let q = QueryPairs::parse(Some("kind=fact,note&kind=episode&where=a%3Db&limit=5&x"));
        assert_eq!(q.list("kind"), vec!["fact", "note", "episode"]);
        assert_eq!(q.all("where"), vec!["a=b"]);
        assert_eq!(q.number("limit", 1, 10).unwrap(), Some(5));
        assert!(q.number("limit", 6, 10).is_err());
        assert!(q.only(&["kind", "where", "limit"]).is_err());
        assert!(q.flag("x").unwrap());
    }

    #[test]
    fn json_content_types() {
        let v = |s: &'static str| axum::http::HeaderValue::from_static(s);
        assert!(is_json(Some(&v("application/json"))));
        assert!(is_json(Some(&v("Application/JSON; charset=utf-8"))));
        assert!(is_json(Some(&v("application/merge-patch+json"))));
        assert!(!is_json(Some(&v("text/plain"))));
        assert!(!is_json(None));
    }
}
