//! Lexical search: postings keyed by user, scored with the same BM25 as the SQLite engine.
//!
//! A memory's indexed *body* is what engram-text makes of its text, followed by what it makes
//! of the turn before it in its conversation (the episode just before it in the same user's
//! session), exactly as the SQLite engine indexes it. Each user has a row in `lexical_users`
//! (document count, total terms, a short key) and one `postings` row per term and memory with
//! the term's frequency and the body's length; `lexical_bodies` keeps each body to take it out
//! again and to match phrases.
//!
//! A search reads the user's statistics and the postings of the query's terms in one statement,
//! scores every candidate in Rust with `engram_text::bm25` from the same numbers the SQLite
//! engine uses (so the scores are the same to the last bit), and then lets one more statement
//! apply the filter to all candidates and take the best: the filter decides before the top-k.

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::GenericClient;
use engram_core::store::LexicalHit;
use engram_core::{Filter, StoreError};
use engram_text::bm25;
use jiff::Timestamp;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

use crate::error::from_pg;
use crate::rows::{MEMORY_COLUMNS, Params, filter_sql, memory_from_row};
use crate::store::Db;

/// The analysed body of a memory: its own terms, then its conversation context's.
pub(crate) fn body(text: &str, context: Option<&str>) -> Vec<String> {
    let mut terms = engram_text::terms(text);
    if let Some(context) = context {
        engram_text::for_each_term(context, |t| terms.push(t.to_string()));
    }
    terms
}

/// Longest term kept as it is in `postings`; a longer one (a "word" of hundreds of letters) is
/// kept as `~` and its hash, which matches exactly the same terms and fits a B-tree entry.
pub(crate) const MAX_POSTING_TERM_BYTES: usize = 200;

/// How a term is kept in `postings`.
pub(crate) fn posting_term(term: &str) -> std::borrow::Cow<'_, str> {
    if term.len() <= MAX_POSTING_TERM_BYTES {
        std::borrow::Cow::Borrowed(term)
    } else {
        // Analysed terms are letters and digits, so no real term starts with `~`.
        std::borrow::Cow::Owned(format!("~{}", blake3::hash(term.as_bytes()).to_hex()))
    }
}

/// Each distinct term of a body with its frequency, in order of first occurrence.
pub(crate) fn frequencies(body: &[String]) -> Vec<(&str, i32)> {
    let mut at: HashMap<&str, usize> = HashMap::with_capacity(body.len());
    let mut out: Vec<(&str, i32)> = Vec::with_capacity(body.len());
    for term in body {
        match at.get(term.as_str()) {
            Some(&i) => out[i].1 += 1,
            None => {
                at.insert(term, out.len());
                out.push((term, 1));
            }
        }
    }
    out
}

/// The rows to index: a memory's `doc`, its user's key and its body.
pub(crate) struct Indexed<'a> {
    pub doc: i64,
    pub user_key: i32,
    pub body: &'a [String],
}

/// Writes postings and bodies for `rows` (binary COPY: one round trip however many). The
/// postings go in key order, so that each page of their index is written once per batch
/// rather than once per memory.
pub(crate) async fn write_index(
    tx: &impl Db,
    rows: &[Indexed<'_>],
) -> Result<(), tokio_postgres::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut postings: Vec<(i32, std::borrow::Cow<'_, str>, i64, i32, i32)> = Vec::new();
    for row in rows {
        let length = row.body.len() as i32;
        for (term, tf) in frequencies(row.body) {
            postings.push((row.user_key, posting_term(term), row.doc, tf, length));
        }
    }
    postings.sort_unstable_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    let sink = tx
        .copy_rows("COPY postings (user_key, term, doc, tf, len) FROM STDIN BINARY")
        .await?;
    let types = [Type::INT4, Type::TEXT, Type::INT8, Type::INT4, Type::INT4];
    let writer = BinaryCopyInWriter::new(sink, &types);
    let mut writer = std::pin::pin!(writer);
    for (user_key, term, doc, tf, length) in &postings {
        writer
            .as_mut()
            .write(&[user_key, &term.as_ref(), doc, tf, length])
            .await?;
    }
    writer.finish().await?;
    let sink = tx
        .copy_rows("COPY lexical_bodies (doc, terms) FROM STDIN BINARY")
        .await?;
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::TEXT]);
    let mut writer = std::pin::pin!(writer);
    for row in rows {
        writer
            .as_mut()
            .write(&[&row.doc, &row.body.join(" ")])
            .await?;
    }
    writer.finish().await?;
    Ok(())
}

