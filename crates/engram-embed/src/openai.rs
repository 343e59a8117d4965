//! An embedder for any OpenAI-compatible `/v1/embeddings` endpoint: OpenAI itself, Ollama, vLLM,
//! LM Studio, llama.cpp's server.

use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use engram_core::embed::reject_blank_texts;
use engram_core::{EmbedError, Embedder, Embedding};
use serde::Deserialize;
use serde_json::json;

use crate::text::{cut_long_text, excerpt};

/// How to reach the endpoint and what to ask of it. (Its `Debug` form hides the API key.)
#[derive(Clone, PartialEq)]
pub struct OpenAiOptions {
    /// Base URL including the API version, like `OPENAI_BASE_URL`: `https://api.openai.com/v1`,
    /// `http://localhost:11434/v1` (Ollama). `/embeddings` is appended.
    pub base_url: String,
    /// The embedding model, e.g. `text-embedding-3-small` or `nomic-embed-text`.
    pub model: String,
    /// Sent as a bearer token when present.
    pub api_key: Option<String>,
    /// The vector length expected. Unset: known OpenAI models use their documented length,
    /// others take the length of the first answer. Any later mismatch is an error.
    pub dimension: Option<usize>,
    /// Ask the server for `dimension`-long vectors (the `dimensions` request field, which only
    /// some models accept, e.g. OpenAI's text-embedding-3 family).
    pub request_dimensions: bool,
    /// Texts per request.
    pub batch_size: usize,
    /// Time limit for one request.
    pub timeout: Duration,
    /// Retries after a rate limit (429), a server error (5xx), a timeout or a lost connection.
    pub max_retries: u32,
    /// Texts are cut to this many bytes (at a word boundary) before sending, since the endpoint
    /// rejects input longer than its window and its tokenizer is unknown here.
    pub max_input_bytes: usize,
}

impl OpenAiOptions {
    /// Options with the defaults for everything but the endpoint and model.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dimension: None,
            request_dimensions: false,
            batch_size: 64,
            timeout: Duration::from_secs(60),
            max_retries: 4,
            max_input_bytes: 8192,
        }
    }
}

impl std::fmt::Debug for OpenAiOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiOptions")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<hidden>"))
            .field("dimension", &self.dimension)
            .field("request_dimensions", &self.request_dimensions)
            .field("batch_size", &self.batch_size)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("max_input_bytes", &self.max_input_bytes)
            .finish()
    }
}

/// Documented vector lengths of OpenAI's embedding models.
fn known_dimension(model: &str) -> Option<usize> {
    match model {
        "text-embedding-3-small" | "text-embedding-ada-002" => Some(1536),
        "text-embedding-3-large" => Some(3072),
        _ => None,
    }
}

/// An OpenAI-compatible embeddings client.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    http: reqwest::Client,
    url: String,
    options: OpenAiOptions,
    model_id: String,
    /// 0 until known.
    dimension: AtomicUsize,
}

