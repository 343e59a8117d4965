//! How candidates from the lexical and dense searches become one ranking.
//!
//! Relevance comes first: the two candidate lists are fused, either by reciprocal rank fusion
//! (ranks only, robust to score scales) or by a weighted sum of scores normalised to [0, 1].
//! A candidate may then take a share of the relevance of the turns next to it in its
//! conversation. The final score mixes relevance with recency, importance and what the query says
//! about time, by the weights of a named [`RankingProfile`].

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// How the lexical and dense lists are combined into one relevance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Fusion {
    /// Reciprocal rank fusion: `sum(weight / (k + rank))`, scaled so a hit ranked first in every
    /// list scores 1.
    Rrf {
        /// The damping constant (60 in the original paper).
        k: f64,
    },
    /// Weighted sum of BM25 divided by the best BM25 and of cosine similarity (below 0 counts
    /// as 0), as the reference design does.
    Weighted,
    /// Weighted sum of each list's scores stretched onto [0, 1] over that list's candidates
    /// (the best scores 1, the worst 0): both lists get the same range, whatever the model's
    /// typical similarities or the query's BM25 magnitude.
    MinMax,
}

/// How recency fades.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decay", rename_all = "snake_case")]
pub enum Recency {
    /// 1 now, falling in a straight line to 0 at `days` old (the reference design: 30 days).
    Linear {
        /// Age at which recency reaches 0.
        days: f64,
    },
    /// Halves every `days`.
    HalfLife {
        /// Days per halving.
        days: f64,
    },
}

/// The weights that turn relevance, recency and importance into one score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankingProfile {
    /// Name shown by `--explain`.
    pub name: String,
    /// How the lexical and dense lists are fused.
    pub fusion: Fusion,
    /// Share of lexical evidence in relevance (the dense share is `1 - lexical_share`).
    pub lexical_share: f64,
    /// Weight of relevance in the final score.
    pub relevance: f64,
    /// Weight of recency.
    pub recency: f64,
    /// Weight of importance (importance / 5).
    pub importance: f64,
    /// How recency fades with age.
    pub recency_decay: Recency,
    /// Extra score for memories inside a time window the query names ("last week", "in May");
    /// half of it for the 30 days after the window (what happened is often told later).
    pub time_match: f64,
    /// Extra score, for questions that ask when something happened, for memories that say when
    /// ("yesterday", "last week", "in May").
    #[serde(default)]
    pub time_mention: f64,
    /// Share of the best adjacent turn's relevance (the turn before or after in the same
    /// conversation) that a candidate gains: an answer is often split over two turns.
    #[serde(default)]
    pub neighbours: f64,
    /// How many candidates each list contributes before fusion.
    pub candidates: usize,
}

impl RankingProfile {
    /// The profile engram uses unless told otherwise (search, REST, MCP, the agent).
    ///
    /// Its mechanisms and weights were chosen by leave-one-conversation-out cross-validation
    /// on the LoCoMo dev split (7 conversations, 1066 questions; hybrid search with
    /// all-MiniLM-L6-v2; `engram bench locomo --cv`, see BENCHMARKS.md): each list stretched
    /// over its candidates and shared half and half (min-max fusion), no recency (questions
    /// ask about old conversations as often as new ones), the time-window boost, the boost for
    /// memories that say when in answer to "when", and neighbour smoothing. The same setting
    /// was chosen for five of the seven held-out conversations; held out, R@10 0.746 (0.754 on
    /// all seven; lexical only 0.719). Importance cannot be measured there (every turn has the
    /// same) and keeps a small weight; [`RankingProfile::recent`] adds recency for agents whose
    /// newest memories should win near-ties.
    pub fn balanced() -> Self {
        Self {
            name: "balanced".into(),
            fusion: Fusion::MinMax,
            lexical_share: 0.5,
            relevance: 0.8,
            recency: 0.0,
            importance: 0.1,
            recency_decay: Recency::HalfLife { days: 30.0 },
            time_match: 0.4,
            time_mention: 0.3,
            neighbours: 0.4,
            candidates: 100,
        }
    }

    /// `balanced` with a fixed share of recency (halving every 30 days), for users who want
    /// newer memories first when relevance is close (the recency weight of engram's default
    /// before the cross-validation). On LoCoMo dev, whose questions are about the past, it gives
    /// R@10 0.743 with MiniLM against `balanced`'s 0.754 (lexical only: 0.711 against 0.719).
    pub fn recent() -> Self {
        Self {
            name: "recent".into(),
            recency: 0.1,
            ..Self::balanced()
        }
    }

    /// The reference design's weights: 0.6 similarity, 0.2 recency (linear over 30 days),
    /// 0.2 importance.
    pub fn reference() -> Self {
        Self {
            name: "reference".into(),
            fusion: Fusion::Weighted,
            lexical_share: 0.5,
            relevance: 0.6,
            recency: 0.2,
            importance: 0.2,
            recency_decay: Recency::Linear { days: 30.0 },
            time_match: 0.2,
            time_mention: 0.0,
            neighbours: 0.0,
            candidates: 100,
        }
    }

