//! Installing sentence-transformers models from the Hugging Face hub, and listing installed ones.
//!
//! Files come from `{endpoint}/{repo}/resolve/{revision}/{file}`, the hub's download address;
//! the endpoint is `HF_ENDPOINT` (default `https://huggingface.co`) and `HF_TOKEN` is sent as a
//! bearer token when set, as the hub's own tools do. A model is downloaded into a hidden
//! temporary folder next to its destination, checked by loading it, and only then renamed into
//! place, so an interrupted or failed download never leaves a half-written model folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use engram_core::{EmbedError, Embedder};
use tokio::io::AsyncWriteExt;

use crate::local::LocalEmbedder;
use crate::local::folder::ModelFolder;
use crate::text::excerpt;

/// The public hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The model `engram model fetch` installs when none is named.
pub const DEFAULT_REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// Files downloaded, and whether the model is unusable without them.
const FILES: [(&str, bool); 7] = [
    ("config.json", true),
    ("tokenizer.json", true),
    ("model.safetensors", true),
    ("modules.json", false),
    ("sentence_bert_config.json", false),
    ("1_Pooling/config.json", false),
    ("tokenizer_config.json", false),
];

/// Why fetching or listing models failed. Every variant reads as a complete one-line message.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The repository or revision is not well formed.
    #[error("{0}")]
    BadRequest(String),
    /// A required file is not in the repository.
    #[error(
        "{repo} has no {file} at revision {revision}; is it a sentence-transformers model with safetensors weights?"
    )]
    NotFound {
        /// The repository.
        repo: String,
        /// The revision.
        revision: String,
        /// The missing file.
        file: String,
    },
    /// The hub refused access.
    #[error(
        "the hub refused access to {url} (HTTP {status}); if the model is gated or private, set HF_TOKEN"
    )]
    Unauthorized {
        /// The URL.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// The hub answered with another HTTP error.
    #[error("downloading {url} failed with HTTP {status}: {body}")]
    Http {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The start of the answer.
        body: String,
    },
    /// The hub could not be reached.
    #[error("cannot reach the hub at {url}: {detail}")]
    Network {
        /// The URL.
        url: String,
        /// What the connection reported.
        detail: String,
    },
    /// The connection ended before the whole file arrived.
    #[error("the download of {file} stopped after {received} of {expected} bytes; try again")]
    Truncated {
        /// The file.
        file: String,
        /// Bytes announced.
        expected: u64,
        /// Bytes received.
        received: u64,
    },
    /// A local file could not be written or read.
    #[error("cannot write {}: {detail}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the system said.
        detail: String,
    },
    /// The destination already holds a model.
    #[error("{} already exists; remove it first or fetch with replace", dir.display())]
    AlreadyInstalled {
        /// The destination.
        dir: PathBuf,
    },
    /// The downloaded files do not make a usable model; nothing was installed.
    #[error("the downloaded model cannot be used, so it was not installed: {0}")]
    Invalid(#[from] EmbedError),
}

/// Where models come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSource {
    /// The hub's address, e.g. `https://huggingface.co` or a mirror.
    pub endpoint: String,
    /// Sent as a bearer token when set (gated and private models).
    pub token: Option<String>,
    /// Time allowed without progress on a request (connecting, or between chunks).
    pub timeout: Duration,
    /// Retries of a file after a server error or a lost connection.
    pub max_retries: u32,
}

impl HubSource {
    /// The source the environment describes: `HF_ENDPOINT` and `HF_TOKEN` (or the older
    /// `HUGGING_FACE_HUB_TOKEN`).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let set = |key: &str| env(key).filter(|v| !v.trim().is_empty());
        Self {
            endpoint: set("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            token: set("HF_TOKEN").or_else(|| set("HUGGING_FACE_HUB_TOKEN")),
            timeout: Duration::from_secs(30),
            max_retries: 2,
        }
    }
}

/// What to fetch and where to put it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// `owner/name` on the hub.
    pub repo_id: String,
    /// Branch, tag or commit; usually `main`.
    pub revision: String,
    /// The model folder to create, e.g. `ENGRAM_HOME/models/all-MiniLM-L6-v2`.
    pub dest_dir: PathBuf,
    /// Replace an existing folder there (only once the new one is complete and checked).
    pub replace: bool,
}

