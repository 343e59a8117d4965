//! The local embedder against vectors computed by sentence-transformers itself
//! (tests/fixtures/reference.json, made by tests/fixtures/make_reference.py).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use engram_core::Embedder;
use engram_core::embed::cosine;
use engram_embed::LocalEmbedder;
use serde_json::Value;

const TOLERANCE: f64 = 1e-4;

fn reference() -> Value {
    serde_json::from_str(include_str!("fixtures/reference.json")).unwrap()
}

#[tokio::test]
async fn vectors_match_sentence_transformers() {
    let model = LocalEmbedder::load(&common::test_model_dir()).unwrap();
    let reference = reference();
    assert_eq!(
        model.dimension(),
        reference["dimension"].as_u64().unwrap() as usize
    );
    assert_eq!(
        model.max_input_tokens(),
        Some(reference["max_seq_length"].as_u64().unwrap() as usize)
    );
    let sentences = reference["sentences"].as_array().unwrap();
    let texts: Vec<String> = sentences
        .iter()
        .map(|s| s["text"].as_str().unwrap().to_string())
        .collect();
    let embeddings = model.embed(&texts).await.unwrap();
    assert_eq!(embeddings.len(), texts.len());

    for (sentence, embedding) in sentences.iter().zip(&embeddings) {
        let text = sentence["text"].as_str().unwrap();
        let expected: Vec<f64> = sentence["first_dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for (i, (got, want)) in embedding.vector.iter().zip(&expected).enumerate() {
            assert!(
                (f64::from(*got) - want).abs() < TOLERANCE,
                "dimension {i} of {text:?}: got {got}, sentence-transformers gives {want}"
            );
        }
        let norm = sentence["norm"].as_f64().unwrap();
        assert!(
            (f64::from(embedding.norm()) - norm).abs() < TOLERANCE,
            "norm of {text:?}"
        );
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
            let got = cosine(&embeddings[i].vector, &embeddings[j].vector);
            let want = want.as_f64().unwrap();
            assert!(
                (f64::from(got) - want).abs() < TOLERANCE,
                "cosine({i}, {j}) = {got}, sentence-transformers gives {want}"
            );
        }
    }
}
