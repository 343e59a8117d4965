//! A hierarchical navigable small world graph (Malkov & Yashunin, 2016) over int8 vectors,
//! searched with a filter predicate.
//!
//! Nodes are numbered in insertion order. Layer 0 holds every node with up to `2 m` links; each
//! higher layer holds a random, geometrically shrinking subset with up to `m` links. A search
//! descends greedily through the upper layers and then runs a best-first search on layer 0.
//!
//! Filtering happens during that search: every node may be walked through (so the graph stays
//! connected however selective the filter is), but only nodes the predicate accepts enter the
//! result set, and the search stops only once `ef` accepted nodes are found and no candidate can
//! improve on them. Scope is therefore never applied by over-fetching and discarding.
//!
//! Links are atomics so several threads can insert at once (each node's lists are rewritten
//! under a striped lock; a reader may see a list mid-rewrite, which only makes one step of that
//! insertion slightly less informed, as in hnswlib). Searches run concurrently with nothing that
//! writes: the owner holds the graph behind a read-write lock.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::quant::{QuantQuery, dot_i8, quantize_into};
use super::visited::{VisitedList, VisitedPool};

/// How a graph is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HnswParams {
    /// Links per node on the upper layers (layer 0 keeps twice as many).
    pub m: usize,
    /// Candidate list length while inserting: higher builds a better graph, more slowly.
    pub ef_construction: usize,
    /// Seed for the random layer assignment (fixed, so builds are repeatable).
    pub seed: u64,
}

/// A node and its similarity to the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Neighbor {
    /// Approximate dot product with the query.
    pub similarity: f32,
    /// The node.
    pub node: u32,
}

impl Neighbor {
    /// Best first: higher similarity, then lower node number (for repeatable order).
    fn better(&self, other: &Self) -> Ordering {
        self.similarity
            .total_cmp(&other.similarity)
            .then(other.node.cmp(&self.node))
    }
}

/// Heap entry whose top is the most similar node.
#[derive(Debug, Clone, Copy)]
struct Nearest(Neighbor);

impl PartialEq for Nearest {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Nearest {}
impl PartialOrd for Nearest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Nearest {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.better(&other.0)
    }
}

/// Heap entry whose top is the least similar node.
#[derive(Debug, Clone, Copy)]
struct Farthest(Neighbor);

impl PartialEq for Farthest {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Farthest {}
impl PartialOrd for Farthest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Farthest {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.better(&self.0)
    }
}

/// An unused link word (never a node: [`Hnsw::append`] refuses node `u32::MAX`).
const EMPTY: u32 = u32::MAX;
/// The entry point word when the graph is empty.
const NO_ENTRY: u64 = u64::MAX;
/// Highest layer a node may get (a million nodes need about six with m = 12).
const MAX_LEVEL: u8 = 16;
/// Locks guarding link-list rewrites during parallel inserts.
const STRIPES: usize = 1024;

fn pack_entry(node: u32, level: u8) -> u64 {
    (u64::from(level) << 32) | u64::from(node)
}

fn unpack_entry(word: u64) -> (u32, u8) {
    ((word & 0xFFFF_FFFF) as u32, (word >> 32) as u8)
}

/// The graph and its quantised vectors.
#[derive(Debug)]
pub(crate) struct Hnsw {
    dim: usize,
    m: usize,
    m0: usize,
    ef_construction: usize,
    level_factor: f64,
    rng: u64,
    vectors: Vec<i8>,
    scales: Vec<f32>,
    levels: Vec<u8>,
    /// Layer 0: per node `m0` words, the links followed by [`EMPTY`] words when there are
    /// fewer (no count word: 4 MB less at a million nodes).
    links0: Vec<AtomicU32>,
    /// Where a node's upper-layer lists start in `upper_links` (unused for layer-0-only nodes).
    upper_start: Vec<u32>,
    /// Upper layers: per node and layer above 0, `m` words laid out as on layer 0.
    upper_links: Vec<AtomicU32>,
    entry: AtomicU64,
    entry_lock: Mutex<()>,
    stripes: Vec<Mutex<()>>,
    max_scale: f32,
    max_norm: f32,
    visited: VisitedPool,
}

