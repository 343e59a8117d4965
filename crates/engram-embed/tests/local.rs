//! The local embedder on the real all-MiniLM-L6-v2 model: batching, long and empty input, model
//! identity, and folders that are broken in every way the loader must notice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use engram_core::embed::cosine;
use engram_core::{EmbedError, Embedder};
use engram_embed::LocalEmbedder;
use serde_json::Value;

fn model() -> LocalEmbedder {
    LocalEmbedder::load(&common::test_model_dir()).unwrap()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 2e-5)
}

#[tokio::test]
async fn a_batch_gives_the_same_vectors_as_one_text_at_a_time() {
    let model = model();
    // Lengths vary a lot, so batches are padded; padding must not change any vector.
    let texts: Vec<String> = (0..70)
        .map(|i| {
            let words = ["memory", "coffee", "Lisbon", "guitar", "sister", "deadline"];
            (0..(1 + i * 7 % 45))
                .map(|j| words[(i + j) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let batch = model.embed(&texts).await.unwrap();
    assert_eq!(batch.len(), texts.len());
    for i in [0, 1, 13, 42, 69] {
        let single = model.embed_one(&texts[i]).await.unwrap();
        assert!(
            close(&batch[i].vector, &single.vector),
            "text {i} differs in a batch"
        );
        assert!((batch[i].norm() - 1.0).abs() < 1e-5, "normalised");
    }
    // Related texts are closer than unrelated ones.
    let v = model
        .embed(&[
            "My dog is called Max.".into(),
            "What is my dog's name?".into(),
            "The quarterly tax filing is due in April.".into(),
        ])
        .await
        .unwrap();
    assert!(cosine(&v[0].vector, &v[1].vector) > cosine(&v[0].vector, &v[2].vector) + 0.2);
}

#[tokio::test]
async fn long_texts_are_truncated_and_flagged_never_refused() {
    let model = model();
    let window = model.max_input_tokens().unwrap();
    assert_eq!(window, 256);
    let long = "the river walk at dawn was quiet and cold ".repeat(60); // ~540 tokens
    let longer = format!(
        "{long} {}",
        "entirely different ending about taxes ".repeat(200)
    );
    let huge = "word ".repeat(600_000); // 3 MB
    let spaced = format!("start {} end", " ".repeat(2_000_000)); // fits once whitespace is gone
    let one_word = "x".repeat(3_000_000); // the tokenizer reads it as one unknown token
    let start = std::time::Instant::now();
    let out = model
        .embed(&[long.clone(), longer, "short".into(), huge, spaced, one_word])
        .await
        .unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    assert!(out[0].truncated && out[1].truncated && out[3].truncated);
    assert!(!out[2].truncated);
    assert!(!out[4].truncated, "a text that fits the window is not cut");
    assert!(!out[5].truncated, "one token is not a truncation");
    // Only the first 256 tokens count: what comes after them changes nothing.
    assert!(close(&out[0].vector, &out[1].vector));
    for embedding in &out {
        assert_eq!(embedding.vector.len(), 384);
        assert!(embedding.vector.iter().all(|x| x.is_finite()));
    }
}

#[tokio::test]
async fn empty_input_is_handled_and_blank_texts_are_refused() {
    let model = model();
    assert!(model.embed(&[]).await.unwrap().is_empty());
    let err = model
        .embed(&["hello".into(), " \n\t ".into()])
        .await
        .unwrap_err();
    assert_eq!(err, EmbedError::EmptyText { index: 1 });
    assert_eq!(
        model.embed_one("").await.unwrap_err(),
        EmbedError::EmptyText { index: 0 }
    );
    // Odd but non-empty input embeds fine.
    let odd = model
        .embed(&["🙂".into(), "\u{0}".into(), "....".into(), "ﾃｽﾄ".into()])
        .await
        .unwrap();
    assert!(odd.iter().all(|e| e.vector.iter().all(|x| x.is_finite())));
}

#[tokio::test]
async fn concurrent_callers_share_one_model() {
    let model = model();
    let expected = model.embed_one("shared model").await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let model = model.clone();
            tokio::spawn(async move { model.embed_one("shared model").await.unwrap() })
        })
        .collect();
    for task in tasks {
        assert!(close(&task.await.unwrap().vector, &expected.vector));
    }
}

/// A copy of the test model to break; the weights are linked, not copied, unless replaced.
fn copy_model(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for name in [
        "config.json",
        "tokenizer.json",
        "modules.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
    ] {
        let target = copy.path().join(name);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(dir.join(name), target).unwrap();
    }
    std::os::unix::fs::symlink(
        dir.join("model.safetensors"),
        copy.path().join("model.safetensors"),
    )
    .unwrap();
    copy
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, serde_json::to_string(&value).unwrap()).unwrap();
}

fn load_error(dir: &Path) -> EmbedError {
    LocalEmbedder::load(dir).unwrap_err()
}

#[test]
fn model_id_follows_the_vector_space() {
    let original = common::test_model_dir();
    let a = LocalEmbedder::load(&original).unwrap();
    let b = LocalEmbedder::load(&original).unwrap();
    assert_eq!(a.model_id(), b.model_id(), "stable across loads");
    assert!(
        a.model_id().starts_with("local:all-MiniLM-L6-v2@"),
        "{}",
        a.model_id()
    );

    let copy = copy_model(&original);
    let same = LocalEmbedder::load(copy.path()).unwrap();
    assert_eq!(
        same.model_id().split('@').nth(1),
        a.model_id().split('@').nth(1),
        "same files, same hash"
    );
    edit_json(&copy.path().join("sentence_bert_config.json"), |v| {
        v["max_seq_length"] = 128.into()
    });
    let shorter = LocalEmbedder::load(copy.path()).unwrap();
    assert_ne!(
        shorter.model_id().split('@').nth(1),
        a.model_id().split('@').nth(1)
    );
    assert_eq!(shorter.max_input_tokens(), Some(128));
}

#[test]
fn every_missing_file_is_named() {
    let original = common::test_model_dir();
    for file in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "1_Pooling/config.json",
    ] {
        let copy = copy_model(&original);
        std::fs::remove_file(copy.path().join(file)).unwrap();
        let err = load_error(copy.path());
        assert!(
            matches!(&err, EmbedError::MissingFile { file: f, .. } if f == file),
            "{file}: {err:?}"
        );
        assert!(err.to_string().contains(file), "{err}");
    }
}