/// Takes a memory out of the index: its postings and body. Returns how many terms it had.
pub(crate) async fn unindex(
    tx: &impl Db,
    user_key: i32,
    doc: i64,
) -> Result<i64, tokio_postgres::Error> {
    let body: Option<String> = tx
        .query_opt(
            "DELETE FROM lexical_bodies WHERE doc = $1 RETURNING terms",
            &[&doc],
        )
        .await?
        .map(|r| r.get(0));
    let Some(body) = body else {
        return Ok(0);
    };
    let terms: Vec<&str> = if body.is_empty() {
        Vec::new()
    } else {
        body.split(' ').collect()
    };
    let mut distinct: Vec<String> = terms.iter().map(|t| posting_term(t).into_owned()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    tx.execute(
        "DELETE FROM postings WHERE user_key = $1 AND term = ANY($2) AND doc = $3",
        &[&user_key, &distinct, &doc],
    )
    .await?;
    Ok(terms.len() as i64)
}

/// Locks the statistics rows of `users` (creating them), in a fixed order so that two writers
/// never wait for each other in a circle, and returns each user's key. Every write that changes
/// a user's memories takes this lock first, so one user's writes are ordered as in SQLite.
pub(crate) async fn lock_users(
    tx: &impl Db,
    users: &[&str],
) -> Result<HashMap<String, i32>, tokio_postgres::Error> {
    let mut sorted: Vec<&str> = users.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let rows = tx
        .query(
            "INSERT INTO lexical_users (user_id, docs, terms) \
             SELECT u, 0, 0 FROM unnest($1::text[]) AS u ORDER BY u \
             ON CONFLICT (user_id) DO UPDATE SET docs = lexical_users.docs \
             RETURNING user_id, user_key",
            &[&sorted],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Adds documents and terms to users' statistics (negative to take them away; never below 0).
pub(crate) async fn add_to_stats(
    tx: &impl Db,
    deltas: &HashMap<i32, (i64, i64)>,
) -> Result<(), tokio_postgres::Error> {
    if deltas.is_empty() {
        return Ok(());
    }
    let keys: Vec<i32> = deltas.keys().copied().collect();
    let docs: Vec<i64> = keys.iter().map(|k| deltas[k].0).collect();
    let terms: Vec<i64> = keys.iter().map(|k| deltas[k].1).collect();
    tx.execute(
        "UPDATE lexical_users u SET docs = greatest(u.docs + d.docs, 0), \
         terms = greatest(u.terms + d.terms, 0) \
         FROM unnest($1::integer[], $2::bigint[], $3::bigint[]) AS d(user_key, docs, terms) \
         WHERE u.user_key = d.user_key",
        &[&keys, &docs, &terms],
    )
    .await?;
    Ok(())
}

/// A memory about to be stored, as its conversation context is looked up.
pub(crate) struct Turn<'a> {
    pub user_id: &'a str,
    pub session_id: Option<&'a str>,
    pub is_episode: bool,
    pub created_at: i64,
    pub doc: i64,
    pub text: &'a str,
}

/// The text of the turn before each of `turns` (memories about to be stored, in the order they
/// are stored, with the docs they will get): the latest episode of the same user and session
/// stored before it (earlier in time, or at the same time and stored earlier), whether it is
/// already in the database or earlier in `turns`. Exactly the SQLite engine's rule, which
/// inserts one by one.
pub(crate) async fn contexts_for_new(
    tx: &impl Db,
    turns: &[Turn<'_>],
) -> Result<Vec<Option<String>>, tokio_postgres::Error> {
    let wanted: Vec<usize> = (0..turns.len())
        .filter(|&i| turns[i].is_episode && turns[i].session_id.is_some())
        .collect();
    let mut out: Vec<Option<String>> = vec![None; turns.len()];
    if wanted.is_empty() {
        return Ok(out);
    }
    // The best candidate already stored, per turn (every stored doc is below the new ones).
    let users: Vec<&str> = wanted.iter().map(|&i| turns[i].user_id).collect();
    let sessions: Vec<&str> = wanted
        .iter()
        .map(|&i| turns[i].session_id.unwrap_or_default())
        .collect();
    let times: Vec<i64> = wanted.iter().map(|&i| turns[i].created_at).collect();
    let rows = tx
        .query(
            "SELECT q.i, p.text, p.created_at, p.doc \
             FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS q(u, s, c, i) \
             CROSS JOIN LATERAL (SELECT p.text, p.created_at, p.doc FROM memories p \
                 WHERE p.user_id = q.u AND p.session_id = q.s AND p.kind = 'episode' \
                 AND p.created_at <= q.c \
                 ORDER BY p.created_at DESC, p.doc DESC LIMIT 1) p",
            &[&users, &sessions, &times],
        )
        .await?;
    let mut stored: HashMap<usize, (i64, i64, String)> = HashMap::new();
    for row in rows {
        let ordinal: i64 = row.get(0);
        if let Some(&i) = usize::try_from(ordinal - 1)
            .ok()
            .and_then(|o| wanted.get(o))
        {
            stored.insert(i, (row.get(2), row.get(3), row.get(1)));
        }
    }
    // Earlier turns of each conversation (user, session) in this batch, by (time, doc).
    type Turns = BTreeMap<(i64, i64), usize>;
    let mut earlier: HashMap<(&str, &str), Turns> = HashMap::new();
    for (i, turn) in turns.iter().enumerate() {
        let Some(session) = turn.session_id.filter(|_| turn.is_episode) else {
            continue;
        };
        let conversation = earlier.entry((turn.user_id, session)).or_default();
        let in_batch = conversation
            .range(..=(turn.created_at, turn.doc))
            .next_back()
            .map(|(&key, &j)| (key, j));
        let from_store = stored.get(&i);
        out[i] = match (in_batch, from_store) {
            (Some((key, j)), Some((at, doc, text))) => {
                if key > (*at, *doc) {
                    Some(turns[j].text.to_string())
                } else {
                    Some(text.clone())
                }
            }
            (Some((_, j)), None) => Some(turns[j].text.to_string()),
            (None, Some((_, _, text))) => Some(text.clone()),
            (None, None) => None,
        };
        conversation.insert((turn.created_at, turn.doc), i);
    }
    Ok(out)
}

/// The text of the turn before a stored memory (for re-indexing it after its text changed).
pub(crate) async fn context_of_stored(
    tx: &impl Db,
    turn: &Turn<'_>,
) -> Result<Option<String>, tokio_postgres::Error> {
    let Some(session) = turn.session_id.filter(|_| turn.is_episode) else {
        return Ok(None);
    };
    Ok(tx
        .query_opt(
            "SELECT text FROM memories WHERE user_id = $1 AND session_id = $2 \
             AND kind = 'episode' AND doc <> $3 \
             AND (created_at < $4 OR (created_at = $4 AND doc < $3)) \
             ORDER BY created_at DESC, doc DESC LIMIT 1",
            &[&turn.user_id, &session, &turn.doc, &turn.created_at],
        )
        .await?
        .map(|r| r.get(0)))
}

/// True when the index was built by this build's text analyser.
pub(crate) async fn analyzer_is_current(
    client: &impl tokio_postgres::GenericClient,
    location: &str,
) -> Result<bool, StoreError> {
    let found: Option<String> = client
        .query_opt(
            "SELECT value FROM engram_meta WHERE key = 'text_analyzer'",
            &[],
        )
        .await
        .map_err(|e| from_pg(&e, location))?
        .map(|r| r.get(0));
    Ok(found.as_deref() == Some(engram_text::ANALYZER_VERSION))
}

/// Re-indexes every memory when the index was built by another text analyser (or never).
pub(crate) async fn check_analyzer(tx: &impl Db, location: &str) -> Result<(), StoreError> {
    if analyzer_is_current(tx, location).await? {
        return Ok(());
    }
    rebuild(tx).await.map_err(|e| from_pg(&e, location))
}

/// Re-indexes every memory, each with the turn before it among all stored memories.
pub(crate) async fn rebuild(tx: &impl Db) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute(
        "DELETE FROM postings; DELETE FROM lexical_bodies; \
         UPDATE lexical_users SET docs = 0, terms = 0;",
    )
    .await?;
    let rows = tx
        .query(
            "SELECT doc, user_id, session_id, kind = 'episode', created_at, text \
             FROM memories ORDER BY doc",
            &[],
        )
        .await?;
    struct Row {
        doc: i64,
        user_id: String,
        session_id: Option<String>,
        episode: bool,
        created_at: i64,
        text: String,
    }
    let rows: Vec<Row> = rows
        .iter()
        .map(|r| Row {
            doc: r.get(0),
            user_id: r.get(1),
            session_id: r.get(2),
            episode: r.get(3),
            created_at: r.get(4),
            text: r.get(5),
        })
        .collect();
    // The turn before each episode: its predecessor in (time, doc) order in its conversation.
    let mut conversations: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        if let (true, Some(session)) = (row.episode, row.session_id.as_deref()) {
            conversations
                .entry((&row.user_id, session))
                .or_default()
                .push(i);
        }
    }
    let mut context: Vec<Option<usize>> = vec![None; rows.len()];
    for turns in conversations.values_mut() {
        turns.sort_unstable_by_key(|&i| (rows[i].created_at, rows[i].doc));
        for pair in turns.windows(2) {
            context[pair[1]] = Some(pair[0]);
        }
    }
    let users: Vec<&str> = rows.iter().map(|r| r.user_id.as_str()).collect();
    let keys = lock_users(tx, &users).await?;
    let bodies: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| body(&r.text, context[i].map(|j| rows[j].text.as_str())))
        .collect();
    let mut deltas: HashMap<i32, (i64, i64)> = HashMap::new();
    let mut indexed = Vec::with_capacity(rows.len());
    let mut lengths: Vec<(i64, i32)> = Vec::with_capacity(rows.len());
    for (row, body) in rows.iter().zip(&bodies) {
        let Some(&user_key) = keys.get(&row.user_id) else {
            continue;
        };
        let delta = deltas.entry(user_key).or_default();
        delta.0 += 1;
        delta.1 += body.len() as i64;
        indexed.push(Indexed {
            doc: row.doc,
            user_key,
            body,
        });
        lengths.push((row.doc, body.len() as i32));
    }
    write_index(tx, &indexed).await?;
    let docs: Vec<i64> = lengths.iter().map(|l| l.0).collect();
    let terms: Vec<i32> = lengths.iter().map(|l| l.1).collect();
    tx.execute(
        "UPDATE memories m SET body_terms = l.terms \
         FROM unnest($1::bigint[], $2::integer[]) AS l(doc, terms) WHERE m.doc = l.doc",
        &[&docs, &terms],
    )
    .await?;
    add_to_stats(tx, &deltas).await?;
    tx.execute(
        "INSERT INTO engram_meta (key, value) VALUES ('text_analyzer', $1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&engram_text::ANALYZER_VERSION],
    )
    .await?;
    Ok(())
}