/// Why a graph could not take another node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HnswError {
    /// The vector has another length than the graph's.
    #[error("a vector has {found} dimensions but the index holds {expected}-dimensional vectors")]
    Dimension {
        /// The graph's dimension.
        expected: usize,
        /// The vector's.
        found: usize,
    },
    /// Node numbers are 32-bit.
    #[error("the vector index is full (4 billion vectors)")]
    Full,
    /// The build was asked to stop.
    #[error("the vector index build was cancelled")]
    Cancelled,
}

impl Hnsw {
    /// An empty graph for `dim`-dimensional vectors.
    pub fn new(dim: usize, params: HnswParams) -> Self {
        let m = params.m.clamp(2, 64);
        Self {
            dim,
            m,
            m0: 2 * m,
            ef_construction: params.ef_construction.max(m),
            level_factor: 1.0 / (m as f64).ln(),
            rng: params.seed ^ 0x5DEE_CE66_D1CE_4E5B,
            vectors: Vec::new(),
            scales: Vec::new(),
            levels: Vec::new(),
            links0: Vec::new(),
            upper_start: Vec::new(),
            upper_links: Vec::new(),
            entry: AtomicU64::new(NO_ENTRY),
            entry_lock: Mutex::new(()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            max_scale: 0.0,
            max_norm: 0.0,
            visited: VisitedPool::default(),
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    /// Vector length.
    pub fn dimension(&self) -> usize {
        self.dim
    }

    /// The largest quantisation scale of any node (for rounding bounds).
    pub fn max_scale(&self) -> f32 {
        self.max_scale
    }

    /// The largest Euclidean length of any node's original vector.
    pub fn max_norm(&self) -> f32 {
        self.max_norm
    }

    /// Makes room for `additional` more nodes without reallocating.
    pub fn reserve(&mut self, additional: usize) {
        self.vectors.reserve_exact(additional * self.dim);
        self.scales.reserve_exact(additional);
        self.levels.reserve_exact(additional);
        self.upper_start.reserve_exact(additional);
        self.links0.reserve_exact(additional * self.m0);
    }

    /// Drops what only linking needed (the visited lists of the linking threads); searches
    /// allocate their own again.
    pub fn release_build_memory(&self) {
        self.visited.clear();
    }

    /// Bytes held by the graph and its vectors.
    pub fn heap_bytes(&self) -> usize {
        self.vectors.capacity()
            + 4 * (self.scales.capacity()
                + self.links0.capacity()
                + self.upper_start.capacity()
                + self.upper_links.capacity())
            + self.levels.capacity()
    }

    fn next_random(&mut self) -> u64 {
        // SplitMix64: enough for drawing layers, and repeatable.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn random_level(&mut self) -> u8 {
        // Uniform in (0, 1]; the layer is floor(-ln(u) / ln(m)), geometric with ratio 1/m.
        let u = ((self.next_random() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let level = (-u.ln() * self.level_factor).floor();
        if level >= f64::from(MAX_LEVEL) {
            MAX_LEVEL
        } else {
            level as u8
        }
    }

    /// Stores a node's vector and gives it empty link lists; [`Hnsw::link`] then connects it.
    pub fn append(&mut self, vector: &[f32]) -> Result<u32, HnswError> {
        if vector.len() != self.dim {
            return Err(HnswError::Dimension {
                expected: self.dim,
                found: vector.len(),
            });
        }
        let node = u32::try_from(self.len())
            .ok()
            .filter(|n| *n != u32::MAX)
            .ok_or(HnswError::Full)?;
        let start = self.vectors.len();
        self.vectors.resize(start + self.dim, 0);
        let scale = quantize_into(vector, &mut self.vectors[start..]);
        self.scales.push(scale);
        self.max_scale = self.max_scale.max(scale);
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm.is_finite() {
            self.max_norm = self.max_norm.max(norm);
        }
        let level = self.random_level();
        self.levels.push(level);
        self.links0
            .extend((0..self.m0).map(|_| AtomicU32::new(EMPTY)));
        if level > 0 {
            let start = u32::try_from(self.upper_links.len()).map_err(|_| HnswError::Full)?;
            self.upper_start.push(start);
            let words = usize::from(level) * self.m;
            self.upper_links
                .extend((0..words).map(|_| AtomicU32::new(EMPTY)));
        } else {
            self.upper_start.push(u32::MAX);
        }
        Ok(node)
    }

    /// Stores and connects a node.
    #[cfg(test)]
    pub fn insert(&mut self, vector: &[f32]) -> Result<u32, HnswError> {
        let node = self.append(vector)?;
        self.link_from(node, 1, &AtomicBool::new(false))?;
        Ok(node)
    }

    /// Connects the appended nodes `first..` using up to `threads` threads; `cancel` stops it.
    pub fn link_from(
        &self,
        first: u32,
        threads: usize,
        cancel: &AtomicBool,
    ) -> Result<(), HnswError> {
        let next = AtomicUsize::new(first as usize);
        let total = self.len();
        let work = || -> Result<(), HnswError> {
            let mut visited = self.visited.take(total);
            let result = pulp::Arch::new().dispatch(LinkTask {
                graph: self,
                next: &next,
                total,
                cancel,
                visited: &mut visited,
            });
            self.visited.give_back(visited);
            result
        };
        let threads = threads.max(1);
        if threads == 1 || total.saturating_sub(first as usize) < 1000 {
            return work();
        }
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
            let mut result = work();
            for helper in helpers {
                let outcome = helper.join().unwrap_or(Err(HnswError::Cancelled));
                if result.is_ok() {
                    result = outcome;
                }
            }
            result
        })
    }

    /// Replaces a node's vector; its links stay as they were.
    pub fn replace_vector(&mut self, node: u32, vector: &[f32]) -> Result<(), HnswError> {
        if vector.len() != self.dim {
            return Err(HnswError::Dimension {
                expected: self.dim,
                found: vector.len(),
            });
        }
        let start = node as usize * self.dim;
        let Some(slot) = self.vectors.get_mut(start..start + self.dim) else {
            return Ok(());
        };
        let scale = quantize_into(vector, slot);
        if let Some(s) = self.scales.get_mut(node as usize) {
            *s = scale;
        }
        self.max_scale = self.max_scale.max(scale);
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm.is_finite() {
            self.max_norm = self.max_norm.max(norm);
        }
        Ok(())
    }

    #[inline(always)]
    fn vector(&self, node: u32) -> &[i8] {
        let start = node as usize * self.dim;
        self.vectors.get(start..start + self.dim).unwrap_or(&[])
    }

    #[inline(always)]
    fn scale(&self, node: u32) -> f32 {
        self.scales.get(node as usize).copied().unwrap_or(0.0)
    }

    /// The query a search or an insertion measures against: a node's own vector, or a
    /// quantised query.
    #[inline(always)]
    fn target_of_node(&self, node: u32) -> Target<'_> {
        Target {
            values: self.vector(node),
            scale: self.scale(node),
        }
    }

    /// Approximate similarity of `target` to `node`. Everything on the hot paths is a plain
    /// `#[inline(always)]` function or loop (no closures), so that it is compiled inside the
    /// SIMD-dispatched task that calls it.
    #[inline(always)]
    fn similarity_to(&self, target: &Target<'_>, node: u32) -> f32 {
        dot_i8(target.values, self.vector(node)) as f32 * (target.scale * self.scale(node))
    }

    /// Approximate similarity of a query to each of `nodes`, appended to `out`.
    pub fn similarities(&self, query: &QuantQuery, nodes: &[u32], out: &mut Vec<f32>) {
        pulp::Arch::new().dispatch(ScoreTask {
            graph: self,
            target: Target {
                values: &query.query.values,
                scale: query.query.scale,
            },
            nodes,
            out,
        })
    }

    /// The link words of `node` on `level`: links, then [`EMPTY`] words if there are fewer.
    /// Readers stop at the first [`EMPTY`] they load (a list may be rewritten while a parallel
    /// insert reads it).
    #[inline(always)]
    fn list(&self, node: u32, level: u8) -> &[AtomicU32] {
        if level == 0 {
            let start = node as usize * self.m0;
            self.links0.get(start..start + self.m0).unwrap_or(&[])
        } else {
            let Some(&first) = self.upper_start.get(node as usize) else {
                return &[];
            };
            if first == u32::MAX || level > self.levels.get(node as usize).copied().unwrap_or(0) {
                return &[];
            }
            let start = first as usize + (usize::from(level) - 1) * self.m;
            self.upper_links.get(start..start + self.m).unwrap_or(&[])
        }
    }

    /// Walks one layer greedily towards the target.
    #[inline(always)]
    fn greedy(&self, target: &Target<'_>, mut best: Neighbor, level: u8) -> Neighbor {
        loop {
            let mut moved = false;
            for link in self.list(best.node, level) {
                let n = link.load(Relaxed);
                if n == EMPTY {
                    break;
                }
                let s = self.similarity_to(target, n);
                if s > best.similarity {
                    best = Neighbor {
                        similarity: s,
                        node: n,
                    };
                    moved = true;
                }
            }
            if !moved {
                return best;
            }
        }
    }

    /// Best-first search of one layer from `entry`; returns up to `ef` nodes that `pass`
    /// accepts (unordered). Nodes that fail `pass` are still walked through.
    #[inline(always)]
    fn search_layer<P: Fn(u32) -> bool>(
        &self,
        target: &Target<'_>,
        entry: &[Neighbor],
        ef: usize,
        level: u8,
        visited: &mut VisitedList,
        pass: &P,
    ) -> Vec<Neighbor> {
        let mut candidates: BinaryHeap<Nearest> = BinaryHeap::with_capacity(ef * 2);
        let mut results: BinaryHeap<Farthest> = BinaryHeap::with_capacity(ef + 1);
        for e in entry {
            if visited.insert(e.node) {
                candidates.push(Nearest(*e));
                if pass(e.node) {
                    results.push(Farthest(*e));
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
        }
        // The similarity a new node must beat to matter: the worst kept once `ef` are kept.
        let mut bound = f32::NEG_INFINITY;
        while let Some(Nearest(current)) = candidates.pop() {
            if current.similarity < bound {
                break;
            }
            for link in self.list(current.node, level) {
                let n = link.load(Relaxed);
                if n == EMPTY {
                    break;
                }
                if !visited.insert(n) {
                    continue;
                }
                let s = self.similarity_to(target, n);
                if s > bound {
                    let found = Neighbor {
                        similarity: s,
                        node: n,
                    };
                    candidates.push(Nearest(found));
                    if pass(n) {
                        results.push(Farthest(found));
                        if results.len() > ef {
                            results.pop();
                        }
                        if results.len() >= ef
                            && let Some(Farthest(worst)) = results.peek()
                        {
                            bound = worst.similarity;
                        }
                    }
                }
            }
        }
        results
            .into_vec()
            .into_iter()
            .map(|Farthest(n)| n)
            .collect()
    }

    /// Chooses up to `m` links among `candidates` (best first): a candidate is kept only when it
    /// is closer to the base than to every link already kept, which spreads links over
    /// directions instead of clustering them (the paper's heuristic, algorithm 4).
    #[inline(always)]
    fn select(&self, candidates: &[Neighbor], m: usize) -> Vec<Neighbor> {
        let mut kept: Vec<Neighbor> = Vec::with_capacity(m);
        for c in candidates {
            if kept.len() >= m {
                break;
            }
            let own = self.target_of_node(c.node);
            let mut diverse = true;
            for k in &kept {
                if self.similarity_to(&own, k.node) > c.similarity {
                    diverse = false;
                    break;
                }
            }
            if diverse {
                kept.push(*c);
            }
        }
        kept
    }

    fn lock(&self, node: u32) -> std::sync::MutexGuard<'_, ()> {
        let stripe = &self.stripes[node as usize % STRIPES];
        stripe.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes a link list (under the node's stripe lock).
    #[inline(always)]
    fn write_list(list: &[AtomicU32], links: &[Neighbor]) {
        let n = links.len().min(list.len());
        for (slot, link) in list.iter().zip(&links[..n]) {
            slot.store(link.node, Relaxed);
        }
        for slot in &list[n..] {
            slot.store(EMPTY, Relaxed);
        }
    }

    /// How many links a list holds (under the node's stripe lock).
    #[inline(always)]
    fn used(list: &[AtomicU32]) -> usize {
        list.iter()
            .position(|slot| slot.load(Relaxed) == EMPTY)
            .unwrap_or(list.len())
    }

    /// Connects `node` to the graph: finds its neighbours on each of its layers and links both
    /// ways, pruning neighbours' lists that overflow.
    #[inline(always)]
    fn link(&self, node: u32, visited: &mut VisitedList) {
        let level = self.levels.get(node as usize).copied().unwrap_or(0);
        let mut word = self.entry.load(Relaxed);
        let mut _guard = None;
        if word == NO_ENTRY || level > unpack_entry(word).1 {
            // This node may become the entry point: decide that alone.
            _guard = Some(self.entry_lock.lock().unwrap_or_else(|e| e.into_inner()));
            word = self.entry.load(Relaxed);
            if word == NO_ENTRY {
                self.entry.store(pack_entry(node, level), Relaxed);
                return;
            }
        }
        let (entry, top) = unpack_entry(word);
        let target = self.target_of_node(node);
        let mut best = Neighbor {
            similarity: self.similarity_to(&target, entry),
            node: entry,
        };
        let mut layer = top;
        while layer > level {
            best = self.greedy(&target, best, layer);
            layer -= 1;
        }
        let mut entries = vec![best];
        loop {
            visited.reset(self.len());
            let mut found = self.search_layer(
                &target,
                &entries,
                self.ef_construction,
                layer,
                visited,
                &accept_all,
            );
            found.retain(|n| n.node != node);
            found.sort_unstable_by(|a, b| b.better(a));
            let chosen = self.select(&found, self.m);
            {
                let _lock = self.lock(node);
                Self::write_list(self.list(node, layer), &chosen);
            }
            let cap = if layer == 0 { self.m0 } else { self.m };
            for neighbor in &chosen {
                self.add_link(neighbor, node, layer, cap);
            }
            if !found.is_empty() {
                entries = found;
            }
            if layer == 0 {
                break;
            }
            layer -= 1;
        }
        if level > top {
            self.entry.store(pack_entry(node, level), Relaxed);
        }
    }

    /// Adds `node` to `neighbor`'s list on `layer`; a full list keeps the `cap` best by the
    /// selection heuristic.
    #[inline(always)]
    fn add_link(&self, neighbor: &Neighbor, node: u32, layer: u8, cap: usize) {
        let _lock = self.lock(neighbor.node);
        let slots = self.list(neighbor.node, layer);
        let n = Self::used(slots);
        for s in &slots[..n] {
            if s.load(Relaxed) == node {
                return;
            }
        }
        if n < cap.min(slots.len()) {
            slots[n].store(node, Relaxed);
            return;
        }
        let base = self.target_of_node(neighbor.node);
        let mut pool: Vec<Neighbor> = Vec::with_capacity(n + 1);
        for s in &slots[..n] {
            let other = s.load(Relaxed);
            pool.push(Neighbor {
                similarity: self.similarity_to(&base, other),
                node: other,
            });
        }
        pool.push(Neighbor {
            similarity: neighbor.similarity,
            node,
        });
        pool.sort_unstable_by(|a, b| b.better(a));
        let kept = self.select(&pool, cap);
        Self::write_list(slots, &kept);
    }

    /// The up to `ef` nodes most similar to `query` among those `pass` accepts, best first.
    pub fn search<P: Fn(u32) -> bool>(
        &self,
        query: &QuantQuery,
        ef: usize,
        pass: &P,
    ) -> Vec<Neighbor> {
        let word = self.entry.load(Relaxed);
        if word == NO_ENTRY || ef == 0 || query.query.values.len() != self.dim {
            return Vec::new();
        }
        let mut visited = self.visited.take(self.len());
        let mut found = pulp::Arch::new().dispatch(SearchTask {
            graph: self,
            target: Target {
                values: &query.query.values,
                scale: query.query.scale,
            },
            entry: unpack_entry(word),
            ef,
            visited: &mut visited,
            pass,
        });
        self.visited.give_back(visited);
        found.sort_unstable_by(|a, b| b.better(a));
        found
    }
}

/// The vector a search measures against.
#[derive(Debug, Clone, Copy)]
struct Target<'a> {
    values: &'a [i8],
    scale: f32,
}

#[inline(always)]
fn accept_all(_: u32) -> bool {
    true
}

// Each task runs one hot loop inside `pulp`'s dispatch, compiled for the best instruction set
// the CPU has (AVX-512, AVX2 or baseline), chosen at run time.

/// Links nodes handed out by a shared counter.
struct LinkTask<'a> {
    graph: &'a Hnsw,
    next: &'a AtomicUsize,
    total: usize,
    cancel: &'a AtomicBool,
    visited: &'a mut VisitedList,
}

impl pulp::WithSimd for LinkTask<'_> {
    type Output = Result<(), HnswError>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> Self::Output {
        loop {
            if self.cancel.load(Relaxed) {
                return Err(HnswError::Cancelled);
            }
            let node = self.next.fetch_add(1, Relaxed);
            if node >= self.total {
                return Ok(());
            }
            // Below u32::MAX: append refuses more nodes.
            self.graph.link(node as u32, self.visited);
        }
    }
}

/// One filtered search.
struct SearchTask<'a, P> {
    graph: &'a Hnsw,
    target: Target<'a>,
    entry: (u32, u8),
    ef: usize,
    visited: &'a mut VisitedList,
    pass: &'a P,
}

impl<P: Fn(u32) -> bool> pulp::WithSimd for SearchTask<'_, P> {
    type Output = Vec<Neighbor>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> Self::Output {
        let graph = self.graph;
        let (entry, top) = self.entry;
        let mut best = Neighbor {
            similarity: graph.similarity_to(&self.target, entry),
            node: entry,
        };
        let mut layer = top;
        while layer > 0 {
            best = graph.greedy(&self.target, best, layer);
            layer -= 1;
        }
        graph.search_layer(&self.target, &[best], self.ef, 0, self.visited, self.pass)
    }
}

