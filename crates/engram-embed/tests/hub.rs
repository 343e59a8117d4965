//! Fetching models from a stand-in for the Hugging Face hub on 127.0.0.1 (serving the real test
//! model), and listing installed models.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::http::{Reply, TestServer};
use engram_core::Embedder;
use engram_embed::LocalEmbedder;
use engram_embed::hub::{self, FetchProgress, FetchRequest, HubError, HubSource};

const REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// The files of a model folder, by relative path.
fn model_files(dir: &Path) -> Arc<HashMap<String, Vec<u8>>> {
    let mut files = HashMap::new();
    for name in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
    ] {
        files.insert(name.to_string(), std::fs::read(dir.join(name)).unwrap());
    }
    Arc::new(files)
}

/// One file answered differently: its name and how to answer (given its real contents).
type Override = (&'static str, fn(&[u8]) -> Reply);

/// Serves `files` at `/<repo>/resolve/main/<file>` like the hub (weights via a redirect, as the
/// hub does for large files); `override_file` replaces the answer for one file.
async fn fake_hub(
    files: Arc<HashMap<String, Vec<u8>>>,
    override_file: Option<Override>,
) -> TestServer {
    TestServer::start(move |request| {
        let prefix = format!("/{REPO}/resolve/main/");
        if let Some(name) = request.path.strip_prefix("/cdn/") {
            return Reply::bytes(200, files[name].clone());
        }
        let Some(name) = request.path.strip_prefix(&prefix) else {
            return Reply::bytes(404, "Repository not found");
        };
        if let Some((_, reply)) = override_file.filter(|(file, _)| *file == name) {
            return reply(files.get(name).map(Vec::as_slice).unwrap_or_default());
        }
        match files.get(name) {
            Some(_) if name == "model.safetensors" => Reply::redirect("/cdn/model.safetensors"),
            Some(bytes) => Reply::bytes(200, bytes.clone()),
            None => Reply::bytes(404, "Entry not found"),
        }
    })
    .await
}

fn source(server: &TestServer) -> HubSource {
    let mut source = HubSource::from_env(&|key| match key {
        "HF_ENDPOINT" => Some(server.url()),
        "HF_TOKEN" => Some("hf_secret".into()),
        _ => None,
    });
    source.timeout = Duration::from_secs(10);
    source
}

/// Every entry of a folder (hidden ones included).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn a_model_is_fetched_checked_and_listed() {
    let files = model_files(&common::test_model_dir());
    let server = fake_hub(Arc::clone(&files), None).await;
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    let request = FetchRequest::new("all-MiniLM-L6-v2", &models);
    assert_eq!(request.repo_id, REPO);

    let mut events: Vec<(String, u64, Option<u64>)> = Vec::new();
    let installed = hub::fetch_model(&source(&server), &request, &mut |p: FetchProgress<'_>| {
        events.push((p.file.to_string(), p.bytes_done, p.bytes_total));
    })
    .await
    .unwrap();

    assert_eq!(installed.name, "all-MiniLM-L6-v2");
    assert_eq!(installed.path, models.join("all-MiniLM-L6-v2"));
    assert_eq!(installed.dimension, Some(384));
    assert_eq!(
        entries(&models),
        vec!["all-MiniLM-L6-v2"],
        "no staging folder left"
    );
    for (name, bytes) in files.iter() {
        assert_eq!(
            &std::fs::read(installed.path.join(name)).unwrap(),
            bytes,
            "{name}"
        );
    }
    let weights = files["model.safetensors"].len() as u64;
    assert!(installed.bytes >= weights);
    assert!(
        events.contains(&("model.safetensors".into(), weights, Some(weights))),
        "progress reaches the full size"
    );
    // Every request carried the token (the redirect target is on the same host here).
    for request in server.requests() {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer hf_secret"),
            "{}",
            request.path
        );
    }

    let model = LocalEmbedder::load(&installed.path).unwrap();
    assert_eq!(model.dimension(), 384);
    let listed = hub::list_models(&models).unwrap();
    assert_eq!(listed, vec![installed.clone()]);

    // A second fetch does not overwrite unless asked to.
    let err = hub::fetch_model(&source(&server), &request, &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::AlreadyInstalled { .. }), "{err:?}");
    let replace = FetchRequest {
        replace: true,
        ..request
    };
    hub::fetch_model(&source(&server), &replace, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(entries(&models), vec!["all-MiniLM-L6-v2"]);
}