/// The best `limit` memories within the filter for `query`, scored by BM25 with the user's own
/// statistics; ties go to the newest.
pub(crate) async fn search(
    client: &impl GenericClient,
    location: &str,
    filter: &Filter,
    query: &str,
    limit: usize,
    now: Timestamp,
) -> Result<Vec<LexicalHit>, StoreError> {
    let map = |e: tokio_postgres::Error| from_pg(&e, location);
    if query.trim().is_empty() {
        return Err(StoreError::BadQuery(
            "the search query is empty".to_string(),
        ));
    }
    // Checks the filter before any work (the user is required).
    let mut params = Params::default();
    let conditions = filter_sql(filter, now, &mut params)?;
    let alternatives = engram_text::query_terms(query);
    if alternatives.is_empty() {
        return Err(StoreError::BadQuery(format!(
            "the query '{query}' has no words to search for"
        )));
    }
    let mut wanted: Vec<String> = alternatives
        .iter()
        .flatten()
        .map(|t| posting_term(t).into_owned())
        .collect();
    wanted.sort_unstable();
    wanted.dedup();

    // The user's statistics and the postings of every query term (with each document's
    // length), from the postings index alone, in one statement (one snapshot).
    let statement = client
        .prepare_cached(
            "SELECT u.docs, u.terms, p.term, p.doc, p.tf, p.len FROM lexical_users u \
             LEFT JOIN postings p ON p.user_key = u.user_key AND p.term = ANY($2) \
             WHERE u.user_id = $1",
        )
        .await
        .map_err(map)?;
    let rows = client
        .query(&statement, &[&filter.user_id, &wanted])
        .await
        .map_err(map)?;
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let documents = first.get::<_, i64>(0) as f64;
    let total_terms = first.get::<_, i64>(1) as f64;
    if documents <= 0.0 {
        return Ok(Vec::new());
    }
    let average_length = total_terms / documents;
    // term -> doc -> tf, docs in order; and each document's length.
    let mut postings: HashMap<String, BTreeMap<i64, i32>> = HashMap::new();
    let mut lengths: HashMap<i64, i32> = HashMap::new();
    for row in &rows {
        let Some(term) = row.get::<_, Option<String>>(2) else {
            continue;
        };
        let doc: i64 = row.get(3);
        postings.entry(term).or_default().insert(doc, row.get(4));
        lengths.insert(doc, row.get(5));
    }

    // Each alternative's documents and term frequencies: a word's from its postings, a
    // phrase's by reading the bodies of the documents holding all its terms.
    let mut weighted: Vec<(f64, BTreeMap<i64, u32>)> = Vec::with_capacity(alternatives.len());
    for terms in &alternatives {
        let frequencies: BTreeMap<i64, u32> = match terms.as_slice() {
            [single] => postings
                .get(posting_term(single).as_ref())
                .map(|docs| {
                    docs.iter()
                        .map(|(&doc, &tf)| (doc, u32::try_from(tf).unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default(),
            phrase => phrase_frequencies(client, &postings, phrase)
                .await
                .map_err(map)?,
        };
        let idf = bm25::idf(documents, frequencies.len() as f64);
        weighted.push((idf, frequencies));
    }
    let mut scores: BTreeMap<i64, f64> = BTreeMap::new();
    for (idf, frequencies) in &weighted {
        for (&doc, &tf) in frequencies {
            if tf == 0 {
                continue;
            }
            let length = f64::from(lengths.get(&doc).copied().unwrap_or(0));
            *scores.entry(doc).or_insert(0.0) +=
                bm25::term_score(*idf, f64::from(tf), length, average_length);
        }
    }
    if scores.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let mut ranked: Vec<(i64, f64)> = scores.into_iter().collect();
    ranked.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));

    // The filter and the tie-break by time are the table's: candidates go to it best first, in
    // slices that never split equal scores (so one slice's hits all rank above the next's),
    // until `limit` pass. Most searches need one slice.
    let docs_param = params.push(Vec::<i64>::new());
    let scores_param = params.push(Vec::<f64>::new());
    let limit_param = params.push(0i64);
    let sql = format!(
        "SELECT {MEMORY_COLUMNS}, c.score FROM memories m \
         JOIN unnest({docs_param}::bigint[], {scores_param}::float8[]) AS c(doc, score) \
         ON m.doc = c.doc WHERE {conditions} \
         ORDER BY c.score DESC, m.created_at DESC, m.doc DESC LIMIT {limit_param}"
    );
    let statement = client.prepare_cached(&sql).await.map_err(map)?;
    let mut hits: Vec<LexicalHit> = Vec::with_capacity(limit);
    let mut start = 0;
    let mut slice = (limit * 4).max(32);
    while start < ranked.len() && hits.len() < limit {
        let mut end = (start + slice).min(ranked.len());
        while end < ranked.len() && ranked[end].1 == ranked[end - 1].1 {
            end += 1;
        }
        let (docs, scores): (Vec<i64>, Vec<f64>) = ranked[start..end].iter().copied().unzip();
        let wanted = crate::rows::clamp_i64(limit - hits.len());
        params.replace(&docs_param, docs);
        params.replace(&scores_param, scores);
        params.replace(&limit_param, wanted);
        for row in client
            .query(&statement, &params.as_refs())
            .await
            .map_err(map)?
        {
            let (_, memory) = memory_from_row(&row)?;
            hits.push(LexicalHit {
                memory,
                bm25: row.get(17),
            });
        }
        start = end;
        slice = slice.saturating_mul(4);
    }
    Ok(hits)
}

/// How often a phrase occurs in each document that holds all of its terms.
async fn phrase_frequencies(
    client: &impl GenericClient,
    postings: &HashMap<String, BTreeMap<i64, i32>>,
    phrase: &[String],
) -> Result<BTreeMap<i64, u32>, tokio_postgres::Error> {
    let mut holders: Option<Vec<i64>> = None;
    for term in phrase {
        let docs: Vec<i64> = postings
            .get(posting_term(term).as_ref())
            .map(|d| d.keys().copied().collect())
            .unwrap_or_default();
        holders = Some(match holders {
            None => docs,
            Some(before) => before
                .into_iter()
                .filter(|d| docs.binary_search(d).is_ok())
                .collect(),
        });
    }
    let holders = holders.unwrap_or_default();
    if holders.is_empty() {
        return Ok(BTreeMap::new());
    }
    let statement = client
        .prepare_cached("SELECT doc, terms FROM lexical_bodies WHERE doc = ANY($1)")
        .await?;
    let mut out = BTreeMap::new();
    for row in client.query(&statement, &[&holders]).await? {
        let terms: &str = row.get(1);
        let document: Vec<&str> = terms.split(' ').collect();
        let n = bm25::phrase_occurrences(&document, phrase);
        if n > 0 {
            out.insert(row.get(0), n);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_the_text_then_its_context() {
        let b = body("Running late", Some("Where are you?"));
        assert_eq!(b, ["run", "late", "where", "are", "you"]);
        assert_eq!(
            frequencies(&body("tea, tea and cake", None)),
            [("tea", 2), ("and", 1), ("cake", 1)]
        );
    }
}
