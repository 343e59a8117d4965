//! Which nodes a graph search has already seen, without clearing a store-sized array per query.
//!
//! Each list holds one 16-bit stamp per node; a search marks a node by writing the current
//! stamp, and starting a new search only increments the stamp (the array is zeroed once every
//! 65,535 searches). Lists are kept in a small pool, so concurrent searches each get their own
//! and no search allocates memory proportional to the store.

use std::sync::Mutex;

/// A reusable visited set over node numbers `0..len`.
#[derive(Debug, Default)]
pub(crate) struct VisitedList {
    marks: Vec<u16>,
    stamp: u16,
}

impl VisitedList {
    /// Starts a new search over `nodes` nodes: everything becomes unvisited.
    pub fn reset(&mut self, nodes: usize) {
        if self.marks.len() < nodes {
            self.marks.resize(nodes, 0);
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.iter_mut().for_each(|m| *m = 0);
            self.stamp = 1;
        }
    }

    /// Marks `node` visited; true when it was not visited before in this search.
    #[inline(always)]
    pub fn insert(&mut self, node: u32) -> bool {
        match self.marks.get_mut(node as usize) {
            Some(mark) if *mark != self.stamp => {
                *mark = self.stamp;
                true
            }
            // Visited already, or out of range (never a real node: treated as seen).
            _ => false,
        }
    }
}

/// Visited lists waiting to be reused.
#[derive(Debug, Default)]
pub(crate) struct VisitedPool {
    idle: Mutex<Vec<VisitedList>>,
}

/// Idle lists kept for reuse; more concurrent searches than this allocate and drop their own.
const MAX_IDLE: usize = 4;

impl VisitedPool {
    /// A list reset for a search over `nodes` nodes.
    pub fn take(&self, nodes: usize) -> VisitedList {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut list = pooled.unwrap_or_default();
        list.reset(nodes);
        list
    }

    /// Drops every idle list.
    pub fn clear(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Returns a list for reuse.
    pub fn give_back(&self, list: VisitedList) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_forgets_every_mark_even_when_the_stamp_wraps() {
        let mut list = VisitedList::default();
        list.reset(10);
        assert!(list.insert(3));
        assert!(!list.insert(3));
        assert!(!list.insert(10), "out of range counts as seen");
        for _ in 0..70_000 {
            list.reset(10);
            assert!(list.insert(3));
        }
        list.reset(20);
        assert!(list.insert(15) && list.insert(3));
    }

    #[test]
    fn the_pool_hands_out_clean_lists() {
        let pool = VisitedPool::default();
        let mut a = pool.take(5);
        assert!(a.insert(1));
        pool.give_back(a);
        let mut b = pool.take(5);
        assert!(b.insert(1));
    }
}
