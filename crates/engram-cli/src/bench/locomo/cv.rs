//! `engram bench locomo --cv`: ranking settings chosen by leave-one-conversation-out
//! cross-validation.
//!
//! Every question is searched once; its candidates are then ranked under every setting of a
//! grid (the same ranking code a search runs). For each conversation in turn, the setting with
//! the best R@10 over the *other* conversations' questions is chosen and scored on the questions
//! of the one left out. The cross-validated figure is what the choice of settings is worth on a
//! conversation it never saw; the best setting over all conversations ("dev total") is what it
//! is worth on the data it was chosen on, which is always at least as high.

use std::collections::BTreeMap;

use engram_memory::{Fusion, RankingProfile};
use serde::Serialize;

use super::{Asked, RetrievalMode};

/// Settings are chosen by recall at this cut-off.
pub(super) const SELECT_AT: usize = 10;

/// One parameter of the grid and the values it takes.
pub(super) struct Axis {
    name: &'static str,
    labels: Vec<String>,
}

/// Every combination of the axes' values, as ranking profiles.
pub(super) struct Grid {
    axes: Vec<Axis>,
    /// The profiles, in grid order.
    pub profiles: Vec<RankingProfile>,
    /// For each profile, the index of its value on each axis.
    settings: Vec<Vec<usize>>,
}

type Setter = Box<dyn Fn(&mut RankingProfile)>;

fn strings(values: &[f64]) -> Vec<String> {
    values.iter().map(|v| format!("{v}")).collect()
}

/// What setting `name` to `label` does to a profile.
fn setter(name: &str, label: &str) -> anyhow::Result<Setter> {
    if name == "fusion" {
        let fusion = match label {
            "weighted" => Fusion::Weighted,
            "minmax" => Fusion::MinMax,
            "rrf" => Fusion::Rrf { k: 60.0 },
            other => anyhow::bail!("--grid fusion: '{other}' is not weighted, minmax or rrf"),
        };
        return Ok(Box::new(move |p: &mut RankingProfile| p.fusion = fusion));
    }
    let v: f64 = label
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| anyhow::anyhow!("--grid {name}: '{label}' is not a weight"))?;
    let set: fn(&mut RankingProfile, f64) = match name {
        "share" => |p, v| p.lexical_share = v,
        "recency" => |p, v| p.recency = v,
        "window" => |p, v| p.time_match = v,
        "when" => |p, v| p.time_mention = v,
        _ => |p, v| p.neighbours = v,
    };
    Ok(Box::new(move |p: &mut RankingProfile| set(p, v)))
}

