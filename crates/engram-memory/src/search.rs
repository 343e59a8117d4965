//! Finding memories again: lexical and dense candidates fused into one ranking, then weighed
//! with recency, importance and any time the query names; every hit explains its score.

use std::collections::HashMap;
use std::sync::Arc;

use engram_core::{
    Clock, EmbedError, Embedder, Filter, Memory, MemoryId, MemoryStore, StoreError, SystemClock,
};
use jiff::tz::TimeZone;
use serde::Serialize;

use crate::ranking::{Evidence, RankingProfile, fuse_parts};
use crate::when::{TimeWindow, time_window};

/// What to look for, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// Which memories may be returned (always one user).
    pub filter: Filter,
    /// The words to look for.
    pub query: String,
    /// How many hits at most.
    pub limit: usize,
}

/// Why a hit ranked where it did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScoreParts {
    /// The ranking profile that weighed the parts.
    pub profile: String,
    /// BM25 relevance from the full-text index (higher is better).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bm25: Option<f64>,
    /// Position in the lexical candidates, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    /// Cosine similarity between the query's and the memory's vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f64>,
    /// Position in the dense candidates, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dense_rank: Option<usize>,
    /// The two fused, in [0, 1].
    pub relevance: f64,
    /// How recent the memory is, in [0, 1].
    pub recency: f64,
    /// Importance / 5.
    pub importance: f64,
    /// The time phrase of the query whose window holds this memory, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_match: Option<String>,
    /// The memory's text was longer than the model's window and only its beginning was embedded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// What each part added to the final score, weighted by the profile; they sum to it.
    pub contributions: Contributions,
}

/// A score taken apart: each part's weighted share. `lexical + dense + recency + importance +
/// time_match` is the score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Contributions {
    /// Relevance that came from the lexical (BM25) list.
    pub lexical: f64,
    /// Relevance that came from the dense (vector) list.
    pub dense: f64,
    /// Recency.
    pub recency: f64,
    /// Importance.
    pub importance: f64,
    /// The boost for falling in the query's time phrase.
    pub time_match: f64,
}

/// One memory found, with its score.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The memory.
    pub memory: Memory,
    /// The final score; hits are sorted by it, best first.
    pub score: f64,
    /// How the score came about.
    pub parts: ScoreParts,
}

/// Hits, plus anything the user should know about how they were found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchResults {
    /// Best first.
    pub hits: Vec<SearchHit>,
    /// Remarks such as "vectors come from another model; run `engram reindex`".
    pub notices: Vec<String>,
}

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The store failed or refused the request.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The query could not be embedded.
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// Runs searches against a store, with an embedder when one is configured.
#[derive(Clone)]
pub struct Searcher {
    store: Arc<dyn MemoryStore>,
    embedder: Option<Arc<dyn Embedder>>,
    profile: RankingProfile,
    clock: Arc<dyn Clock>,
    time_zone: TimeZone,
}

impl std::fmt::Debug for Searcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher")
            .field("embedder", &self.embedder.as_ref().map(|e| e.model_id()))
            .field("profile", &self.profile.name)
            .finish_non_exhaustive()
    }
}

impl Searcher {
    /// A lexical-only searcher over `store` with the balanced profile.
    pub fn new(store: Arc<dyn MemoryStore>) -> Self {
        Self {
            store,
            embedder: None,
            profile: RankingProfile::default(),
            clock: Arc::new(SystemClock),
            time_zone: TimeZone::system(),
        }
    }

    /// Adds dense retrieval with this embedder (`None` keeps search lexical).
    pub fn with_embedder(mut self, embedder: Option<Arc<dyn Embedder>>) -> Self {
        self.embedder = embedder;
        self
    }

    /// Ranks with this profile.
    pub fn with_profile(mut self, profile: RankingProfile) -> Self {
        self.profile = profile;
        self
    }

