//! The embedding benchmark behind `engram bench embed`: throughput on turn-sized texts (realistic
//! chat turns of 10-40 words) and the latency of embedding one search query, as medians over
//! repeated runs.

use std::time::{Duration, Instant};

use engram_core::{EmbedError, Embedder};

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchOptions {
    /// Texts embedded per throughput run (in one call, as an import would).
    pub texts: usize,
    /// Throughput runs (after one warm-up run).
    pub runs: usize,
    /// Single-query embeddings timed.
    pub queries: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            texts: 512,
            runs: 5,
            queries: 100,
        }
    }
}

/// What was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    /// The embedder's model id.
    pub model_id: String,
    /// Texts per throughput run.
    pub texts: usize,
    /// Mean words per text.
    pub mean_words: f64,
    /// Texts per second of each run, in run order.
    pub texts_per_second_runs: Vec<f64>,
    /// Median texts per second.
    pub texts_per_second: f64,
    /// Median time to embed one query.
    pub query_median: Duration,
    /// 90th percentile time to embed one query.
    pub query_p90: Duration,
    /// Worker threads available to the model (rayon's pool).
    pub threads: usize,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runs: Vec<String> = self
            .texts_per_second_runs
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect();
        writeln!(f, "model            {}", self.model_id)?;
        writeln!(f, "threads          {}", self.threads)?;
        writeln!(
            f,
            "throughput       {:.0} texts/s median ({} texts of {:.1} words on average; runs: {})",
            self.texts_per_second,
            self.texts,
            self.mean_words,
            runs.join(", ")
        )?;
        write!(
            f,
            "query latency    {:.2} ms median, {:.2} ms p90",
            self.query_median.as_secs_f64() * 1e3,
            self.query_p90.as_secs_f64() * 1e3
        )
    }
}

/// Runs the benchmark.
pub async fn run(
    embedder: &dyn Embedder,
    options: BenchOptions,
) -> Result<BenchReport, EmbedError> {
    let texts = turn_sized_texts(options.texts.max(1), 7);
    let mean_words = texts
        .iter()
        .map(|t| t.split_whitespace().count())
        .sum::<usize>() as f64
        / texts.len() as f64;

    embedder.embed(&texts).await?; // warm-up: page in weights, start threads
    let mut runs = Vec::with_capacity(options.runs);
    for _ in 0..options.runs.max(1) {
        let start = Instant::now();
        embedder.embed(&texts).await?;
        runs.push(texts.len() as f64 / start.elapsed().as_secs_f64());
    }

    let queries = query_texts(options.queries.max(1));
    let mut latencies = Vec::with_capacity(queries.len());
    for query in &queries {
        let start = Instant::now();
        embedder.embed_one(query).await?;
        latencies.push(start.elapsed());
    }
    latencies.sort();

    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(BenchReport {
        model_id: embedder.model_id().to_string(),
        texts: texts.len(),
        mean_words,
        texts_per_second: median(&sorted),
        texts_per_second_runs: runs,
        query_median: latencies[latencies.len() / 2],
        query_p90: latencies[(latencies.len() * 9 / 10).min(latencies.len() - 1)],
        threads: rayon::current_num_threads(),
    })
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Pieces of everyday conversation, combined into turns.
const SENTENCES: [&str; 32] = [
    "Hey, how was your weekend?",
    "I finally went to that pottery class I told you about and made a lopsided bowl for my mum.",
    "We drove up to the lake on Saturday and the kids spent the whole afternoon looking for frogs.",
    "Work has been hectic since the product launch got moved up by two weeks.",
    "Did you ever finish reading the book about the history of salt?",
    "My sister just adopted a beagle puppy named Biscuit and he chews absolutely everything.",
    "I started running again, only three miles so far, but my knees feel fine.",
    "Thanks for the recipe, the lentil soup was a big hit at dinner.",
    "I'm thinking about taking a painting class in the spring, maybe watercolours.",
    "The support group meeting on Tuesday was really moving, people shared such honest stories.",
    "Can you remind me what time the concert starts on Friday?",
    "We are saving up for a trip to Portugal next summer, Lisbon and then the coast.",
    "My grandmother turned ninety last month and we threw her a surprise party.",
    "I switched teams at work, so now I mostly do data analysis instead of support.",
    "Honestly I have been sleeping badly since the neighbours got a new dog.",
    "Let's grab coffee next week if you are free on Wednesday morning.",
    "I volunteered at the animal shelter again and walked six dogs in one afternoon.",
    "The garden is finally producing tomatoes, way more than we can eat.",
    "Do you still play guitar, or did you give it up after moving?",
    "My son started kindergarten and he already has a best friend called Leo.",
    "I have been learning Spanish on my phone for about four months now.",
    "We watched a documentary about deep sea creatures and it was fascinating.",
    "The doctor said my blood pressure is better since I cut back on coffee.",
    "I'm nervous about the job interview on Thursday but I have prepared a lot.",
    "That hiking trail was steeper than I expected, but the view at the top was worth it.",
    "I gave a talk at the library about raising kids in two languages.",
    "Our book club picked a mystery novel this month and nobody guessed the ending.",
    "I'm so proud of you for running the marathon!",
    "Yesterday I tried baking sourdough for the first time and it came out flat.",
    "We are repainting the living room a soft green colour this weekend.",
    "I met an old friend from college at the farmers market last Sunday.",
    "Sorry I missed your call, I was at my cousin's wedding rehearsal.",
];

/// Deterministic chat turns of 10 to 40 words.
pub fn turn_sized_texts(count: usize, seed: u64) -> Vec<String> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = move |bound: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as usize) % bound
    };
    (0..count)
        .map(|_| {
            let target = 10 + next(31);
            let mut words = 0;
            let mut turn = String::new();
            while words < target {
                let sentence = SENTENCES[next(SENTENCES.len())];
                let n = sentence.split_whitespace().count();
                if words > 0 && words + n > 40 {
                    break;
                }
                if !turn.is_empty() {
                    turn.push(' ');
                }
                turn.push_str(sentence);
                words += n;
            }
            turn
        })
        .collect()
}

/// Short search queries, like those a user or agent asks.
fn query_texts(count: usize) -> Vec<String> {
    const QUERIES: [&str; 8] = [
        "what is the name of my sister's dog",
        "when is the concert",
        "where are we travelling next summer",
        "how old is grandma",
        "which class did I take",
        "what does my son's best friend like",
        "job interview",
        "what colour is the living room",
    ];
    (0..count)
        .map(|i| QUERIES[i % QUERIES.len()].to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_turn_sized_and_deterministic() {
        let texts = turn_sized_texts(200, 1);
        assert_eq!(texts, turn_sized_texts(200, 1));
        for text in &texts {
            let words = text.split_whitespace().count();
            assert!((10..=40).contains(&words), "{words} words: {text}");
        }
    }

    #[test]
    fn median_of_odd_and_even_lists() {
        assert_eq!(median(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
    }
}
