//! Search queries, through the analyser, the lexical index (FTS5 with its own query syntax) and
//! the searcher's time phrases, over a small store built once per process.
#![no_main]

use std::sync::{Arc, OnceLock};

use engram_core::{Filter, MemoryStore, NewMemory, Scope};
use engram_memory::{SearchRequest, Searcher};
use engram_store_sqlite::SqliteStore;
use libfuzzer_sys::fuzz_target;

fn searcher() -> &'static (Arc<SqliteStore>, Searcher) {
    static SEARCHER: OnceLock<(Arc<SqliteStore>, Searcher)> = OnceLock::new();
    SEARCHER.get_or_init(|| {
        let store = Arc::new(
            SqliteStore::open(engram_fuzz::scratch().join("search.db"))
                .unwrap_or_else(|e| panic!("cannot open the store: {e}")),
        );
        for text in engram_fuzz::SEED_TEXTS {
            let memory = NewMemory::new(Scope::user("u"), *text);
            let _ = engram_fuzz::runtime().block_on(store.add(memory, "fuzz"));
        }
        let searcher = Searcher::new(store.clone());
        (store, searcher)
    })
}

fuzz_target!(|query: &str| {
    let (store, searcher) = searcher();
    let _ = engram_text::terms(query);
    let filter = Filter::user("u");
    let _ = engram_fuzz::runtime().block_on(store.search_lexical(&filter, query, 5));
    let request = SearchRequest {
        filter: Filter::user("u"),
        query: query.to_string(),
        limit: 5,
    };
    if let Ok(results) = engram_fuzz::runtime().block_on(searcher.search(&request)) {
        assert!(results.hits.len() <= 5);
        assert!(results.hits.iter().all(|h| h.memory.scope.user_id == "u"));
    }
});