impl Grid {
    /// The grid around `base` (whose other weights stay as they are). The lexical share is only
    /// varied when both lists are searched. Each axis lists "off" (or the plainest value) first,
    /// so that ties go to the simpler setting. `overrides` ("neighbours=0,0.2") replace an
    /// axis's values.
    pub fn new(
        base: &RankingProfile,
        mode: RetrievalMode,
        overrides: &[String],
    ) -> anyhow::Result<Self> {
        let mut values: Vec<(&'static str, Vec<String>)> = vec![
            (
                "fusion",
                vec!["weighted".into(), "minmax".into(), "rrf".into()],
            ),
            // Wide enough that the choices on LoCoMo dev sit inside each range, not on an edge.
            ("share", strings(&[0.4, 0.5, 0.6, 0.7, 0.8])),
            ("recency", strings(&[0.0, 0.05])),
            ("window", strings(&[0.0, 0.2, 0.3, 0.4, 0.5, 0.6])),
            ("when", strings(&[0.0, 0.1, 0.2, 0.3, 0.4, 0.5])),
            ("neighbours", strings(&[0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8])),
        ];
        if mode != RetrievalMode::Hybrid {
            values.retain(|(name, _)| *name != "share");
        }
        for item in overrides {
            let (name, list) = item
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--grid takes NAME=V1,V2,..., not '{item}'"))?;
            let axis = values
                .iter_mut()
                .find(|(n, _)| *n == name.trim())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--grid: no parameter '{name}' in this mode (fusion, share in hybrid mode, recency, window, when, neighbours)"
                    )
                })?;
            axis.1 = list.split(',').map(|v| v.trim().to_string()).collect();
            if axis.1.iter().any(String::is_empty) {
                anyhow::bail!("--grid {name}: an empty value");
            }
        }
        let mut axes: Vec<(Axis, Vec<Setter>)> = Vec::new();
        for (name, labels) in values {
            let setters = labels
                .iter()
                .map(|label| setter(name, label))
                .collect::<anyhow::Result<Vec<Setter>>>()?;
            axes.push((Axis { name, labels }, setters));
        }

        let mut settings: Vec<Vec<usize>> = vec![Vec::new()];
        for (axis, _) in &axes {
            settings = settings
                .into_iter()
                .flat_map(|s| {
                    (0..axis.labels.len()).map(move |v| {
                        let mut s = s.clone();
                        s.push(v);
                        s
                    })
                })
                .collect();
        }
        let profiles = settings
            .iter()
            .map(|s| {
                let mut p = base.clone();
                for ((_, setters), &v) in axes.iter().zip(s) {
                    setters[v](&mut p);
                }
                p.name = "grid".into();
                p
            })
            .collect();
        Ok(Self {
            axes: axes.into_iter().map(|(a, _)| a).collect(),
            profiles,
            settings,
        })
    }

    /// "fusion minmax, lexical share 0.6, ..." for the profile at `at`.
    fn describe(&self, at: usize) -> String {
        self.axes
            .iter()
            .zip(&self.settings[at])
            .map(|(axis, &v)| format!("{} {}", axis.name, axis.labels[v]))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One conversation left out.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Fold {
    conversation: String,
    questions: usize,
    /// The setting chosen on the other conversations.
    chosen: String,
    /// Its R@10 on those other conversations.
    train_recall: f64,
    /// Its recall on the conversation left out.
    recall: BTreeMap<usize, f64>,
}

/// Cross-validation with one parameter held at one value (the others still chosen).
#[derive(Debug, Clone, Serialize)]
pub(super) struct Fixed {
    parameter: String,
    value: String,
    /// Cross-validated R@10.
    recall: f64,
    /// The best R@10 over all conversations with the parameter at this value.
    dev_recall: f64,
}

/// What `--cv` found.
#[derive(Debug, Clone, Serialize)]
pub(super) struct CrossValidation {
    selected_by: String,
    settings: usize,
    folds: Vec<Fold>,
    /// Held-out recall over all questions (each question scored once, in its own fold).
    recall: BTreeMap<usize, f64>,
    /// The best setting over all conversations, and its recall there.
    dev_best: String,
    dev_recall: BTreeMap<usize, f64>,
    fixed: Vec<Fixed>,
}

/// Sums of recall at `k_at` per profile and conversation: `sums[profile][conversation]`.
fn sums(asked: &[Asked], profiles: usize, conversations: usize, k_at: usize) -> Vec<Vec<f64>> {
    let mut sums = vec![vec![0.0; conversations]; profiles];
    for q in asked {
        // Profile 0 of each question is the benchmark's own profile; the grid follows.
        for (p, recall) in q.recall.iter().skip(1).enumerate() {
            sums[p][q.conversation] += recall[k_at];
        }
    }
    sums
}

/// The best of `allowed` profiles by total over the conversations other than `left_out`.
fn best(
    sums: &[Vec<f64>],
    allowed: &[usize],
    left_out: Option<usize>,
    counts: &[usize],
) -> (usize, f64) {
    let questions: usize = counts
        .iter()
        .enumerate()
        .filter(|(c, _)| Some(*c) != left_out)
        .map(|(_, n)| n)
        .sum();
    let mut best = (allowed[0], f64::NEG_INFINITY);
    for &p in allowed {
        let total: f64 = sums[p]
            .iter()
            .enumerate()
            .filter(|(c, _)| Some(*c) != left_out)
            .map(|(_, s)| s)
            .sum();
        // Strictly better only: ties keep the earlier (plainer) setting.
        if total > best.1 + 1e-12 {
            best = (p, total);
        }
    }
    (best.0, best.1 / questions.max(1) as f64)
}

/// Leave-one-conversation-out over `grid`, selecting by R@[`SELECT_AT`].
pub(super) fn cross_validate(
    grid: &Grid,
    asked: &[Asked],
    ks: &[usize],
    names: &[String],
) -> CrossValidation {
    let conversations = names.len();
    let k_at = ks.iter().position(|&k| k == SELECT_AT).unwrap_or(0);
    let mut counts = vec![0usize; conversations];
    for q in asked {
        counts[q.conversation] += 1;
    }
    let select = sums(asked, grid.profiles.len(), conversations, k_at);
    let all: Vec<usize> = (0..grid.profiles.len()).collect();
    let held_out = |allowed: &[usize]| -> (Vec<(usize, f64)>, f64) {
        let mut total = 0.0;
        let choices: Vec<(usize, f64)> = (0..conversations)
            .map(|c| {
                let (p, train) = best(&select, allowed, Some(c), &counts);
                total += select[p][c];
                (p, train)
            })
            .collect();
        (choices, total / asked.len().max(1) as f64)
    };

    let (choices, _) = held_out(&all);
    let mut recall: BTreeMap<usize, f64> = BTreeMap::new();
    let folds = choices
        .iter()
        .enumerate()
        .map(|(c, &(p, train))| {
            let mut fold_recall: BTreeMap<usize, f64> = BTreeMap::new();
            for q in asked.iter().filter(|q| q.conversation == c) {
                for (i, &k) in ks.iter().enumerate() {
                    *fold_recall.entry(k).or_default() += q.recall[p + 1][i];
                    *recall.entry(k).or_default() += q.recall[p + 1][i];
                }
            }
            let n = counts[c].max(1) as f64;
            fold_recall.values_mut().for_each(|v| *v /= n);
            Fold {
                conversation: names[c].clone(),
                questions: counts[c],
                chosen: grid.describe(p),
                train_recall: train,
                recall: fold_recall,
            }
        })
        .collect();
    let n = asked.len().max(1) as f64;
    recall.values_mut().for_each(|v| *v /= n);

    let (dev, _) = best(&select, &all, None, &counts);
    let (_, dev_overall) = super::summarise(asked, ks, dev + 1);

    let mut fixed = Vec::new();
    for (a, axis) in grid.axes.iter().enumerate() {
        for (v, label) in axis.labels.iter().enumerate() {
            let allowed: Vec<usize> = (0..grid.profiles.len())
                .filter(|&p| grid.settings[p][a] == v)
                .collect();
            let (_, cv_recall) = held_out(&allowed);
            let (_, dev_recall) = best(&select, &allowed, None, &counts);
            fixed.push(Fixed {
                parameter: axis.name.to_string(),
                value: label.clone(),
                recall: cv_recall,
                dev_recall,
            });
        }
    }
    CrossValidation {
        selected_by: format!("R@{SELECT_AT}"),
        settings: grid.profiles.len(),
        folds,
        recall,
        dev_best: grid.describe(dev),
        dev_recall: dev_overall.recall,
        fixed,
    }
}

/// The cross-validation as text.
pub(super) fn print(cv: &CrossValidation, ks: &[usize]) {
    let cells = |recall: &BTreeMap<usize, f64>| -> String {
        ks.iter()
            .map(|k| format!("{:<6.3}", recall.get(k).copied().unwrap_or(0.0)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!();
    println!(
        "cross-validation: leave one conversation out, {} settings, chosen by {} on the others",
        cv.settings, cv.selected_by
    );
    let header: Vec<String> = ks.iter().map(|k| format!("R@{k:<4}")).collect();
    println!(
        "{:<16} {:>5}  {}  {:<6}  chosen",
        "held out",
        "n",
        header.join("  "),
        "train"
    );
    for fold in &cv.folds {
        println!(
            "{:<16} {:>5}  {}  {:<6.3}  {}",
            fold.conversation,
            fold.questions,
            cells(&fold.recall),
            fold.train_recall,
            fold.chosen
        );
    }
    println!(
        "{:<16} {:>5}  {}",
        "cross-validated",
        cv.folds.iter().map(|f| f.questions).sum::<usize>(),
        cells(&cv.recall)
    );
    println!(
        "{:<16} {:>5}  {}  best on all: {}",
        "dev total",
        "",
        cells(&cv.dev_recall),
        cv.dev_best
    );
    println!();
    println!(
        "one parameter held at one value, the others chosen as above ({} cross-validated / dev total):",
        cv.selected_by
    );
    for fixed in &cv.fixed {
        println!(
            "  {:<14} {:<9} {:.3} / {:.3}",
            fixed.parameter, fixed.value, fixed.recall, fixed.dev_recall
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Two settings (neighbours 0 and 0.5) and three conversations of two questions each.
    fn grid() -> Grid {
        let overrides: Vec<String> = [
            "fusion=weighted",
            "recency=0",
            "window=0",
            "when=0",
            "neighbours=0,0.5",
        ]
        .map(String::from)
        .to_vec();
        Grid::new(
            &RankingProfile::balanced(),
            RetrievalMode::Lexical,
            &overrides,
        )
        .unwrap()
    }

    /// A question of `conversation` with R@10 `plain` under neighbours 0 and `smooth` under 0.5
    /// (the benchmark's own profile first, as the benchmark lists them).
    fn asked(conversation: usize, plain: f64, smooth: f64) -> Asked {
        Asked {
            conversation,
            category: 4,
            recall: vec![vec![0.0], vec![plain], vec![smooth]],
        }
    }

    #[test]
    fn each_conversation_is_scored_with_the_setting_the_others_chose() {
        let grid = grid();
        assert_eq!(grid.profiles.len(), 2);
        assert_eq!(grid.profiles[1].neighbours, 0.5);
        // Smoothing helps conversations 0 and 1, and hurts conversation 2.
        let questions = [
            asked(0, 0.0, 1.0),
            asked(0, 0.0, 1.0),
            asked(1, 0.0, 1.0),
            asked(1, 0.5, 0.5),
            asked(2, 1.0, 0.5),
            asked(2, 1.0, 0.0),
        ];
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let cv = cross_validate(&grid, &questions, &[10], &names);
        // Without conversation 0 the others prefer no smoothing (2.5 against 2), so
        // conversation 0 is scored without it, and loses what smoothing would have given it.
        let chosen: Vec<&str> = cv.folds.iter().map(|f| f.chosen.as_str()).collect();
        assert!(chosen[0].ends_with("neighbours 0"), "{chosen:?}");
        assert!(chosen[1].ends_with("neighbours 0.5"), "{chosen:?}");
        assert!(chosen[2].ends_with("neighbours 0.5"), "{chosen:?}");
        assert_eq!(cv.folds[0].recall[&10], 0.0);
        assert_eq!(cv.folds[0].train_recall, 0.625);
        assert_eq!(cv.folds[1].recall[&10], 0.75);
        assert_eq!(cv.folds[2].recall[&10], 0.25);
        // Held out: (0 + 1.5 + 0.5) / 6; chosen on all, smoothing scores 4 / 6.
        assert!((cv.recall[&10] - 2.0 / 6.0).abs() < 1e-12);
        assert!(cv.dev_best.ends_with("neighbours 0.5"));
        assert!((cv.dev_recall[&10] - 4.0 / 6.0).abs() < 1e-12);
        // Neighbours held at 0: one setting left, the same in every fold.
        let held_at_zero = cv
            .fixed
            .iter()
            .find(|f| f.parameter == "neighbours" && f.value == "0")
            .unwrap();
        assert!((held_at_zero.recall - 2.5 / 6.0).abs() < 1e-12);
        assert!((held_at_zero.dev_recall - 2.5 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn a_grid_value_that_is_not_a_weight_is_refused() {
        let overrides = vec!["when=0,lots".to_string()];
        let err = Grid::new(
            &RankingProfile::balanced(),
            RetrievalMode::Lexical,
            &overrides,
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("'lots' is not a weight"), "{err}");
        let overrides = vec!["share=0.5".to_string()];
        assert!(
            Grid::new(
                &RankingProfile::balanced(),
                RetrievalMode::Lexical,
                &overrides
            )
            .is_err()
        );
    }
}