impl FetchRequest {
    /// Fetches `name` at `main` into `models_dir/<last part of the name>`. A bare name (no
    /// owner) is taken from `sentence-transformers/`.
    pub fn new(name: &str, models_dir: &Path) -> Self {
        let repo_id = repo_for(name);
        let dest_dir = models_dir.join(folder_name(&repo_id));
        Self {
            repo_id,
            revision: "main".into(),
            dest_dir,
            replace: false,
        }
    }
}

/// `owner/name` for a model name: names without an owner belong to `sentence-transformers`.
pub fn repo_for(name: &str) -> String {
    let name = name.trim().trim_matches('/');
    if name.contains('/') {
        name.to_string()
    } else {
        format!("sentence-transformers/{name}")
    }
}

/// The folder a repository is installed in: its name without the owner.
pub fn folder_name(repo_id: &str) -> &str {
    repo_id.rsplit('/').next().unwrap_or(repo_id)
}

/// Download progress, reported after every chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchProgress<'a> {
    /// The file being downloaded (relative to the model folder).
    pub file: &'a str,
    /// Its position among the files (0-based).
    pub file_index: usize,
    /// How many files may be downloaded.
    pub file_count: usize,
    /// Bytes of this file received so far.
    pub bytes_done: u64,
    /// Its size, when the hub announced it.
    pub bytes_total: Option<u64>,
}

/// An installed model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledModel {
    /// Folder name (what `ENGRAM_EMBED_MODEL` and `model_dir` accept).
    pub name: String,
    /// The folder.
    pub path: PathBuf,
    /// Vector length, when the folder is readable.
    pub dimension: Option<usize>,
    /// Total size of its files.
    pub bytes: u64,
    /// Why it cannot be used, if it cannot.
    pub problem: Option<String>,
}

/// Downloads a model, checks it loads, and installs it at `request.dest_dir`.
pub async fn fetch_model(
    source: &HubSource,
    request: &FetchRequest,
    progress: &mut (dyn FnMut(FetchProgress<'_>) + Send),
) -> Result<InstalledModel, HubError> {
    check_repo_id(&request.repo_id)?;
    check_revision(&request.revision)?;
    let dest = &request.dest_dir;
    if dest.exists() && !request.replace {
        return Err(HubError::AlreadyInstalled { dir: dest.clone() });
    }
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| HubError::BadRequest(format!("{} is not a folder name", dest.display())))?;
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(|e| io_error(parent, e))?;
    let staging = TempDir::create(parent, &name)?;

    let client = http_client(source)?;
    let endpoint = source.endpoint.trim_end_matches('/');
    let revision = request.revision.replace('/', "%2F");
    for (index, (file, required)) in FILES.iter().enumerate() {
        let url = format!("{endpoint}/{}/resolve/{revision}/{file}", request.repo_id);
        let target = staging.path.join(file);
        let mut report = |bytes_done, bytes_total| {
            progress(FetchProgress {
                file,
                file_index: index,
                file_count: FILES.len(),
                bytes_done,
                bytes_total,
            })
        };
        let found =
            download_with_retries(&client, source, &url, file, &target, &mut report).await?;
        if !found && *required {
            return Err(HubError::NotFound {
                repo: request.repo_id.clone(),
                revision: request.revision.clone(),
                file: (*file).to_string(),
            });
        }
    }

    // Load it once: a model that does not load is not installed.
    let check_dir = staging.path.clone();
    let dimension = tokio::task::spawn_blocking(move || {
        LocalEmbedder::load(&check_dir).map(|model| model.dimension())
    })
    .await
    .map_err(|e| HubError::Invalid(EmbedError::Inference(e.to_string())))??;

    let path = staging.install(dest, request.replace)?;
    Ok(InstalledModel {
        name,
        bytes: folder_size(&path),
        path,
        dimension: Some(dimension),
        problem: None,
    })
}

/// The models installed in `models_dir` (sorted by name), each with its size and dimension,
/// or the reason it cannot be used. A missing folder means none are installed.
pub fn list_models(models_dir: &Path) -> Result<Vec<InstalledModel>, HubError> {
    let entries = match std::fs::read_dir(models_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(models_dir, e)),
    };
    let mut models = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(models_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        // Hidden folders are downloads in progress (or left by a crash).
        if name.starts_with('.') || !path.is_dir() {
            continue;
        }
        let (dimension, problem) = match ModelFolder::read(&path) {
            Ok(folder) => (Some(folder.dimension()), None),
            Err(e) => (None, Some(e.to_string())),
        };
        models.push(InstalledModel {
            name,
            bytes: folder_size(&path),
            path,
            dimension,
            problem,
        });
    }
    models.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(models)
}

