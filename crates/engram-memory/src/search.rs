//! Finding memories again: lexical and dense candidates fused into one ranking, then weighed
//! with recency, importance and any time the query names; every hit explains its score. An
//! optional rerank stage (off by default) reads the best few again with a [`Reranker`].

use std::collections::HashMap;
use std::sync::Arc;

use engram_core::{
    Clock, EmbedError, Embedder, Filter, Memory, MemoryId, MemoryStore, Reranker, StoreError,
    SystemClock,
};
use jiff::tz::TimeZone;
use serde::Serialize;

use crate::ranking::{Evidence, RankingProfile, fuse_parts};
use crate::when::{TimeWindow, asks_when, mentions_time, time_window};

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
    /// The time phrase of the query whose window holds this memory (or whose window it follows
    /// within 30 days), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_match: Option<String>,
    /// The query asks when, and this memory says when.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub time_mention: bool,
    /// Relevance gained from the adjacent turn of its conversation.
    #[serde(skip_serializing_if = "is_zero")]
    pub from_neighbours: f64,
    /// The memory's text was longer than the model's window and only its beginning was embedded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The reranker's score, when a rerank stage read this hit; the hits it read are ordered
    /// by it (hits it left unscored keep their places).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank: Option<f64>,
    /// Where the hit stood after fusion (from 1), before the rerank stage moved it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fused_rank: Option<usize>,
    /// What each part added to the final score, weighted by the profile; they sum to it.
    pub contributions: Contributions,
}

/// A score taken apart: each part's weighted share. `lexical + dense + neighbours + recency +
/// importance + time_match + time_mention` is the score.
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
    /// The boost for saying when, in answer to a question about when.
    pub time_mention: f64,
    /// Relevance taken from the adjacent turn of the conversation.
    pub neighbours: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// One memory found, with its score.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The memory.
    pub memory: Memory,
    /// The final score of fusion and weighting; hits are sorted by it, best first, except that
    /// a rerank stage orders the hits it read by [`ScoreParts::rerank`] instead.
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

/// A reranker and how many of the best fused hits it reads.
#[derive(Debug, Clone)]
pub struct RerankStage {
    /// What scores the hits again.
    pub reranker: Arc<dyn Reranker>,
    /// How many of the best fused hits it reads (at least the request's limit are ranked first).
    pub top: usize,
}

/// How many fused hits a rerank stage reads unless told otherwise: enough to lift what fusion
/// put just outside the first ten, few enough for a language model's context.
pub const DEFAULT_RERANK_TOP: usize = 30;

/// Runs searches against a store, with an embedder when one is configured.
#[derive(Clone)]
pub struct Searcher {
    store: Arc<dyn MemoryStore>,
    embedder: Option<Arc<dyn Embedder>>,
    /// Off (`None`) by default: results are then exactly fusion's.
    rerank: Option<RerankStage>,
    profile: RankingProfile,
    clock: Arc<dyn Clock>,
    time_zone: TimeZone,
    /// Look adjacent turns up even when the profile does not use them (to rank the same
    /// candidates under other profiles).
    always_neighbours: bool,
}

impl std::fmt::Debug for Searcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher")
            .field("embedder", &self.embedder.as_ref().map(|e| e.model_id()))
            .field("profile", &self.profile.name)
            .field("rerank", &self.rerank.as_ref().map(|r| r.reranker.name()))
            .finish_non_exhaustive()
    }
}

impl Searcher {
    /// A lexical-only searcher over `store` with the balanced profile.
    pub fn new(store: Arc<dyn MemoryStore>) -> Self {
        Self {
            store,
            embedder: None,
            rerank: None,
            profile: RankingProfile::default(),
            clock: Arc::new(SystemClock),
            time_zone: TimeZone::system(),
            always_neighbours: false,
        }
    }

    /// Makes [`Searcher::candidates`] always find which candidates are adjacent turns, even
    /// when the profile gives them no share (benchmarks rank one set of candidates under many
    /// profiles).
    pub fn with_all_neighbours(mut self) -> Self {
        self.always_neighbours = true;
        self
    }

    /// Adds dense retrieval with this embedder (`None` keeps search lexical).
    pub fn with_embedder(mut self, embedder: Option<Arc<dyn Embedder>>) -> Self {
        self.embedder = embedder;
        self
    }