#[test]
fn shapes_that_do_not_fit_the_config_are_named() {
    let original = common::test_model_dir();
    let copy = copy_model(&original);
    edit_json(&copy.path().join("config.json"), |v| {
        v["intermediate_size"] = 1024.into()
    });
    let err = load_error(copy.path()).to_string();
    assert!(
        err.contains("encoder.layer.0.intermediate.dense.weight")
            && err.contains("[1536, 384]")
            && err.contains("[1024, 384]"),
        "{err}"
    );

    let copy = copy_model(&original);
    edit_json(&copy.path().join("config.json"), |v| {
        v["num_hidden_layers"] = 7.into()
    });
    let err = load_error(copy.path()).to_string();
    assert!(
        err.contains("encoder.layer.6") && err.contains("missing"),
        "{err}"
    );

    let copy = copy_model(&original);
    edit_json(&copy.path().join("1_Pooling/config.json"), |v| {
        v["word_embedding_dimension"] = 768.into()
    });
    let err = load_error(copy.path()).to_string();
    assert!(
        err.contains("768") && err.contains("hidden_size is 384"),
        "{err}"
    );
}

#[test]
fn damaged_weights_and_configs_are_named() {
    let original = common::test_model_dir();
    let copy = copy_model(&original);
    let weights = copy.path().join("model.safetensors");
    std::fs::remove_file(&weights).unwrap();
    let bytes = std::fs::read(original.join("model.safetensors")).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_error(copy.path());
    assert!(matches!(err, EmbedError::BadFile { .. }), "{err:?}");
    assert!(
        err.to_string().contains("model.safetensors") && err.to_string().contains("safetensors"),
        "{err}"
    );

    let copy = copy_model(&original);
    std::fs::write(copy.path().join("tokenizer.json"), "{\"version\": \"1.0\"}").unwrap();
    let err = load_error(copy.path()).to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("not a valid tokenizer"),
        "{err}"
    );

    let copy = copy_model(&original);
    edit_json(&copy.path().join("config.json"), |v| {
        v["model_type"] = "roberta".into()
    });
    let err = load_error(copy.path());
    assert!(matches!(err, EmbedError::Unsupported { .. }), "{err:?}");
}

#[test]
fn a_tokenizer_from_another_model_is_refused() {
    let original = common::test_model_dir();
    // More tokens than the model has rows.
    let copy = copy_model(&original);
    edit_json(&copy.path().join("tokenizer.json"), |v| {
        let vocab = v["model"]["vocab"].as_object_mut().unwrap();
        for i in 0..500 {
            vocab.insert(format!("[extra{i}]"), (30522 + i).into());
        }
    });
    let err = load_error(copy.path());
    assert_eq!(
        err,
        EmbedError::TokenizerMismatch {
            tokenizer_vocab: 31022,
            embedding_rows: 30522
        }
    );
    assert!(
        err.to_string().contains("does not belong to this model"),
        "{err}"
    );

    // Far fewer tokens than rows: a different vocabulary.
    let copy = copy_model(&original);
    edit_json(&copy.path().join("tokenizer.json"), |v| {
        let vocab = v["model"]["vocab"].as_object_mut().unwrap();
        vocab.retain(|_, id| id.as_u64().unwrap() < 20_000);
    });
    let err = load_error(copy.path());
    assert!(
        matches!(
            err,
            EmbedError::TokenizerMismatch {
                tokenizer_vocab: 20000,
                ..
            }
        ),
        "{err:?}"
    );
}