    /// Reciprocal rank fusion instead of weighted scores (ranks only; robust when score
    /// scales are unknown), otherwise like `balanced`.
    pub fn rrf() -> Self {
        Self {
            name: "rrf".into(),
            fusion: Fusion::Rrf { k: 60.0 },
            ..Self::balanced()
        }
    }

    /// Relevance only: no recency, no importance (for measuring retrieval itself).
    pub fn relevance() -> Self {
        Self {
            name: "relevance".into(),
            relevance: 1.0,
            recency: 0.0,
            importance: 0.0,
            ..Self::balanced()
        }
    }

    /// A profile by name.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "balanced" => Some(Self::balanced()),
            "reference" => Some(Self::reference()),
            "relevance" => Some(Self::relevance()),
            "rrf" => Some(Self::rrf()),
            "recent" => Some(Self::recent()),
            _ => None,
        }
    }

    /// The names [`RankingProfile::named`] knows.
    pub const NAMES: [&'static str; 5] = ["balanced", "recent", "reference", "relevance", "rrf"];

    /// Recency of something created at `created_at`, seen at `now`, in [0, 1].
    pub fn recency_of(&self, created_at: Timestamp, now: Timestamp) -> f64 {
        let age_days =
            (now.duration_since(created_at).max(SignedDuration::ZERO)).as_secs_f64() / 86_400.0;
        match self.recency_decay {
            Recency::Linear { days } if days > 0.0 => (1.0 - age_days / days).clamp(0.0, 1.0),
            Recency::HalfLife { days } if days > 0.0 => 0.5f64.powf(age_days / days),
            _ => 0.0,
        }
    }
}

impl Default for RankingProfile {
    fn default() -> Self {
        Self::balanced()
    }
}

/// One candidate's standing in each list.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Evidence {
    /// BM25 and 1-based rank in the lexical list.
    pub lexical: Option<(f64, usize)>,
    /// Cosine similarity and 1-based rank in the dense list.
    pub dense: Option<(f64, usize)>,
}

/// Fused relevance in [0, 1] for each candidate, in the order given.
///
/// `best_bm25` and the similarity range are those of the whole candidate lists.
pub fn fuse(
    profile: &RankingProfile,
    evidence: &[Evidence],
    lists_present: (bool, bool),
) -> Vec<f64> {
    fuse_parts(profile, evidence, lists_present)
        .into_iter()
        .map(|(lexical, dense)| lexical + dense)
        .collect()
}

/// [`fuse`], with each candidate's relevance split into what the lexical and the dense list
/// gave (the two add up to it), so `explain` can show where relevance came from.
pub fn fuse_parts(
    profile: &RankingProfile,
    evidence: &[Evidence],
    lists_present: (bool, bool),
) -> Vec<(f64, f64)> {
    let (has_lexical, has_dense) = lists_present;
    // With only one list there is nothing to share: it carries all of relevance.
    let (w_lex, w_dense) = match (has_lexical, has_dense) {
        (true, true) => (profile.lexical_share, 1.0 - profile.lexical_share),
        (true, false) => (1.0, 0.0),
        (false, true) => (0.0, 1.0),
        (false, false) => (0.0, 0.0),
    };
    match profile.fusion {
        Fusion::Rrf { k } => {
            let best = w_lex / (k + 1.0) + w_dense / (k + 1.0);
            evidence
                .iter()
                .map(|e| {
                    let lex = e.lexical.map_or(0.0, |(_, r)| w_lex / (k + r as f64));
                    let dense = e.dense.map_or(0.0, |(_, r)| w_dense / (k + r as f64));
                    if best > 0.0 {
                        (lex / best, dense / best)
                    } else {
                        (0.0, 0.0)
                    }
                })
                .collect()
        }
        Fusion::Weighted => {
            let best_bm25 = evidence
                .iter()
                .filter_map(|e| e.lexical.map(|(s, _)| s))
                .fold(0.0f64, f64::max);
            evidence
                .iter()
                .map(|e| {
                    let lex = match e.lexical {
                        Some((s, _)) if best_bm25 > 0.0 => s / best_bm25,
                        _ => 0.0,
                    };
                    let dense = e.dense.map_or(0.0, |(s, _)| s.clamp(0.0, 1.0));
                    (w_lex * lex, w_dense * dense)
                })
                .collect()
        }
        Fusion::MinMax => {
            let lexical = Range::of(evidence.iter().filter_map(|e| e.lexical.map(|(s, _)| s)));
            let dense = Range::of(evidence.iter().filter_map(|e| e.dense.map(|(s, _)| s)));
            evidence
                .iter()
                .map(|e| {
                    let lex = e.lexical.map_or(0.0, |(s, _)| lexical.stretch(s));
                    let den = e.dense.map_or(0.0, |(s, _)| dense.stretch(s));
                    (w_lex * lex, w_dense * den)
                })
                .collect()
        }
    }
}

/// The lowest and highest score of one list.
#[derive(Debug, Clone, Copy)]
struct Range {
    min: f64,
    max: f64,
}

