//! The MPNet encoder against vectors computed by sentence-transformers itself with
//! all-mpnet-base-v2 (tests/fixtures/mpnet_reference.json, made by
//! tests/fixtures/make_mpnet_reference.py). One test: the model is 440 MB and loading it is the
//! slow part.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use engram_core::Embedder;
use engram_core::embed::cosine;
use engram_embed::LocalEmbedder;
use serde_json::Value;

const TOLERANCE: f64 = 1e-4;

/// The all-mpnet-base-v2 folder. Fails (never skips) when it is not there.
fn mpnet_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("ENGRAM_TEST_MPNET_DIR") else {
        panic!(
            "ENGRAM_TEST_MPNET_DIR is not set: run the tests with scripts/test.sh, or export \
             ENGRAM_TEST_MPNET_DIR=\"$(scripts/fetch-mpnet-model.sh)\" from the repository root first"
        );
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("model.safetensors").is_file(),
        "ENGRAM_TEST_MPNET_DIR={} holds no model.safetensors: run scripts/fetch-mpnet-model.sh",
        dir.display()
    );
    dir
}

#[tokio::test]
async fn mpnet_vectors_match_sentence_transformers() {
    let model = LocalEmbedder::load(&mpnet_dir()).unwrap();
    let reference: Value =
        serde_json::from_str(include_str!("fixtures/mpnet_reference.json")).unwrap();
    assert_eq!(
        model.dimension(),
        reference["dimension"].as_u64().unwrap() as usize
    );
    assert_eq!(
        model.max_input_tokens(),
        Some(reference["max_seq_length"].as_u64().unwrap() as usize)
    );
    assert!(model.normalizes());
    let sentences = reference["sentences"].as_array().unwrap();
    let texts: Vec<String> = sentences
        .iter()
        .map(|s| s["text"].as_str().unwrap().to_string())
        .collect();
    // One batch (padded to the longest text) and one text at a time must agree with the
    // reference alike.
    let together = model.embed(&texts).await.unwrap();
    assert_eq!(together.len(), texts.len());
    for (i, (sentence, embedding)) in sentences.iter().zip(&together).enumerate() {
        let text = sentence["text"].as_str().unwrap();
        let alone = model.embed(&texts[i..=i]).await.unwrap().remove(0);
        for (vector, how) in [(&embedding.vector, "in a batch"), (&alone.vector, "alone")] {
            let expected = sentence["vector"].as_array().unwrap();
            assert_eq!(vector.len(), expected.len());
            for (d, (got, want)) in vector.iter().zip(expected).enumerate() {
                let want = want.as_f64().unwrap();
                assert!(
                    (f64::from(*got) - want).abs() < TOLERANCE,
                    "dimension {d} of {text:?} {how}: got {got}, sentence-transformers gives {want}"
                );
            }
        }
        let tokens = sentence["tokens_untruncated"].as_u64().unwrap() as usize;
        assert_eq!(
            embedding.truncated,
            tokens > model.max_input_tokens().unwrap(),
            "truncation flag of {text:?} ({tokens} tokens)"
        );
    }
    let cosines = reference["cosines"].as_array().unwrap();
    for (i, row) in cosines.iter().enumerate() {
        for (j, want) in row.as_array().unwrap().iter().enumerate() {
            let got = cosine(&together[i].vector, &together[j].vector);
            let want = want.as_f64().unwrap();
            assert!(
                (f64::from(got) - want).abs() < TOLERANCE,
                "cosine({i}, {j}) = {got}, sentence-transformers gives {want}"
            );
        }
    }
}