    /// Reorders the best `top` fused hits with this reranker (`None`, the default, keeps
    /// fusion's order).
    pub fn with_reranker(mut self, reranker: Option<Arc<dyn Reranker>>, top: usize) -> Self {
        self.rerank = reranker.map(|reranker| RerankStage { reranker, top });
        self
    }

    /// The rerank stage, if one is configured.
    pub fn rerank_stage(&self) -> Option<&RerankStage> {
        self.rerank.as_ref()
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
        let candidates = self.candidates(request).await?;
        let mut notices = candidates.notices.clone();
        let hits = match &self.rerank {
            None => candidates.rank(&self.profile, request.limit),
            Some(stage) => {
                let hits = candidates.rank(&self.profile, request.limit.max(stage.top));
                let (mut hits, notice) = self.rerank(&request.query, hits).await;
                notices.extend(notice);
                hits.truncate(request.limit);
                hits
            }
        };
        Ok(SearchResults { hits, notices })
    }

    /// Reorders the first hits (as many as the rerank stage reads) by the reranker's scores;
    /// the rest keep their places. Never fails: when the reranker fails, or leaves hits
    /// unscored, those keep their fused places and the returned notice says why. Without a
    /// rerank stage the hits come back as they are.
    pub async fn rerank(
        &self,
        query: &str,
        mut hits: Vec<SearchHit>,
    ) -> (Vec<SearchHit>, Option<String>) {
        let Some(stage) = &self.rerank else {
            return (hits, None);
        };
        let top = stage.top.min(hits.len());
        if top < 2 {
            return (hits, None);
        }
        let name = stage.reranker.name();
        let texts: Vec<String> = hits[..top].iter().map(|h| h.memory.text.clone()).collect();
        let scores = match stage.reranker.score(query, &texts).await {
            Ok(scores) if scores.len() == top => scores,
            Ok(scores) => {
                let why = format!(
                    "reranking with {name} gave {} scores for {top} hits, so fusion's order stands",
                    scores.len()
                );
                tracing::warn!("{why}");
                return (hits, Some(why));
            }
            Err(e) => {
                let why = format!("reranking with {name} failed, so fusion's order stands: {e}");
                tracing::warn!("{why}");
                return (hits, Some(why));
            }
        };
        let order = rerank_order(&scores);
        let mut read: Vec<Option<SearchHit>> = hits.drain(..top).map(Some).collect();
        let reordered: Vec<SearchHit> = order
            .iter()
            .filter_map(|&from| {
                let mut hit = read[from].take()?;
                hit.parts.rerank = scores[from].filter(|s| s.is_finite());
                hit.parts.fused_rank = Some(from + 1);
                Some(hit)
            })
            .collect();
        hits.splice(0..0, reordered);
        let scored = scores.iter().flatten().filter(|s| s.is_finite()).count();
        let notice = (scored < top).then(|| {
            let why = format!(
                "{name} scored {scored} of the {top} hits it read; the others keep fusion's places"
            );
            tracing::warn!("{why}");
            why
        });
        (hits, notice)
    }

    /// Everything ranking needs for the request: the lexical and dense candidates merged by
    /// memory, and what the query says about time. [`Candidates::rank`] orders them; ranking
    /// the same candidates under other profiles is how weights are tuned.
    pub async fn candidates(&self, request: &SearchRequest) -> Result<Candidates, SearchError> {
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

        let asks = asks_when(&request.query);
        // Merge the lists by memory.
        let mut order: Vec<MemoryId> = Vec::new();
        let mut merged: HashMap<MemoryId, Candidate> = HashMap::new();
        for (rank, hit) in lexical.into_iter().enumerate() {
            order.push(hit.memory.id);
            let evidence = Evidence {
                lexical: Some((hit.bm25, rank + 1)),
                dense: None,
            };
            merged.insert(
                hit.memory.id,
                Candidate::new(hit.memory, evidence, false, asks),
            );
        }
        for (rank, hit) in dense.into_iter().enumerate() {
            let dense = Some((f64::from(hit.similarity), rank + 1));
            match merged.get_mut(&hit.memory.id) {
                Some(candidate) => {
                    candidate.evidence.dense = dense;
                    candidate.truncated = hit.truncated;
                }
                None => {
                    order.push(hit.memory.id);
                    let evidence = Evidence {
                        lexical: None,
                        dense,
                    };
                    merged.insert(
                        hit.memory.id,
                        Candidate::new(hit.memory, evidence, hit.truncated, asks),
                    );
                }
            }
        }
        let entries: Vec<Candidate> = order.iter().filter_map(|id| merged.remove(id)).collect();
        let neighbours = if self.profile.neighbours > 0.0 || self.always_neighbours {
            self.neighbours(&request.filter.user_id, &entries).await?
        } else {
            vec![[None; 2]; entries.len()]
        };
        let now = self.clock.now();
        Ok(Candidates {
            neighbours,
            entries,
            lists: (true, query_vector.is_some()),
            window: time_window(&request.query, now, &self.time_zone),
            asks_when: asks,
            now,
            notices,
        })
    }