impl Range {
    fn of(scores: impl Iterator<Item = f64>) -> Self {
        scores.fold(
            Self {
                min: f64::INFINITY,
                max: f64::NEG_INFINITY,
            },
            |r, s| Self {
                min: r.min.min(s),
                max: r.max.max(s),
            },
        )
    }

    /// `score` on [0, 1]: the best 1, the worst 0; a list whose scores are all equal gives 1
    /// to each (being in it is all it says).
    fn stretch(self, score: f64) -> f64 {
        let width = self.max - self.min;
        if width > f64::EPSILON {
            ((score - self.min) / width).clamp(0.0, 1.0)
        } else {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(lex: Option<(f64, usize)>, dense: Option<(f64, usize)>) -> Evidence {
        Evidence {
            lexical: lex,
            dense,
        }
    }

    #[test]
    fn a_hit_first_in_both_lists_scores_one_under_rrf() {
        let p = RankingProfile::rrf();
        let scores = fuse(
            &p,
            &[ev(Some((9.0, 1)), Some((0.9, 1))), ev(Some((3.0, 2)), None)],
            (true, true),
        );
        assert!((scores[0] - 1.0).abs() < 1e-12);
        assert!(scores[1] < scores[0]);
    }

    #[test]
    fn one_list_alone_carries_all_of_relevance() {
        let p = RankingProfile::rrf();
        let scores = fuse(&p, &[ev(Some((2.0, 1)), None)], (true, false));
        assert!((scores[0] - 1.0).abs() < 1e-12);
        // Weighted fusion keeps similarity as it is.
        let w = RankingProfile::reference();
        let scores = fuse(&w, &[ev(None, Some((0.5, 1)))], (false, true));
        assert!((scores[0] - 0.5).abs() < 1e-12);
    }

    #[test]
    fn min_max_fusion_stretches_each_list_over_its_candidates() {
        let mut p = RankingProfile::balanced();
        p.fusion = Fusion::MinMax;
        let scores = fuse(
            &p,
            &[
                ev(Some((9.0, 1)), Some((0.40, 2))),
                ev(Some((3.0, 2)), Some((0.45, 1))),
                ev(None, Some((0.30, 3))),
            ],
            (true, true),
        );
        // Best lexical + middle dense; worst lexical + best dense; dense-only worst.
        assert!((scores[0] - (0.5 + 0.5 * (0.10 / 0.15))).abs() < 1e-9);
        assert!((scores[1] - 0.5).abs() < 1e-9);
        assert!(scores[2].abs() < 1e-9);
        // One candidate alone is the best of its list.
        let one = fuse(&p, &[ev(Some((2.0, 1)), None)], (true, false));
        assert!((one[0] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn recency_decays_as_configured() {
        let now: Timestamp = "2024-06-30T00:00:00Z".parse().unwrap();
        let day = |d: i64| now - SignedDuration::from_hours(24 * d);
        let linear = RankingProfile::reference();
        assert!((linear.recency_of(now, now) - 1.0).abs() < 1e-9);
        assert!((linear.recency_of(day(15), now) - 0.5).abs() < 1e-9);
        assert_eq!(linear.recency_of(day(45), now), 0.0);
        let half = RankingProfile::balanced();
        assert!((half.recency_of(day(30), now) - 0.5).abs() < 1e-9);
        // The future is "now", not more than now.
        assert!((half.recency_of(now + SignedDuration::from_hours(5), now) - 1.0).abs() < 1e-9);
    }

    proptest! {
        #[test]
        fn fused_relevance_is_in_unit_range_and_monotone_in_rank(
            ranks in proptest::collection::vec((1usize..200, 1usize..200, 0.0f64..30.0, -1.0f64..1.0), 1..50),
            weighted in 0u8..3,
        ) {
            let mut p = RankingProfile::balanced();
            p.fusion = match weighted {
                0 => Fusion::Rrf { k: 60.0 },
                1 => Fusion::Weighted,
                _ => Fusion::MinMax,
            };
            let evidence: Vec<Evidence> = ranks.iter().map(|&(rl, rd, s, c)| ev(Some((s, rl)), Some((c, rd)))).collect();
            let scores = fuse(&p, &evidence, (true, true));
            for s in &scores {
                prop_assert!((0.0..=1.0 + 1e-9).contains(s), "{s}");
            }
            // The parts explain the whole: each is non-negative and they add up to it.
            for ((lexical, dense), total) in fuse_parts(&p, &evidence, (true, true)).into_iter().zip(&scores) {
                prop_assert!(lexical >= 0.0 && dense >= 0.0);
                prop_assert!((lexical + dense - total).abs() < 1e-12);
            }
            if weighted == 0 {
                // Better ranks in both lists never score lower.
                for (i, a) in evidence.iter().enumerate() {
                    for (j, b) in evidence.iter().enumerate() {
                        let (ra, rb) = (a.lexical.unwrap().1, b.lexical.unwrap().1);
                        let (da, db) = (a.dense.unwrap().1, b.dense.unwrap().1);
                        if ra <= rb && da <= db {
                            prop_assert!(scores[i] >= scores[j] - 1e-12);
                        }
                    }
                }
            }
        }
    }
}