/// Scores a list of nodes.
struct ScoreTask<'a> {
    graph: &'a Hnsw,
    target: Target<'a>,
    nodes: &'a [u32],
    out: &'a mut Vec<f32>,
}

impl pulp::WithSimd for ScoreTask<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        self.out.reserve(self.nodes.len());
        for &node in self.nodes {
            self.out.push(self.graph.similarity_to(&self.target, node));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Clustered unit vectors: `clusters` random centres (from `centre_seed`), points scattered
    /// around them (from `point_seed`); queries drawn with another point seed come from the
    /// same distribution as the data, as real queries do.
    pub(crate) fn clustered(
        n: usize,
        dim: usize,
        clusters: usize,
        centre_seed: u64,
        point_seed: u64,
    ) -> Vec<Vec<f32>> {
        fn gaussian(state: &mut u64) -> f32 {
            // Sum of uniforms: close enough to normal for test data.
            let mut s = 0.0f32;
            for _ in 0..4 {
                *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = *state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                s += ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            }
            s * 1.7
        }
        let mut state = centre_seed;
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..dim).map(|_| gaussian(&mut state)).collect())
            .collect();
        let mut state = point_seed.wrapping_mul(31).wrapping_add(7);
        (0..n)
            .map(|_| {
                let c = &centres[(gaussian(&mut state).abs() * 1e4) as usize % clusters];
                let mut v: Vec<f32> = c.iter().map(|x| x + 0.7 * gaussian(&mut state)).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect()
    }

    fn exact_top(data: &[Vec<f32>], q: &[f32], k: usize, pass: impl Fn(u32) -> bool) -> Vec<u32> {
        let mut scored: Vec<(f32, u32)> = data
            .iter()
            .enumerate()
            .filter(|(i, _)| pass(*i as u32))
            .map(|(i, v)| (v.iter().zip(q).map(|(a, b)| a * b).sum(), i as u32))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(k).map(|(_, i)| i).collect()
    }

    fn build(data: &[Vec<f32>], threads: usize) -> Hnsw {
        let mut graph = Hnsw::new(
            data[0].len(),
            HnswParams {
                m: 12,
                ef_construction: 100,
                seed: 1,
            },
        );
        for v in data {
            graph.append(v).unwrap();
        }
        graph
            .link_from(0, threads, &AtomicBool::new(false))
            .unwrap();
        graph
    }

    fn recall(
        graph: &Hnsw,
        data: &[Vec<f32>],
        queries: &[Vec<f32>],
        pass: impl Fn(u32) -> bool + Copy,
    ) -> f64 {
        let k = 10;
        let mut hits = 0;
        let mut total = 0;
        for q in queries {
            let truth = exact_top(data, q, k, pass);
            let qq = QuantQuery::new(q);
            let found: Vec<u32> = graph
                .search(&qq, 64, &pass)
                .into_iter()
                .take(k)
                .map(|n| n.node)
                .collect();
            for n in &found {
                assert!(pass(*n), "a node the filter rejects was returned");
            }
            hits += truth.iter().filter(|t| found.contains(t)).count();
            total += truth.len();
        }
        hits as f64 / total.max(1) as f64
    }

    #[test]
    fn recall_on_clustered_data_is_high_with_and_without_a_filter() {
        let data = clustered(3000, 32, 40, 3, 1);
        let queries = clustered(100, 32, 40, 3, 2);
        for threads in [1, 2] {
            let graph = build(&data, threads);
            let all = recall(&graph, &data, &queries, |_| true);
            assert!(all >= 0.95, "recall {all} with {threads} threads");
            // A third of the nodes pass: results come only from them, and are still good.
            let third = recall(&graph, &data, &queries, |n| n % 3 == 0);
            assert!(
                third >= 0.9,
                "filtered recall {third} with {threads} threads"
            );
        }
    }

    #[test]
    fn incremental_inserts_match_a_bulk_build() {
        let data = clustered(2000, 32, 20, 5, 1);
        let queries = clustered(50, 32, 20, 5, 2);
        let mut graph = Hnsw::new(
            32,
            HnswParams {
                m: 12,
                ef_construction: 100,
                seed: 1,
            },
        );
        for v in &data {
            graph.insert(v).unwrap();
        }
        assert_eq!(graph.len(), 2000);
        assert!(recall(&graph, &data, &queries, |_| true) >= 0.95);
        assert!(graph.insert(&[1.0; 3]).is_err());
    }

    #[test]
    fn an_empty_graph_and_a_filter_that_rejects_everything_find_nothing() {
        let graph = Hnsw::new(
            4,
            HnswParams {
                m: 8,
                ef_construction: 32,
                seed: 1,
            },
        );
        let q = QuantQuery::new(&[1.0, 0.0, 0.0, 0.0]);
        assert!(graph.search(&q, 10, &|_| true).is_empty());
        let data = clustered(300, 4, 5, 1, 1);
        let graph = build(&data, 1);
        assert!(graph.search(&q, 10, &|_| false).is_empty());
        let one = graph.search(&q, 10, &|n| n == 123);
        assert_eq!(one.iter().map(|n| n.node).collect::<Vec<_>>(), vec![123]);
    }

    #[test]
    fn cancelling_stops_a_build() {
        let data = clustered(3000, 8, 10, 2, 1);
        let mut graph = Hnsw::new(
            8,
            HnswParams {
                m: 8,
                ef_construction: 32,
                seed: 1,
            },
        );
        for v in &data {
            graph.append(v).unwrap();
        }
        assert_eq!(
            graph.link_from(0, 2, &AtomicBool::new(true)),
            Err(HnswError::Cancelled)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn the_filter_never_lets_a_rejected_node_in(
            seed in 0u64..1000,
            modulus in 1u32..20,
            residue in 0u32..20,
            ef in 1usize..40,
        ) {
            let data = clustered(400, 8, 7, seed, seed);
            let graph = build(&data, 1);
            let pass = |n: u32| n % modulus == residue % modulus;
            let q = QuantQuery::new(&data[(seed % 400) as usize]);
            let found = graph.search(&q, ef, &pass);
            prop_assert!(found.len() <= ef);
            let passing = (0..400u32).filter(|n| pass(*n)).count();
            prop_assert_eq!(found.len(), ef.min(passing));
            for n in &found {
                prop_assert!(pass(n.node));
            }
            for pair in found.windows(2) {
                prop_assert!(pair[0].similarity >= pair[1].similarity);
            }
        }
    }
}