async fn fetch_fails(override_file: Override) -> (HubError, PathBuf, usize) {
    let files = model_files(&common::test_model_dir());
    let server = fake_hub(files, Some(override_file)).await;
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    let mut source = source(&server);
    source.max_retries = 1;
    let request = FetchRequest::new(REPO, &models);
    let err = hub::fetch_model(&source, &request, &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        entries(&models).is_empty(),
        "nothing may be left behind after {err}: {:?}",
        entries(&models)
    );
    let requests = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with(override_file.0))
        .count();
    (err, models, requests)
}

#[tokio::test]
async fn a_missing_required_file_names_it_and_installs_nothing() {
    let (err, _, _) =
        fetch_fails(("tokenizer.json", |_| Reply::bytes(404, "Entry not found"))).await;
    assert!(
        matches!(&err, HubError::NotFound { file, .. } if file == "tokenizer.json"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("has no tokenizer.json at revision main"),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_optional_file_is_fine() {
    let files = model_files(&common::test_model_dir());
    let mut without = (*files).clone();
    without.remove("sentence_bert_config.json");
    let server = fake_hub(Arc::new(without), None).await;
    let home = tempfile::tempdir().unwrap();
    let request = FetchRequest::new(REPO, &home.path().join("models"));
    let installed = hub::fetch_model(&source(&server), &request, &mut |_| {})
        .await
        .unwrap();
    assert!(!installed.path.join("sentence_bert_config.json").exists());
    assert_eq!(installed.dimension, Some(384));
}

#[tokio::test]
async fn a_server_error_is_retried_then_reported() {
    let (err, _, requests) =
        fetch_fails(("config.json", |_| Reply::bytes(500, "internal error"))).await;
    assert!(
        matches!(&err, HubError::Http { status: 500, body, .. } if body == "internal error"),
        "{err:?}"
    );
    assert_eq!(requests, 2, "one try and one retry");
}

#[tokio::test]
async fn a_truncated_download_is_reported_and_discarded() {
    let (err, _, requests) = fetch_fails(("model.safetensors", |bytes| Reply::Truncated {
        announced: bytes.len(),
        body: bytes[..bytes.len() / 3].to_vec(),
    }))
    .await;
    assert!(
        matches!(&err, HubError::Truncated { file, expected, received } if file == "model.safetensors" && received < expected),
        "{err:?}"
    );
    assert_eq!(requests, 2, "retried once");
}

#[tokio::test]
async fn refused_access_mentions_the_token() {
    let (err, _, _) = fetch_fails(("config.json", |_| Reply::bytes(401, "unauthorized"))).await;
    assert!(err.to_string().contains("HF_TOKEN"), "{err}");
}

#[tokio::test]
async fn weights_that_do_not_load_are_not_installed() {
    let (err, _, _) = fetch_fails(("model.safetensors", |_| {
        Reply::bytes(200, "not weights at all")
    }))
    .await;
    assert!(matches!(err, HubError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

#[test]
fn listing_reports_broken_folders_and_skips_downloads_in_progress() {
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    assert!(
        hub::list_models(&models).unwrap().is_empty(),
        "no folder, no models"
    );
    std::fs::create_dir_all(models.join("broken")).unwrap();
    std::fs::write(models.join("broken/config.json"), "{}").unwrap();
    std::fs::create_dir_all(models.join(".mini.fetch-1-2")).unwrap();
    let listed = hub::list_models(&models).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "broken");
    assert_eq!(listed[0].dimension, None);
    assert!(
        listed[0]
            .problem
            .as_deref()
            .unwrap()
            .contains("tokenizer.json"),
        "{:?}",
        listed[0]
    );
}