pub(crate) fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Another part of the process may have installed one already; that one is fine too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl OpenAiEmbedder {
    /// Checks the options and builds the client (no request is made).
    pub fn new(options: OpenAiOptions) -> Result<Self, EmbedError> {
        let base = options.base_url.trim_end_matches('/');
        let parsed = reqwest::Url::parse(base).map_err(|e| {
            EmbedError::Config(format!(
                "the embeddings base URL \"{}\" is not a URL ({e})",
                options.base_url
            ))
        })?;
        let host = match parsed.host_str() {
            Some(host) if matches!(parsed.scheme(), "http" | "https") => host.to_string(),
            _ => {
                return Err(EmbedError::Config(format!(
                    "the embeddings base URL \"{}\" must be an http:// or https:// URL",
                    options.base_url
                )));
            }
        };
        if options.model.trim().is_empty() {
            return Err(EmbedError::Config(
                "no embedding model is named for the OpenAI-compatible endpoint".into(),
            ));
        }
        if options.batch_size == 0 || options.max_input_bytes == 0 {
            return Err(EmbedError::Config(
                "batch_size and max_input_bytes must be at least 1".into(),
            ));
        }
        if options.request_dimensions && options.dimension.is_none() {
            return Err(EmbedError::Config(
                "request_dimensions needs a dimension to request".into(),
            ));
        }
        let authority = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let mut model_id = format!("openai:{}@{authority}", options.model);
        if let Some(dimension) = options.dimension.filter(|_| options.request_dimensions) {
            model_id.push_str(&format!("/{dimension}"));
        }

        install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("engram/", env!("CARGO_PKG_VERSION")));
        if host == "localhost" || host.starts_with("127.") || host == "[::1]" || host == "::1" {
            // A local model server is never behind the user's HTTP proxy.
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| EmbedError::Config(format!("cannot build the HTTP client: {e}")))?;
        let dimension = options
            .dimension
            .or_else(|| known_dimension(&options.model))
            .unwrap_or(0);
        Ok(Self {
            http,
            url: format!("{base}/embeddings"),
            options,
            model_id,
            dimension: AtomicUsize::new(dimension),
        })
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends one batch, retrying what is worth retrying.
    async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut body = json!({ "model": self.options.model, "input": texts });
        if self.options.request_dimensions {
            body["dimensions"] = json!(self.options.dimension);
        }
        let body = serde_json::to_vec(&body)
            .map_err(|e| EmbedError::BadResponse(format!("cannot encode the request: {e}")))?;
        let mut attempt = 0;
        loop {
            match self.send(&body).await {
                Ok(bytes) => return self.parse(&bytes, texts.len()),
                Err(Failure { error, retry_after }) => {
                    if attempt >= self.options.max_retries || !is_retryable(&error) {
                        return Err(error);
                    }
                    let backoff = Duration::from_millis(250 * 2u64.pow(attempt.min(6)));
                    let wait = retry_after
                        .unwrap_or(backoff)
                        .min(Duration::from_secs(30))
                        .max(backoff / 2);
                    tracing::warn!(url = %self.url, %error, attempt, "embedding request failed; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }

    async fn send(&self, body: &[u8]) -> Result<Vec<u8>, Failure> {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(key) = &self.options.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(e))?;
        if !status.is_success() {
            return Err(Failure {
                error: EmbedError::Http {
                    url: self.url.clone(),
                    status: status.as_u16(),
                    body: excerpt(&String::from_utf8_lossy(&bytes), 300),
                },
                retry_after,
            });
        }
        Ok(bytes.to_vec())
    }

    fn transport_error(&self, error: reqwest::Error) -> Failure {
        let error = if error.is_timeout() {
            EmbedError::Timeout {
                url: self.url.clone(),
                seconds: self.options.timeout.as_secs(),
            }
        } else {
            EmbedError::Network {
                url: self.url.clone(),
                detail: error_chain(&error),
            }
        };
        Failure {
            error,
            retry_after: None,
        }
    }

    /// Checks an answer and puts its vectors in input order.
    fn parse(&self, bytes: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let answer: EmbeddingsAnswer = serde_json::from_slice(bytes).map_err(|e| {
            EmbedError::BadResponse(format!(
                "{e}; the answer began: {}",
                excerpt(&String::from_utf8_lossy(bytes), 200)
            ))
        })?;
        if answer.data.len() != expected {
            return Err(EmbedError::BadResponse(format!(
                "{expected} texts were sent but {} vectors came back",
                answer.data.len()
            )));
        }
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; expected];
        for (position, item) in answer.data.into_iter().enumerate() {
            let index = item.index.unwrap_or(position);
            let slot = vectors.get_mut(index).ok_or_else(|| {
                EmbedError::BadResponse(format!(
                    "vector index {index} is out of range for {expected} texts"
                ))
            })?;
            if slot.is_some() {
                return Err(EmbedError::BadResponse(format!(
                    "vector index {index} appears twice"
                )));
            }
            self.check_dimension(item.embedding.len())?;
            *slot = Some(item.embedding);
        }
        vectors
            .into_iter()
            .map(|v| v.ok_or_else(|| EmbedError::BadResponse("a vector index is missing".into())))
            .collect()
    }

    /// The first vector fixes the dimension when nothing else did; every other must match it.
    fn check_dimension(&self, found: usize) -> Result<(), EmbedError> {
        if found == 0 {
            return Err(EmbedError::BadResponse("an empty vector came back".into()));
        }
        let expected =
            match self
                .dimension
                .compare_exchange(0, found, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => found,
                Err(known) => known,
            };
        if expected != found {
            return Err(EmbedError::WrongDimension {
                model: self.model_id.clone(),
                expected,
                found,
            });
        }
        Ok(())
    }
}

struct Failure {
    error: EmbedError,
    retry_after: Option<Duration>,
}

fn is_retryable(error: &EmbedError) -> bool {
    match error {
        EmbedError::Http { status, .. } => *status == 429 || (500..=599).contains(status),
        EmbedError::Network { .. } | EmbedError::Timeout { .. } => true,
        _ => false,
    }
}

/// The error and its causes on one line ("error sending request: connection refused").
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[derive(Deserialize)]
struct EmbeddingsAnswer {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The configured or learned length; 0 until the first answer when neither configured nor
    /// a known OpenAI model.
    fn dimension(&self) -> usize {
        self.dimension.load(Ordering::Acquire)
    }

    fn max_input_tokens(&self) -> Option<usize> {
        None
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>, EmbedError> {
        reject_blank_texts(texts)?;
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.options.batch_size) {
            let cut: Vec<&str> = batch
                .iter()
                .map(|t| cut_long_text(t, self.options.max_input_bytes))
                .collect();
            let vectors = self.embed_batch(&cut).await?;
            out.extend(vectors.into_iter().zip(batch.iter().zip(&cut)).map(
                |(vector, (text, sent))| Embedding {
                    vector,
                    truncated: sent.len() < text.len(),
                },
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_explained() {
        let err = OpenAiEmbedder::new(OpenAiOptions::new("localhost:11434", "m")).unwrap_err();
        assert!(err.to_string().contains("http:// or https://"), "{err}");
        let err = OpenAiEmbedder::new(OpenAiOptions::new("not a url", "m")).unwrap_err();
        assert!(err.to_string().contains("not a URL"), "{err}");
        let err = OpenAiEmbedder::new(OpenAiOptions::new("http://h/v1", " ")).unwrap_err();
        assert!(err.to_string().contains("no embedding model"), "{err}");
    }

    #[test]
    fn model_id_names_model_host_and_requested_dimension() {
        let e = OpenAiEmbedder::new(OpenAiOptions::new(
            "https://api.openai.com/v1/",
            "text-embedding-3-small",
        ))
        .unwrap();
        assert_eq!(e.model_id(), "openai:text-embedding-3-small@api.openai.com");
        assert_eq!(e.dimension(), 1536);
        assert_eq!(e.url(), "https://api.openai.com/v1/embeddings");

        let mut options = OpenAiOptions::new("http://127.0.0.1:11434/v1", "text-embedding-3-large");
        options.dimension = Some(256);
        options.request_dimensions = true;
        let e = OpenAiEmbedder::new(options).unwrap();
        assert_eq!(
            e.model_id(),
            "openai:text-embedding-3-large@127.0.0.1:11434/256"
        );
        assert_eq!(e.dimension(), 256);

        let e = OpenAiEmbedder::new(OpenAiOptions::new(
            "http://localhost:11434/v1",
            "nomic-embed-text",
        ))
        .unwrap();
        assert_eq!(e.dimension(), 0);
    }

    #[test]
    fn debug_output_hides_the_api_key() {
        let mut options = OpenAiOptions::new("http://localhost:1/v1", "m");
        options.api_key = Some("sk-very-secret".into());
        let embedder = OpenAiEmbedder::new(options.clone()).unwrap();
        for text in [format!("{options:?}"), format!("{embedder:?}")] {
            assert!(
                !text.contains("sk-very-secret") && text.contains("<hidden>"),
                "{text}"
            );
        }
    }

    #[test]
    fn only_transient_failures_are_retried() {
        let http = |status| EmbedError::Http {
            url: String::new(),
            status,
            body: String::new(),
        };
        assert!(is_retryable(&http(429)));
        assert!(is_retryable(&http(503)));
        assert!(!is_retryable(&http(400)));
        assert!(!is_retryable(&http(401)));
        assert!(is_retryable(&EmbedError::Timeout {
            url: String::new(),
            seconds: 1
        }));
        assert!(!is_retryable(&EmbedError::BadResponse(String::new())));
    }
}
