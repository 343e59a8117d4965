//! The cross-encoder reranker against reference scores: a tiny random
//! BertForSequenceClassification checkpoint (tests/fixtures/tiny-cross-encoder) and the logits
//! of a numpy forward pass for a few (query, text) pairs, both made by
//! tests/fixtures/make_cross_encoder.py.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use engram_core::{EmbedError, Reranker};
use engram_embed::CrossEncoder;
use serde_json::Value;

const TOLERANCE: f64 = 1e-4;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-cross-encoder")
}

fn reference() -> (String, Vec<(String, f64)>) {
    let reference: Value =
        serde_json::from_str(include_str!("fixtures/cross_encoder_reference.json")).unwrap();
    let pairs = reference["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["text"].as_str().unwrap().to_string(),
                p["score"].as_f64().unwrap(),
            )
        })
        .collect();
    (reference["query"].as_str().unwrap().to_string(), pairs)
}

#[tokio::test]
async fn scores_match_the_reference_forward_pass_in_a_batch_and_alone() {
    let model = CrossEncoder::load(&fixture_dir()).unwrap();
    let (query, pairs) = reference();
    let texts: Vec<String> = pairs.iter().map(|(t, _)| t.clone()).collect();
    let together = model.score_blocking(&query, &texts).unwrap();
    assert_eq!(together.len(), pairs.len());
    for (i, ((text, expected), got)) in pairs.iter().zip(&together).enumerate() {
        let alone = model.score_blocking(&query, &texts[i..=i]).unwrap()[0];
        for (got, how) in [(*got, "in a batch"), (alone, "alone")] {
            let error = (f64::from(got) - expected).abs();
            assert!(
                error < TOLERANCE,
                "{text:?} {how}: {got} against the reference {expected} (off by {error})"
            );
        }
    }
    // The reference scores are spread out, so matching them checks something.
    let spread = pairs.iter().map(|p| p.1).fold(f64::MIN, f64::max)
        - pairs.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    assert!(spread > 1.0, "{spread}");
}

#[tokio::test]
async fn as_a_reranker_it_scores_every_text_in_order() {
    let model = CrossEncoder::load(&fixture_dir()).unwrap();
    let (query, pairs) = reference();
    let texts: Vec<String> = pairs.iter().map(|(t, _)| t.clone()).collect();
    assert!(model.name().starts_with("cross-encoder:tiny-cross-encoder"));
    let scores = model.score(&query, &texts).await.unwrap();
    for (score, (_, expected)) in scores.iter().zip(&pairs) {
        assert!((score.unwrap() - expected).abs() < TOLERANCE);
    }
    assert!(model.score(&query, &[]).await.unwrap().is_empty());
}

/// Copies the fixture into a scratch folder, letting `change` break it.
fn broken(change: impl FnOnce(&Path)) -> (tempfile::TempDir, PathBuf) {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("model");
    std::fs::create_dir(&dir).unwrap();
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(fixture_dir().join(file), dir.join(file)).unwrap();
    }
    change(&dir);
    (scratch, dir)
}

#[test]
fn a_folder_that_is_not_a_bert_cross_encoder_is_refused_with_the_reason() {
    let (_keep, dir) = broken(|dir| std::fs::remove_file(dir.join("tokenizer.json")).unwrap());
    match CrossEncoder::load(&dir) {
        Err(EmbedError::MissingFile { file, .. }) => assert_eq!(file, "tokenizer.json"),
        other => panic!("{other:?}"),
    }

    // An embedding model (no classifier) is not a cross-encoder.
    let (_keep, dir) = broken(|dir| {
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let tensors = safetensors_without(&bytes, "classifier.");
        std::fs::write(dir.join("model.safetensors"), tensors).unwrap();
    });
    let error = CrossEncoder::load(&dir).unwrap_err().to_string();
    assert!(error.contains("classifier.weight"), "{error}");

    let (_keep, dir) = broken(|dir| {
        let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let config = config.replace("\"hidden_size\": 32", "\"hidden_size\": 64");
        std::fs::write(dir.join("config.json"), config).unwrap();
    });
    let error = CrossEncoder::load(&dir).unwrap_err().to_string();
    assert!(error.contains("shape"), "{error}");
}

/// A safetensors file without the tensors whose names start with `prefix` (the format: an
/// 8-byte little-endian header length, a JSON header of names to dtype/shape/offsets, data).
fn safetensors_without(bytes: &[u8], prefix: &str) -> Vec<u8> {
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Value> =
        serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let data = &bytes[8 + header_len..];
    let mut kept = serde_json::Map::new();
    let mut out_data = Vec::new();
    for (name, info) in header {
        if name == "__metadata__" {
            kept.insert(name, info);
            continue;
        }
        if name.starts_with(prefix) {
            continue;
        }
        let offsets = info["data_offsets"].as_array().unwrap();
        let (start, end) = (
            offsets[0].as_u64().unwrap() as usize,
            offsets[1].as_u64().unwrap() as usize,
        );
        let mut info = info.clone();
        info["data_offsets"] = serde_json::json!([out_data.len(), out_data.len() + end - start]);
        out_data.extend_from_slice(&data[start..end]);
        kept.insert(name, info);
    }
    let mut header = serde_json::to_vec(&Value::Object(kept)).unwrap();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(out_data);
    out
}