fn folder_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => folder_size(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

fn check_repo_id(repo_id: &str) -> Result<(), HubError> {
    let parts: Vec<&str> = repo_id.split('/').collect();
    let well_formed = parts.len() == 2
        && parts.iter().all(|part| {
            !part.is_empty()
                && *part != "."
                && *part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    if well_formed {
        Ok(())
    } else {
        Err(HubError::BadRequest(format!(
            "\"{repo_id}\" is not a hub repository name (owner/name, letters, digits, - _ .)"
        )))
    }
}

fn check_revision(revision: &str) -> Result<(), HubError> {
    let ok = !revision.is_empty()
        && !revision.split('/').any(|p| p.is_empty() || p == "..")
        && revision
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(())
    } else {
        Err(HubError::BadRequest(format!(
            "\"{revision}\" is not a branch, tag or commit name"
        )))
    }
}

fn http_client(source: &HubSource) -> Result<reqwest::Client, HubError> {
    crate::openai::install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(source.timeout)
        .read_timeout(source.timeout)
        .user_agent(concat!("engram/", env!("CARGO_PKG_VERSION")));
    let host = reqwest::Url::parse(&source.endpoint)
        .map_err(|e| {
            HubError::BadRequest(format!(
                "HF_ENDPOINT \"{}\" is not a URL ({e})",
                source.endpoint
            ))
        })?
        .host_str()
        .unwrap_or_default()
        .to_string();
    if host == "localhost" || host.starts_with("127.") || host == "[::1]" {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| HubError::BadRequest(format!("cannot build the HTTP client: {e}")))
}

fn io_error(path: &Path, error: std::io::Error) -> HubError {
    HubError::Io {
        path: path.to_path_buf(),
        detail: error.to_string(),
    }
}

fn is_retryable(error: &HubError) -> bool {
    match error {
        HubError::Http { status, .. } => *status == 429 || (500..=599).contains(status),
        HubError::Network { .. } | HubError::Truncated { .. } => true,
        _ => false,
    }
}

/// Downloads one file; `Ok(false)` when the hub does not have it (404).
async fn download_with_retries(
    client: &reqwest::Client,
    source: &HubSource,
    url: &str,
    file: &str,
    target: &Path,
    progress: &mut (dyn FnMut(u64, Option<u64>) + Send),
) -> Result<bool, HubError> {
    let mut attempt = 0;
    loop {
        match download(client, source, url, file, target, progress).await {
            Err(error) if attempt < source.max_retries && is_retryable(&error) => {
                let wait = Duration::from_millis(200 * 2u64.pow(attempt.min(5)));
                tracing::warn!(%url, %error, "download failed; retrying in {wait:?}");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

async fn download(
    client: &reqwest::Client,
    source: &HubSource,
    url: &str,
    file: &str,
    target: &Path,
    progress: &mut (dyn FnMut(u64, Option<u64>) + Send),
) -> Result<bool, HubError> {
    let network = |e: reqwest::Error| HubError::Network {
        url: url.to_string(),
        detail: crate::openai::error_chain(&e),
    };
    let mut request = client.get(url);
    if let Some(token) = &source.token {
        request = request.bearer_auth(token);
    }
    let mut response = request.send().await.map_err(network)?;
    let status = response.status().as_u16();
    match status {
        200..=299 => {}
        404 => return Ok(false),
        401 | 403 => {
            return Err(HubError::Unauthorized {
                url: url.to_string(),
                status,
            });
        }
        _ => {
            let body = response.bytes().await.unwrap_or_default();
            return Err(HubError::Http {
                url: url.to_string(),
                status,
                body: excerpt(&String::from_utf8_lossy(&body), 200),
            });
        }
    }
    let total = response.content_length();
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io_error(parent, e))?;
    }
    let mut out = tokio::fs::File::create(target)
        .await
        .map_err(|e| io_error(target, e))?;
    let mut done = 0u64;
    progress(0, total);
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                return Err(match total {
                    Some(expected) => HubError::Truncated {
                        file: file.to_string(),
                        expected,
                        received: done,
                    },
                    None => network(e),
                });
            }
        };
        out.write_all(&chunk)
            .await
            .map_err(|e| io_error(target, e))?;
        done += chunk.len() as u64;
        progress(done, total);
    }
    out.sync_all().await.map_err(|e| io_error(target, e))?;
    if let Some(expected) = total.filter(|expected| *expected != done) {
        return Err(HubError::Truncated {
            file: file.to_string(),
            expected,
            received: done,
        });
    }
    Ok(true)
}

/// A hidden staging folder, removed on drop unless installed.
struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    fn create(parent: &Path, name: &str) -> Result<Self, HubError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path = parent.join(format!(".{name}.fetch-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| io_error(&path, e))?;
        Ok(Self { path, keep: false })
    }

    /// Renames the staging folder to `dest` (moving an old folder aside first when replacing).
    fn install(mut self, dest: &Path, replace: bool) -> Result<PathBuf, HubError> {
        let old = if replace && dest.exists() {
            let aside = self.path.with_extension("old");
            std::fs::rename(dest, &aside).map_err(|e| io_error(dest, e))?;
            Some(aside)
        } else {
            None
        };
        if let Err(e) = std::fs::rename(&self.path, dest) {
            if let Some(aside) = &old {
                // Put the previous model back rather than leave nothing.
                let _ = std::fs::rename(aside, dest);
            }
            return Err(if dest.exists() {
                HubError::AlreadyInstalled {
                    dir: dest.to_path_buf(),
                }
            } else {
                io_error(dest, e)
            });
        }
        self.keep = true;
        if let Some(aside) = old {
            let _ = std::fs::remove_dir_all(aside);
        }
        Ok(dest.to_path_buf())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_repositories_and_folders() {
        assert_eq!(repo_for("all-MiniLM-L6-v2"), DEFAULT_REPO);
        assert_eq!(repo_for("BAAI/bge-small-en-v1.5"), "BAAI/bge-small-en-v1.5");
        assert_eq!(folder_name("BAAI/bge-small-en-v1.5"), "bge-small-en-v1.5");
        let request = FetchRequest::new("all-MiniLM-L6-v2", Path::new("/h/models"));
        assert_eq!(request.dest_dir, Path::new("/h/models/all-MiniLM-L6-v2"));
        assert_eq!(request.revision, "main");
    }

    #[test]
    fn malformed_names_are_refused() {
        for bad in ["a", "a/b/c", "../x", "a/..", "a b/c", "a/"] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
        assert!(check_repo_id("sentence-transformers/all-MiniLM-L6-v2").is_ok());
        assert!(check_revision("refs/pr/1").is_ok());
        assert!(check_revision("../main").is_err());
        assert!(check_revision("").is_err());
    }

    #[test]
    fn the_environment_chooses_endpoint_and_token() {
        let source = HubSource::from_env(&|key| match key {
            "HF_ENDPOINT" => Some("http://127.0.0.1:9/".into()),
            "HUGGING_FACE_HUB_TOKEN" => Some("t".into()),
            _ => None,
        });
        assert_eq!(source.endpoint, "http://127.0.0.1:9/");
        assert_eq!(source.token.as_deref(), Some("t"));
        let source = HubSource::from_env(&|_| None);
        assert_eq!(source.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(source.token, None);
    }
}