    /// Reads "now" from this clock and time phrases in this zone.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>, time_zone: TimeZone) -> Self {
        self.clock = clock;
        self.time_zone = time_zone;
        self
    }

    /// The embedder, if dense retrieval is on.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The ranking profile.
    pub fn profile(&self) -> &RankingProfile {
        &self.profile
    }

    /// The store searched.
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    /// The best memories for the request, best first.
    pub async fn search(&self, request: &SearchRequest) -> Result<SearchResults, SearchError> {
        if request.query.trim().is_empty() {
            return Err(StoreError::BadQuery("the search query is empty".to_string()).into());
        }
        let mut notices = Vec::new();
        let query_vector = self.query_vector(request, &mut notices).await?;
        let candidates = self.profile.candidates.max(request.limit);

        let lexical = match self
            .store
            .search_lexical(&request.filter, &request.query, candidates)
            .await
        {
            Ok(hits) => hits,
            // A query of no words can still be found by meaning.
            Err(StoreError::BadQuery(_)) if query_vector.is_some() => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let dense = match &query_vector {
            Some((model, vector)) => {
                self.store
                    .vector_search(model, &request.filter, vector, candidates)
                    .await?
            }
            None => Vec::new(),
        };

        // Merge the lists by memory.
        let mut order: Vec<MemoryId> = Vec::new();
        let mut merged: HashMap<MemoryId, (Memory, Evidence, bool)> = HashMap::new();
        for (rank, hit) in lexical.into_iter().enumerate() {
            order.push(hit.memory.id);
            let evidence = Evidence {
                lexical: Some((hit.bm25, rank + 1)),
                dense: None,
            };
            merged.insert(hit.memory.id, (hit.memory, evidence, false));
        }
        let has_dense = query_vector.is_some();
        for (rank, hit) in dense.into_iter().enumerate() {
            let dense = Some((f64::from(hit.similarity), rank + 1));
            match merged.get_mut(&hit.memory.id) {
                Some((_, evidence, truncated)) => {
                    evidence.dense = dense;
                    *truncated = hit.truncated;
                }
                None => {
                    order.push(hit.memory.id);
                    let evidence = Evidence {
                        lexical: None,
                        dense,
                    };
                    merged.insert(hit.memory.id, (hit.memory, evidence, hit.truncated));
                }
            }
        }
        let entries: Vec<(Memory, Evidence, bool)> =
            order.iter().filter_map(|id| merged.remove(id)).collect();
        let evidence: Vec<Evidence> = entries.iter().map(|(_, e, _)| *e).collect();
        let relevance = fuse_parts(&self.profile, &evidence, (true, has_dense));

        let now = self.clock.now();
        let window = time_window(&request.query, now, &self.time_zone);
        let mut hits: Vec<SearchHit> = entries
            .into_iter()
            .zip(relevance)
            .map(|((memory, evidence, truncated), relevance)| {
                self.score(memory, evidence, truncated, relevance, now, window.as_ref())
            })
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(b.memory.created_at.cmp(&a.memory.created_at))
                .then(b.memory.id.cmp(&a.memory.id))
        });
        hits.truncate(request.limit);
        Ok(SearchResults { hits, notices })
    }

    fn score(
        &self,
        memory: Memory,
        evidence: Evidence,
        truncated: bool,
        (lexical, dense): (f64, f64),
        now: jiff::Timestamp,
        window: Option<&TimeWindow>,
    ) -> SearchHit {
        let p = &self.profile;
        let relevance = lexical + dense;
        let recency = p.recency_of(memory.created_at, now);
        let importance = f64::from(memory.importance.get()) / 5.0;
        let time_match = window
            .filter(|w| w.since <= memory.created_at && memory.created_at < w.until)
            .map(|w| w.phrase.clone());
        let contributions = Contributions {
            lexical: p.relevance * lexical,
            dense: p.relevance * dense,
            recency: p.recency * recency,
            importance: p.importance * importance,
            time_match: if time_match.is_some() {
                p.time_match
            } else {
                0.0
            },
        };
        let score = p.relevance * relevance
            + contributions.recency
            + contributions.importance
            + contributions.time_match;
        SearchHit {
            memory,
            score,
            parts: ScoreParts {
                profile: p.name.clone(),
                bm25: evidence.lexical.map(|(s, _)| s),
                lexical_rank: evidence.lexical.map(|(_, r)| r),
                similarity: evidence.dense.map(|(s, _)| s),
                dense_rank: evidence.dense.map(|(_, r)| r),
                relevance,
                recency,
                importance,
                time_match,
                truncated,
                contributions,
            },
        }
    }

    /// The query's vector and its model, when dense retrieval can run; notes why not otherwise.
    async fn query_vector(
        &self,
        request: &SearchRequest,
        notices: &mut Vec<String>,
    ) -> Result<Option<(String, Vec<f32>)>, SearchError> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        let model = embedder.model_id().to_string();
        let models = self.store.vector_models().await?;
        if !models.iter().any(|m| m.model == model && m.vectors > 0) {
            match models.iter().find(|m| m.vectors > 0) {
                Some(other) => notices.push(format!(
                    "stored vectors come from {} but the configured model is {model}; \
                     search is lexical until you run `engram reindex`",
                    other.model
                )),
                None => notices.push(format!(
                    "no memory has a vector for {model} yet; search is lexical until you run \
                     `engram reindex`"
                )),
            }
            return Ok(None);
        }
        let embedding = embedder.embed_one(&request.query).await?;
        Ok(Some((model, embedding.vector)))
    }
}
