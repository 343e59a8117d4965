//! The `embeddings.id` behind each graph node, in 4 bytes per node where that is exact.
//!
//! Nodes are added in ascending id order, and ids usually count up from the first one with few
//! gaps, so each is kept as its distance from the first node's id. An id further than
//! `u32::MAX` from it switches the table to full 64-bit ids: nothing is ever truncated.

/// Node number to embedding id, and back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeIds {
    /// Every id is `first + offset`.
    Offsets {
        /// The first node's id.
        first: i64,
        /// Per node, its id minus `first`.
        offsets: Vec<u32>,
    },
    /// Ids too far apart for offsets.
    Full(Vec<i64>),
}

impl Default for NodeIds {
    fn default() -> Self {
        Self::Offsets {
            first: 0,
            offsets: Vec::new(),
        }
    }
}

impl NodeIds {
    /// Nodes recorded.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match self {
            Self::Offsets { offsets, .. } => offsets.len(),
            Self::Full(ids) => ids.len(),
        }
    }

    /// Makes room for `additional` more nodes.
    pub fn reserve_exact(&mut self, additional: usize) {
        match self {
            Self::Offsets { offsets, .. } => offsets.reserve_exact(additional),
            Self::Full(ids) => ids.reserve_exact(additional),
        }
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Self::Offsets { offsets, .. } => 4 * offsets.capacity(),
            Self::Full(ids) => 8 * ids.capacity(),
        }
    }

    /// Records the id of the next node (ids must come in ascending order).
    pub fn push(&mut self, id: i64) {
        if let Self::Offsets { first, offsets } = self {
            if offsets.is_empty() {
                *first = id;
            }
            match id.checked_sub(*first).and_then(|d| u32::try_from(d).ok()) {
                Some(offset) => {
                    offsets.push(offset);
                    return;
                }
                None => {
                    let mut ids = Vec::with_capacity(offsets.capacity().max(offsets.len() + 1));
                    ids.extend(offsets.iter().map(|&o| *first + i64::from(o)));
                    *self = Self::Full(ids);
                }
            }
        }
        if let Self::Full(ids) = self {
            ids.push(id);
        }
    }

    /// The embedding id of `node`.
    #[inline(always)]
    pub fn get(&self, node: u32) -> Option<i64> {
        match self {
            Self::Offsets { first, offsets } => {
                offsets.get(node as usize).map(|&o| *first + i64::from(o))
            }
            Self::Full(ids) => ids.get(node as usize).copied(),
        }
    }

    /// The node holding embedding `id`.
    pub fn node_of(&self, id: i64) -> Option<u32> {
        let position = match self {
            Self::Offsets { first, offsets } => {
                let offset = u32::try_from(id.checked_sub(*first)?).ok()?;
                offsets.binary_search(&offset).ok()?
            }
            Self::Full(ids) => ids.binary_search(&id).ok()?,
        };
        u32::try_from(position).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ids: &[i64]) -> NodeIds {
        let mut table = NodeIds::default();
        table.reserve_exact(ids.len());
        for &id in ids {
            table.push(id);
        }
        assert_eq!(table.len(), ids.len());
        for (node, &id) in ids.iter().enumerate() {
            assert_eq!(table.get(node as u32), Some(id));
            assert_eq!(table.node_of(id), Some(node as u32), "id {id}");
        }
        assert_eq!(table.get(ids.len() as u32), None);
        table
    }

    #[test]
    fn nearby_ids_take_four_bytes_each_and_map_both_ways() {
        let table = check(&[5, 6, 7, 100, 1_000_000, 5 + i64::from(u32::MAX)]);
        assert!(matches!(table, NodeIds::Offsets { .. }));
        assert_eq!(table.node_of(4), None);
        assert_eq!(table.node_of(8), None);
        assert_eq!(table.node_of(i64::MIN), None);
        assert_eq!(table.node_of(i64::MAX), None);
        assert_eq!(NodeIds::default().node_of(0), None);
    }

    #[test]
    fn ids_too_far_apart_switch_to_full_ids_without_losing_any() {
        let table = check(&[-3, 0, 6 + i64::from(u32::MAX), 1 << 40, i64::MAX]);
        assert!(matches!(table, NodeIds::Full(_)));
        assert_eq!(table.node_of(1), None);
        let table = check(&[i64::MIN, -1, 0, i64::MAX]);
        assert!(matches!(table, NodeIds::Full(_)));
    }
}