    /// For each entry, the entries holding the turns just before and after it in its
    /// conversation (when those are candidates too), from the store's previous turns.
    async fn neighbours(
        &self,
        user_id: &str,
        entries: &[Candidate],
    ) -> Result<Vec<[Option<usize>; 2]>, SearchError> {
        let mut out = vec![[None; 2]; entries.len()];
        let session = |i: usize| {
            let memory = &entries[i].memory;
            (memory.kind == engram_core::Kind::Episode)
                .then_some(memory.scope.session_id.as_deref())
                .flatten()
        };
        // A turn's neighbour is a candidate of its own session: only sessions with two
        // candidate turns can have any, and most searches have none (no store call then).
        let mut per_session: HashMap<&str, usize> = HashMap::new();
        for i in 0..entries.len() {
            if let Some(s) = session(i) {
                *per_session.entry(s).or_default() += 1;
            }
        }
        let turns: Vec<usize> = (0..entries.len())
            .filter(|&i| session(i).is_some_and(|s| per_session[s] >= 2))
            .collect();
        if turns.is_empty() {
            return Ok(out);
        }
        let ids: Vec<MemoryId> = turns.iter().map(|&i| entries[i].memory.id).collect();
        let previous = self.store.previous_turns(user_id, &ids).await?;
        let at: HashMap<MemoryId, usize> =
            turns.iter().map(|&i| (entries[i].memory.id, i)).collect();
        for (&i, previous) in turns.iter().zip(previous) {
            if let Some(&p) = previous.as_ref().and_then(|id| at.get(id)) {
                out[i][0] = Some(p);
                out[p][1] = Some(i);
            }
        }
        Ok(out)
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
        // Counting the vectors costs as much as reading all their keys (7-14 ms at 100k on
        // PostgreSQL, far more while a vacuum is due), so a search only asks whether there
        // are any, and lists the models only to explain why there are none.
        if !self.store.has_vectors(&model).await? {
            let models = self.store.vector_models().await?;
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

/// The new order of hits given the reranker's scores: positions holding an unscored hit (no
/// score, or not a finite one) keep it; the other positions are filled with the scored hits,
/// best score first (ties keep fusion's order). Returns, for each position, where its hit was.
pub fn rerank_order(scores: &[Option<f64>]) -> Vec<usize> {
    let score = |i: usize| scores[i].filter(|s| s.is_finite());
    let slots: Vec<usize> = (0..scores.len()).filter(|&i| score(i).is_some()).collect();
    let mut best_first = slots.clone();
    best_first.sort_by(|&a, &b| {
        let (sa, sb) = (score(a).unwrap_or(0.0), score(b).unwrap_or(0.0));
        sb.total_cmp(&sa).then(a.cmp(&b))
    });
    let mut order: Vec<usize> = (0..scores.len()).collect();
    for (slot, from) in slots.into_iter().zip(best_first) {
        order[slot] = from;
    }
    order
}

/// One memory found by the lexical or the dense search (or both), before ranking.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The memory.
    pub memory: Memory,
    /// Its standing in each list.
    pub evidence: Evidence,
    /// Only the beginning of its text was embedded.
    pub truncated: bool,
    /// Its text says when something happened (read only for a query that asks when; false
    /// otherwise).
    pub mentions_time: bool,
}

impl Candidate {
    /// `asks_when`: whether the query asks when. Only then is the text read for a time:
    /// ranking uses it for nothing else, and every search read every candidate's words.
    fn new(memory: Memory, evidence: Evidence, truncated: bool, asks_when: bool) -> Self {
        let mentions_time = asks_when && mentions_time(&memory.text);
        Self {
            memory,
            evidence,
            truncated,
            mentions_time,
        }
    }
}

/// The candidates of one search, ready to be ranked under any profile.
#[derive(Debug, Clone)]
pub struct Candidates {
    /// Lexical hits in their order, then dense-only hits in theirs.
    pub entries: Vec<Candidate>,
    /// For each entry, the entries holding the turns just before and just after it in its
    /// conversation, when they are candidates too.
    pub neighbours: Vec<[Option<usize>; 2]>,
    /// Whether each list was searched: (lexical, dense).
    pub lists: (bool, bool),
    /// The time window the query names, if any.
    pub window: Option<TimeWindow>,
    /// The query asks when something happened.
    pub asks_when: bool,
    /// "Now", for recency.
    pub now: jiff::Timestamp,
    /// Remarks for the user.
    pub notices: Vec<String>,
}

/// How long after a named time window memories still get half its boost.
const AFTER_WINDOW: jiff::SignedDuration = jiff::SignedDuration::from_hours(30 * 24);

/// One entry's score and its parts, before they are written out for the user.
#[derive(Debug, Clone, Copy, Default)]
struct Breakdown {
    score: f64,
    relevance: f64,
    from_neighbours: f64,
    recency: f64,
    importance: f64,
    in_window: bool,
    time_mention: bool,
    contributions: Contributions,
}

impl Candidates {
    fn breakdown(&self, profile: &RankingProfile) -> Vec<Breakdown> {
        let evidence: Vec<Evidence> = self.entries.iter().map(|c| c.evidence).collect();
        let parts = fuse_parts(profile, &evidence, self.lists);
        let fused: Vec<f64> = parts.iter().map(|(l, d)| l + d).collect();
        self.entries
            .iter()
            .zip(&self.neighbours)
            .zip(&parts)
            .map(|((candidate, neighbours), &(lexical, dense))| {
                let own = lexical + dense;
                let from_neighbours = if profile.neighbours > 0.0 {
                    let best = neighbours
                        .iter()
                        .flatten()
                        .filter_map(|&at| fused.get(at).copied())
                        .fold(0.0f64, f64::max);
                    profile.neighbours * best
                } else {
                    0.0
                };
                let relevance = own + from_neighbours;
                let memory = &candidate.memory;
                let recency = profile.recency_of(memory.created_at, self.now);
                let importance = f64::from(memory.importance.get()) / 5.0;
                let at = memory.created_at;
                let (in_window, time_boost) = match &self.window {
                    Some(w) if w.since <= at && at < w.until => (true, profile.time_match),
                    Some(w) if w.until <= at && at < w.until + AFTER_WINDOW => {
                        (true, profile.time_match / 2.0)
                    }
                    _ => (false, 0.0),
                };
                let time_mention = self.asks_when && candidate.mentions_time;
                let contributions = Contributions {
                    lexical: profile.relevance * lexical,
                    dense: profile.relevance * dense,
                    recency: profile.recency * recency,
                    importance: profile.importance * importance,
                    time_match: time_boost,
                    time_mention: if time_mention {
                        profile.time_mention
                    } else {
                        0.0
                    },
                    neighbours: profile.relevance * from_neighbours,
                };
                let score = profile.relevance * relevance
                    + contributions.recency
                    + contributions.importance
                    + contributions.time_match
                    + contributions.time_mention;
                Breakdown {
                    contributions,
                    score,
                    relevance,
                    from_neighbours,
                    recency,
                    importance,
                    in_window,
                    time_mention,
                }
            })
            .collect()
    }

    fn order_scored(&self, scores: &[Breakdown], limit: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        let by_score = |a: &usize, b: &usize| {
            let (ma, mb) = (&self.entries[*a].memory, &self.entries[*b].memory);
            scores[*b]
                .score
                .total_cmp(&scores[*a].score)
                .then(mb.created_at.cmp(&ma.created_at))
                .then(mb.id.cmp(&ma.id))
        };
        if limit < order.len() {
            order.select_nth_unstable_by(limit, by_score);
            order.truncate(limit);
        }
        order.sort_by(by_score);
        order
    }

    /// Indices of the best `limit` entries under `profile`, best first (ties to the newest).
    pub fn order(&self, profile: &RankingProfile, limit: usize) -> Vec<usize> {
        self.order_scored(&self.breakdown(profile), limit)
    }

    /// The best `limit` hits under `profile`, best first, each with how its score came about.
    pub fn rank(&self, profile: &RankingProfile, limit: usize) -> Vec<SearchHit> {
        let scores = self.breakdown(profile);
        self.order_scored(&scores, limit)
            .into_iter()
            .map(|at| {
                let b = scores[at];
                let candidate = &self.entries[at];
                SearchHit {
                    memory: candidate.memory.clone(),
                    score: b.score,
                    parts: ScoreParts {
                        profile: profile.name.clone(),
                        bm25: candidate.evidence.lexical.map(|(s, _)| s),
                        lexical_rank: candidate.evidence.lexical.map(|(_, r)| r),
                        similarity: candidate.evidence.dense.map(|(s, _)| s),
                        dense_rank: candidate.evidence.dense.map(|(_, r)| r),
                        relevance: b.relevance,
                        recency: b.recency,
                        importance: b.importance,
                        time_match: self
                            .window
                            .as_ref()
                            .filter(|_| b.in_window)
                            .map(|w| w.phrase.clone()),
                        time_mention: b.time_mention,
                        from_neighbours: b.from_neighbours,
                        truncated: candidate.truncated,
                        rerank: None,
                        fused_rank: None,
                        contributions: b.contributions,
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::{Importance, Kind, Scope};

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    fn memory(text: &str, created: &str) -> Memory {
        let created_at = at(created);
        Memory {
            id: MemoryId::new(),
            scope: Scope::user("u").with_session("s"),
            kind: Kind::Episode,
            text: text.into(),
            category: None,
            importance: Importance::new(3).unwrap(),
            metadata: Default::default(),
            created_at,
            updated_at: created_at,
            valid_from: created_at,
            valid_to: None,
            expires_at: None,
            source: "test".into(),
            content_hash: String::new(),
        }
    }

    /// Lexical-only candidates with these BM25 scores, all created at `created`.
    fn candidates(entries: &[(&str, f64, &str)], query: &str) -> Candidates {
        let now = at("2024-06-30T12:00:00Z");
        let entries: Vec<Candidate> = entries
            .iter()
            .enumerate()
            .map(|(rank, &(text, bm25, created))| {
                Candidate::new(
                    memory(text, created),
                    Evidence {
                        lexical: Some((bm25, rank + 1)),
                        dense: None,
                    },
                    false,
                    asks_when(query),
                )
            })
            .collect();
        Candidates {
            neighbours: vec![[None; 2]; entries.len()],
            entries,
            lists: (true, false),
            window: time_window(query, now, &jiff::tz::TimeZone::UTC),
            asks_when: asks_when(query),
            now,
            notices: Vec::new(),
        }
    }

    /// Relevance alone, BM25 over the best BM25: each test turns on the mechanism it checks.
    fn plain() -> RankingProfile {
        RankingProfile {
            fusion: crate::ranking::Fusion::Weighted,
            recency: 0.0,
            importance: 0.0,
            time_match: 0.0,
            time_mention: 0.0,
            neighbours: 0.0,
            ..RankingProfile::balanced()
        }
    }

    #[test]
    fn a_turn_next_to_a_strong_one_gains_a_share_of_it() {
        let day = "2024-06-01T10:00:00Z";
        let mut c = candidates(
            &[
                ("strong", 10.0, day),
                ("weak", 4.0, day),
                ("middling", 5.0, day),
            ],
            "anything",
        );
        assert_eq!(c.order(&plain(), 3), [0, 2, 1]);
        // "weak" follows "strong" in its conversation.
        c.neighbours[1] = [Some(0), None];
        c.neighbours[0] = [None, Some(1)];
        let profile = RankingProfile {
            neighbours: 0.2,
            ..plain()
        };
        assert_eq!(c.order(&profile, 3), [0, 1, 2]);
        let hits = c.rank(&profile, 3);
        assert!((hits[1].parts.from_neighbours - 0.2).abs() < 1e-9);
        assert!((hits[1].parts.relevance - 0.6).abs() < 1e-9);
    }

    #[test]
    fn when_questions_favour_memories_that_say_when() {
        let day = "2024-06-01T10:00:00Z";
        let entries = [
            ("we talked about the trip", 6.0, day),
            ("the trip was last week", 5.0, day),
        ];
        let profile = RankingProfile {
            time_mention: 0.2,
            ..plain()
        };
        let asked = candidates(&entries, "When was the trip?");
        assert_eq!(asked.order(&profile, 2), [1, 0]);
        assert!(asked.rank(&profile, 2)[0].parts.time_mention);
        // Not a question about when: relevance alone decides.
        let other = candidates(&entries, "Where did the trip go?");
        assert_eq!(other.order(&profile, 2), [0, 1]);
    }

    #[test]
    fn a_named_month_boosts_its_memories_fully_and_the_month_after_by_half() {
        let entries = [
            ("said in april", 10.0, "2024-04-10T10:00:00Z"),
            ("said in may", 9.0, "2024-05-10T10:00:00Z"),
            ("said in early june", 9.5, "2024-06-05T10:00:00Z"),
        ];
        let profile = RankingProfile {
            time_match: 0.2,
            ..plain()
        };
        let c = candidates(&entries, "what happened in May 2024");
        let hits = c.rank(&profile, 3);
        let texts: Vec<&str> = hits.iter().map(|h| h.memory.text.as_str()).collect();
        assert_eq!(
            texts,
            ["said in may", "said in early june", "said in april"]
        );
        let boost = |i: usize| hits[i].score - profile.relevance * hits[i].parts.relevance;
        assert!((boost(0) - 0.2).abs() < 1e-9);
        assert!((boost(1) - 0.1).abs() < 1e-9);
        assert_eq!(hits[2].parts.time_match, None);
    }

    #[test]
    fn reranking_orders_the_scored_and_leaves_the_unscored_in_place() {
        assert_eq!(rerank_order(&[Some(1.0), Some(3.0), Some(2.0)]), [1, 2, 0]);
        // Position 1 was not scored: it stays; the others are ordered around it.
        assert_eq!(
            rerank_order(&[Some(1.0), None, Some(3.0), Some(f64::NAN)]),
            [2, 1, 0, 3]
        );
        // Ties keep fusion's order.
        assert_eq!(rerank_order(&[Some(5.0), Some(5.0), Some(6.0)]), [2, 0, 1]);
        assert!(rerank_order(&[]).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn rerank_order_is_a_permutation_that_sorts_the_scored(
            scores in proptest::collection::vec(
                proptest::option::of(-100.0f64..100.0), 0..40)
        ) {
            let order = rerank_order(&scores);
            let mut seen = order.clone();
            seen.sort_unstable();
            proptest::prop_assert_eq!(seen, (0..scores.len()).collect::<Vec<_>>());
            let mut previous = f64::INFINITY;
            for (position, &from) in order.iter().enumerate() {
                match scores[from] {
                    None => proptest::prop_assert_eq!(position, from),
                    Some(score) => {
                        proptest::prop_assert!(scores[position].is_some());
                        proptest::prop_assert!(score <= previous);
                        previous = score;
                    }
                }
            }
        }
    }

    #[test]
    fn order_and_rank_agree_and_ties_go_to_the_newest() {
        let c = candidates(
            &[
                ("older", 5.0, "2024-01-01T00:00:00Z"),
                ("newer", 5.0, "2024-02-01T00:00:00Z"),
                ("best", 7.0, "2023-01-01T00:00:00Z"),
            ],
            "x",
        );
        let p = plain();
        let order = c.order(&p, 2);
        assert_eq!(order, [2, 1]);
        let hits: Vec<String> = c.rank(&p, 2).into_iter().map(|h| h.memory.text).collect();
        assert_eq!(hits, ["best", "newer"]);
    }
}
