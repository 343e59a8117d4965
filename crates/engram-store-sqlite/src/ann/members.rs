//! The memories behind each indexed vector, with just enough of each memory to evaluate the
//! common filters without asking SQLite.
//!
//! A vector belongs to a content hash (scope and text), which a current memory and any number of
//! closed ones may share, so a node has a list of members. A node passes a filter when any of its
//! members does. Member slots are never reused while the index lives: a removed memory leaves a
//! dead slot, and the whole table is compacted once dead slots pile up.
//!
//! A member takes 24 bytes, because a million of them sit next to the vectors in memory:
//! - what many memories share (user, agent, session, kind, importance) is interned once as a
//!   [`Class`], and the member keeps the class number;
//! - the row id is kept in 32 bits and the memory is assumed to stay current forever. A memory
//!   for which either is not true (a row id outside `0..=u32::MAX`, a `valid_to` or an
//!   `expires_at`) gets an "outlier" class, and its full row id and closing time are kept out of
//!   line in [`Outlier`] records, which the member's 32-bit field then numbers. Nothing is
//!   rounded or cut: every value a memory can hold is represented exactly.

use std::collections::HashMap;

use engram_core::{Filter, Kind};

/// "No node" / "no next member".
pub(crate) const NONE: u32 = u32::MAX;

/// One memory as the index sees it (24 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    /// `created_at`, microseconds.
    pub created_at: i64,
    /// The row id when the class is not an outlier one; otherwise the number of the member's
    /// [`Outlier`] record.
    row: u32,
    /// The member's [`Class`].
    class: u32,
    /// The node holding its vector; [`NONE`] for a dead slot.
    pub node: u32,
    /// The next member of the same node, or [`NONE`].
    pub next: u32,
}

/// The attributes many memories share, interned once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Class {
    /// Interned user id.
    user: u32,
    /// Interned agent id, 0 for none.
    agent: u32,
    /// Interned session id, 0 for none.
    session: u32,
    /// Position of the kind in [`Kind::ALL`].
    kind: u8,
    /// Importance, 1 to 5.
    importance: u8,
    /// The members' row ids and closing times are in [`Outlier`] records.
    outlier: bool,
}

/// The full row id and closing time of a member whose row id does not fit 32 bits or that
/// stops being current at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outlier {
    rowid: i64,
    /// The earlier of `valid_to` and `expires_at` (`i64::MAX` when neither is set).
    closes_at: i64,
}

/// A memory's filterable attributes as read from the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryAttributes {
    /// Row id.
    pub rowid: i64,
    /// Owner.
    pub user_id: String,
    /// Agent, if any.
    pub agent_id: Option<String>,
    /// Session, if any.
    pub session_id: Option<String>,
    /// Kind.
    pub kind: Kind,
    /// Importance 1-5.
    pub importance: u8,
    /// Microseconds.
    pub created_at: i64,
    /// Microseconds, if closed.
    pub valid_to: Option<i64>,
    /// Microseconds, if it expires.
    pub expires_at: Option<i64>,
}

impl MemoryAttributes {
    /// When the memory stops being current: the earlier of `valid_to` and `expires_at`.
    fn closes_at(&self) -> i64 {
        self.valid_to
            .unwrap_or(i64::MAX)
            .min(self.expires_at.unwrap_or(i64::MAX))
    }
}

fn kind_index(kind: Kind) -> u8 {
    Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0) as u8
}

/// Every member, the per-node lists and lookups by row id and by user.
#[derive(Debug, Default)]
pub(crate) struct Members {
    slots: Vec<Member>,
    /// First member of each node.
    node_first: Vec<u32>,
    /// Live member slots ordered by row id.
    by_rowid: Vec<u32>,
    /// Member slots per interned user (dead slots included until compaction).
    by_user: Vec<Vec<u32>>,
    /// User, agent and session ids, interned from 1.
    names: HashMap<Box<str>, u32>,
    /// Interned classes, numbered by position.
    classes: Vec<Class>,
    class_ids: HashMap<Class, u32>,
    /// Out-of-line row ids and closing times (see the module documentation).
    outliers: Vec<Outlier>,
    dead: usize,
    /// Outlier records no live member uses any more.
    dead_outliers: usize,
    /// Bulk loading appends without keeping `by_rowid` sorted; [`Members::finish_bulk`] sorts.
    unsorted: bool,
}

/// A member's class when it has none (never happens for a slot made by [`Members`]): matches
/// no filter.
const NO_CLASS: Class = Class {
    user: 0,
    agent: 0,
    session: 0,
    kind: 0,
    importance: 0,
    outlier: false,
};

impl Members {
    /// Live members.
    pub fn len(&self) -> usize {
        self.slots.len() - self.dead
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Member>()
            + 4 * (self.node_first.capacity() + self.by_rowid.capacity())
            + self
                .by_user
                .iter()
                .map(|u| 4 * u.capacity() + 24)
                .sum::<usize>()
            + self.names.keys().map(|k| k.len() + 32).sum::<usize>()
            + self.classes.capacity() * std::mem::size_of::<Class>()
            + self.class_ids.capacity() * (std::mem::size_of::<Class>() + 5)
            + self.outliers.capacity() * std::mem::size_of::<Outlier>()
    }

    /// Gives nodes `0..nodes` member lists (empty for new nodes).
    pub fn set_node_count(&mut self, nodes: usize) {
        if self.node_first.len() < nodes {
            self.node_first.resize(nodes, NONE);
        }
    }

    /// Makes room for `additional` more members without growing the tables one doubling at a
    /// time (before a bulk load whose size is known).
    pub fn reserve(&mut self, additional: usize) {
        self.slots.reserve_exact(additional);
        self.by_rowid.reserve_exact(additional);
    }

    /// Gives back the room no member uses (after a bulk load).
    fn shrink_to_fit(&mut self) {
        self.slots.shrink_to_fit();
        self.by_rowid.shrink_to_fit();
        self.node_first.shrink_to_fit();
        self.by_user.iter_mut().for_each(Vec::shrink_to_fit);
        self.classes.shrink_to_fit();
        self.class_ids.shrink_to_fit();
        self.outliers.shrink_to_fit();
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.names.get(name) {
            return id;
        }
        let id = self.names.len() as u32 + 1;
        self.names.insert(name.into(), id);
        id
    }

    /// The interned id of a name, if any member ever used it.
    fn lookup(&self, name: &str) -> Option<u32> {
        self.names.get(name).copied()
    }

    fn intern_class(&mut self, class: Class) -> u32 {
        if let Some(&id) = self.class_ids.get(&class) {
            return id;
        }
        let id = self.classes.len() as u32;
        self.classes.push(class);
        self.class_ids.insert(class, id);
        id
    }

    #[inline(always)]
    fn class_of(&self, member: &Member) -> &Class {
        self.classes.get(member.class as usize).unwrap_or(&NO_CLASS)
    }

    #[inline(always)]
    fn outlier_of(&self, member: &Member) -> Option<&Outlier> {
        if self.class_of(member).outlier {
            self.outliers.get(member.row as usize)
        } else {
            None
        }
    }

    /// A member's row id.
    #[inline(always)]
    pub fn rowid(&self, member: &Member) -> i64 {
        match self.outlier_of(member) {
            Some(outlier) => outlier.rowid,
            None => i64::from(member.row),
        }
    }

    /// When a member stops being current (`i64::MAX`: never).
    #[inline(always)]
    fn closes_at(&self, member: &Member) -> i64 {
        self.outlier_of(member).map_or(i64::MAX, |o| o.closes_at)
    }

    fn rowid_of_slot(&self, slot: u32) -> i64 {
        self.slots
            .get(slot as usize)
            .map_or(i64::MIN, |m| self.rowid(m))
    }

    fn find(&self, rowid: i64) -> Result<usize, usize> {
        self.by_rowid
            .binary_search_by_key(&rowid, |&slot| self.rowid_of_slot(slot))
    }

    /// The live member with this row id.
    #[cfg(test)]
    pub fn get(&self, rowid: i64) -> Option<&Member> {
        let position = self.find(rowid).ok()?;
        self.slots.get(self.by_rowid[position] as usize)
    }

    /// A new member for `attributes` on `node`. An outlier reuses the record `reuse` (the
    /// member's previous one) when given.
    fn make(&mut self, attributes: &MemoryAttributes, node: u32, reuse: Option<u32>) -> Member {
        let user = self.intern(&attributes.user_id);
        let agent = attributes.agent_id.as_deref().map_or(0, |a| self.intern(a));
        let session = attributes
            .session_id
            .as_deref()
            .map_or(0, |s| self.intern(s));
        let closes_at = attributes.closes_at();
        let narrow_rowid = u32::try_from(attributes.rowid).ok();
        let outlier = narrow_rowid.is_none() || closes_at != i64::MAX;
        let class = self.intern_class(Class {
            user,
            agent,
            session,
            kind: kind_index(attributes.kind),
            importance: attributes.importance,
            outlier,
        });
        let row = match narrow_rowid {
            Some(rowid) if !outlier => rowid,
            _ => {
                let record = Outlier {
                    rowid: attributes.rowid,
                    closes_at,
                };
                match reuse.and_then(|r| self.outliers.get_mut(r as usize).map(|o| (r, o))) {
                    Some((r, o)) => {
                        *o = record;
                        r
                    }
                    None => {
                        self.outliers.push(record);
                        (self.outliers.len() - 1) as u32
                    }
                }
            }
        };
        Member {
            created_at: attributes.created_at,
            row,
            class,
            node,
            next: NONE,
        }
    }

    /// The outlier record a member holds, if any.
    fn outlier_record(&self, member: &Member) -> Option<u32> {
        self.class_of(member).outlier.then_some(member.row)
    }

    fn push(&mut self, member: Member) -> u32 {
        let slot = self.slots.len() as u32;
        let user = self.class_of(&member).user as usize;
        if self.by_user.len() <= user {
            self.by_user.resize_with(user + 1, Vec::new);
        }
        self.by_user[user].push(slot);
        self.slots.push(member);
        self.attach(slot, member.node);
        slot
    }

    fn attach(&mut self, slot: u32, node: u32) {
        let Some(first) = self.node_first.get_mut(node as usize) else {
            return;
        };
        let previous = *first;
        *first = slot;
        if let Some(member) = self.slots.get_mut(slot as usize) {
            member.node = node;
            member.next = previous;
        }
    }

    fn detach(&mut self, slot: u32) {
        let Some(member) = self.slots.get(slot as usize).copied() else {
            return;
        };
        let Some(first) = self.node_first.get(member.node as usize).copied() else {
            return;
        };
        if first == slot {
            self.node_first[member.node as usize] = member.next;
        } else {
            let mut current = first;
            while let Some(m) = self.slots.get(current as usize).copied() {
                if m.next == slot {
                    self.slots[current as usize].next = member.next;
                    break;
                }
                current = m.next;
            }
        }
        if let Some(m) = self.slots.get_mut(slot as usize) {
            m.node = NONE;
            m.next = NONE;
        }
    }

    /// Marks a slot dead (its outlier record, if any, becomes garbage).
    fn kill(&mut self, slot: u32) {
        self.detach(slot);
        self.dead += 1;
        if let Some(member) = self.slots.get(slot as usize)
            && self.class_of(member).outlier
        {
            self.dead_outliers += 1;
        }
    }

    /// Adds a member during a bulk load (row ids in any order; call [`Members::finish_bulk`]).
    pub fn push_bulk(&mut self, attributes: &MemoryAttributes, node: u32) {
        let member = self.make(attributes, node, None);
        let slot = self.push(member);
        self.by_rowid.push(slot);
        self.unsorted = true;
    }

    /// Sorts the row-id lookup after a bulk load, dropping duplicate row ids (the later wins),
    /// and gives back unused room.
    pub fn finish_bulk(&mut self) {
        if self.unsorted {
            self.unsorted = false;
            let mut by_rowid = std::mem::take(&mut self.by_rowid);
            // Unstable: a stable sort would need a buffer of half the table.
            by_rowid
                .sort_unstable_by_key(|&slot| (self.rowid_of_slot(slot), std::cmp::Reverse(slot)));
            let mut duplicates = Vec::new();
            let mut previous = None;
            by_rowid.retain(|&slot| {
                let rowid = self.rowid_of_slot(slot);
                let keep = previous != Some(rowid);
                if !keep {
                    duplicates.push(slot);
                }
                previous = Some(rowid);
                keep
            });
            self.by_rowid = by_rowid;
            for slot in duplicates {
                self.kill(slot);
            }
        }
        self.shrink_to_fit();
    }

    /// Records a memory's current state: attached to `node`, or removed when it has no vector
    /// in the index (`None`).
    pub fn upsert(&mut self, attributes: &MemoryAttributes, node: Option<u32>) {
        match (self.find(attributes.rowid), node) {
            (Ok(position), Some(node)) => {
                let slot = self.by_rowid[position];
                let old = self.slots[slot as usize];
                let old_class = *self.class_of(&old);
                let reuse = self.outlier_record(&old);
                let fresh = self.make(attributes, node, reuse);
                let fresh_class = *self.class_of(&fresh);
                if (old_class.user, old_class.agent, old_class.session)
                    != (fresh_class.user, fresh_class.agent, fresh_class.session)
                {
                    // Another memory took this row id: the old one is gone.
                    self.remove(attributes.rowid);
                    self.upsert(attributes, Some(node));
                    return;
                }
                if reuse.is_some() && !fresh_class.outlier {
                    self.dead_outliers += 1;
                }
                if old.node != node {
                    self.detach(slot);
                    self.attach(slot, node);
                }
                let member = &mut self.slots[slot as usize];
                member.created_at = fresh.created_at;
                member.row = fresh.row;
                member.class = fresh.class;
            }
            (Ok(_), None) => self.remove(attributes.rowid),
            (Err(position), Some(node)) => {
                let member = self.make(attributes, node, None);
                let slot = self.push(member);
                self.by_rowid.insert(position, slot);
            }
            (Err(_), None) => {}
        }
    }

    /// Forgets a memory (deleted).
    pub fn remove(&mut self, rowid: i64) {
        if let Ok(position) = self.find(rowid) {
            let slot = self.by_rowid.remove(position);
            self.kill(slot);
        }
    }

    /// Rebuilds the tables without dead slots and unused outlier records once they are a
    /// quarter of them (call after a batch of changes).
    pub fn compact_if_needed(&mut self) {
        let slots_wasted = self.dead > 1024 && self.dead * 4 > self.slots.len();
        let outliers_wasted =
            self.dead_outliers > 1024 && self.dead_outliers * 4 > self.outliers.len();
        if slots_wasted || outliers_wasted {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let live: Vec<(Member, Class, Option<Outlier>)> = self
            .by_rowid
            .iter()
            .filter_map(|&slot| self.slots.get(slot as usize))
            .map(|m| (*m, *self.class_of(m), self.outlier_of(m).copied()))
            .collect();
        let nodes = self.node_first.len();
        let names = std::mem::take(&mut self.names);
        *self = Self {
            names,
            ..Self::default()
        };
        self.set_node_count(nodes);
        self.reserve(live.len());
        for (mut member, class, outlier) in live {
            member.class = self.intern_class(class);
            if let Some(outlier) = outlier {
                self.outliers.push(outlier);
                member.row = (self.outliers.len() - 1) as u32;
            }
            member.next = NONE;
            let slot = self.push(member);
            self.by_rowid.push(slot);
        }
    }

    /// Drops every member (before re-reading them all).
    pub fn clear(&mut self) {
        let nodes = self.node_first.len();
        *self = Self::default();
        self.set_node_count(nodes);
    }

    /// The member slots of a node.
    #[inline(always)]
    pub fn of_node(&self, node: u32) -> NodeMembers<'_> {
        NodeMembers {
            members: self,
            slot: self.node_first.get(node as usize).copied().unwrap_or(NONE),
        }
    }

    /// A member by slot.
    #[inline(always)]
    pub fn slot(&self, slot: u32) -> Option<&Member> {
        self.slots.get(slot as usize)
    }

    /// Every slot (live or dead) of the members of a user; check each with a
    /// [`MemberFilter`] when reading them.
    pub fn of_user(&self, user: u32) -> &[u32] {
        self.by_user
            .get(user as usize)
            .map_or(&[], |v| v.as_slice())
    }

    /// The live member slot for a row id.
    pub fn slot_of_rowid(&self, rowid: i64) -> Option<u32> {
        self.find(rowid).ok().map(|p| self.by_rowid[p])
    }

    /// Translates a filter's in-memory parts; `None` when no member can match (an unknown user,
    /// agent or session). Category and metadata conditions are not evaluated here.
    pub fn compile(&self, filter: &Filter, now: i64) -> Option<MemberFilter<'_>> {
        let user = self.lookup(&filter.user_id)?;
        let agent = match &filter.agent_id {
            Some(a) => Some(self.lookup(a)?),
            None => None,
        };
        let session = match &filter.session_id {
            Some(s) => Some(self.lookup(s)?),
            None => None,
        };
        let kinds = if filter.kinds.is_empty() {
            u8::MAX
        } else {
            filter
                .kinds
                .iter()
                .fold(0u8, |mask, k| mask | (1 << kind_index(*k)))
        };
        Some(MemberFilter {
            members: self,
            user,
            agent,
            session,
            kinds,
            since: filter.since.map_or(i64::MIN, |t| t.as_microsecond()),
            until: filter.until.map_or(i64::MAX, |t| t.as_microsecond()),
            min_importance: filter.min_importance.map_or(0, |i| i.get()),
            open_at: (!filter.include_closed).then_some(now),
        })
    }
}

/// Iterator over a node's member slots.
pub(crate) struct NodeMembers<'a> {
    members: &'a Members,
    slot: u32,
}

impl<'a> Iterator for NodeMembers<'a> {
    type Item = (u32, &'a Member);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let slot = self.slot;
        let member = self.members.slots.get(slot as usize)?;
        self.slot = member.next;
        Some((slot, member))
    }
}

/// The in-memory part of a filter, compiled against the interned names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemberFilter<'a> {
    members: &'a Members,
    /// Interned user.
    pub user: u32,
    agent: Option<u32>,
    session: Option<u32>,
    /// Bit `i` set: kind `Kind::ALL[i]` accepted.
    kinds: u8,
    since: i64,
    until: i64,
    min_importance: u8,
    /// Only memories still current at this time (microseconds), unless `None`.
    open_at: Option<i64>,
}

impl MemberFilter<'_> {
    /// True when a live member meets every condition.
    #[inline(always)]
    pub fn accepts(&self, m: &Member) -> bool {
        if m.node == NONE || m.created_at < self.since || m.created_at >= self.until {
            return false;
        }
        let class = self.members.class_of(m);
        class.user == self.user
            && self.agent.is_none_or(|a| class.agent == a)
            && self.session.is_none_or(|s| class.session == s)
            && (self.kinds >> class.kind) & 1 == 1
            && class.importance >= self.min_importance
            && self
                .open_at
                .is_none_or(|now| !class.outlier || self.members.closes_at(m) > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::Importance;
    use jiff::Timestamp;
    use proptest::prelude::*;

    fn attributes(rowid: i64, user: &str) -> MemoryAttributes {
        MemoryAttributes {
            rowid,
            user_id: user.to_string(),
            agent_id: None,
            session_id: None,
            kind: Kind::Episode,
            importance: 3,
            created_at: rowid.wrapping_mul(1_000),
            valid_to: None,
            expires_at: None,
        }
    }

    fn rowids_of(members: &Members, node: u32) -> Vec<i64> {
        let mut r: Vec<i64> = members
            .of_node(node)
            .map(|(_, m)| members.rowid(m))
            .collect();
        r.sort();
        r
    }

    #[test]
    fn members_follow_their_memories_between_nodes() {
        let mut m = Members::default();
        m.set_node_count(3);
        m.upsert(&attributes(5, "u"), Some(0));
        m.upsert(&attributes(2, "u"), Some(0));
        m.upsert(&attributes(9, "v"), Some(1));
        assert_eq!(rowids_of(&m, 0), vec![2, 5]);
        // Text changed: the memory moves to the vector of its new text.
        m.upsert(&attributes(5, "u"), Some(2));
        assert_eq!((rowids_of(&m, 0), rowids_of(&m, 2)), (vec![2], vec![5]));
        // New text has no vector yet: it leaves the index until it gets one.
        m.upsert(&attributes(2, "u"), None);
        assert!(rowids_of(&m, 0).is_empty());
        assert_eq!(m.len(), 2);
        m.remove(9);
        assert!(rowids_of(&m, 1).is_empty());
        assert!(m.get(9).is_none() && m.get(5).is_some());
        // A reused row id for another user's memory replaces the stale member.
        m.upsert(&attributes(5, "w"), Some(1));
        assert_eq!(rowids_of(&m, 1), vec![5]);
        assert!(rowids_of(&m, 2).is_empty());
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn compaction_keeps_every_live_member_and_its_node() {
        let mut m = Members::default();
        m.set_node_count(100);
        for rowid in 0..5000 {
            m.upsert(&attributes(rowid, "u"), Some((rowid % 100) as u32));
        }
        for rowid in (0..5000).filter(|r| r % 3 != 0) {
            m.remove(rowid);
        }
        m.compact_if_needed();
        assert!(m.slots.len() < 5000, "compacted");
        assert_eq!(m.len(), 1667);
        for node in 0..100u32 {
            let expected: Vec<i64> = (0..5000)
                .filter(|r| r % 3 == 0 && (r % 100) as u32 == node)
                .collect();
            assert_eq!(rowids_of(&m, node), expected);
        }
        let user = m.lookup("u").unwrap();
        let live = m
            .of_user(user)
            .iter()
            .filter(|&&s| m.slot(s).is_some_and(|x| x.node != NONE))
            .count();
        assert_eq!(live, 1667);
    }

    #[test]
    fn bulk_loads_sort_and_deduplicate_row_ids() {
        let mut m = Members::default();
        m.set_node_count(2);
        m.push_bulk(&attributes(7, "u"), 0);
        m.push_bulk(&attributes(3, "u"), 1);
        m.push_bulk(&attributes(7, "u"), 1);
        m.finish_bulk();
        assert_eq!(m.len(), 2);
        assert_eq!(rowids_of(&m, 1), vec![3, 7]);
        assert!(rowids_of(&m, 0).is_empty());
    }

    #[test]
    fn compiled_filters_check_every_condition() {
        let mut m = Members::default();
        m.set_node_count(1);
        let mut a = attributes(1, "u");
        a.agent_id = Some("coder".into());
        a.session_id = Some("s1".into());
        a.kind = Kind::Fact;
        a.importance = 4;
        a.created_at = 100;
        a.expires_at = Some(500);
        m.upsert(&a, Some(0));
        let member = *m.get(1).unwrap();
        let at = |us: i64| Timestamp::from_microsecond(us).unwrap();
        let base = Filter::user("u");
        let check = |f: &Filter, now: i64| m.compile(f, now).is_some_and(|c| c.accepts(&member));
        assert!(check(&base, 200));
        assert!(!check(&base, 500), "expired");
        assert!(check(
            &Filter {
                include_closed: true,
                ..base.clone()
            },
            600
        ));
        assert!(!check(&Filter::user("v"), 200));
        assert!(m.compile(&Filter::user("nobody"), 0).is_none());
        assert!(check(
            &Filter {
                agent_id: Some("coder".into()),
                ..base.clone()
            },
            200
        ));
        assert!(!check(
            &Filter {
                agent_id: Some("s1".into()),
                ..base.clone()
            },
            200
        ));
        assert!(
            m.compile(
                &Filter {
                    agent_id: Some("x".into()),
                    ..base.clone()
                },
                0
            )
            .is_none()
        );
        assert!(check(
            &Filter {
                session_id: Some("s1".into()),
                ..base.clone()
            },
            200
        ));
        assert!(check(
            &Filter {
                kinds: vec![Kind::Note, Kind::Fact],
                ..base.clone()
            },
            200
        ));
        assert!(!check(
            &Filter {
                kinds: vec![Kind::Episode],
                ..base.clone()
            },
            200
        ));
        assert!(check(
            &Filter {
                since: Some(at(100)),
                until: Some(at(101)),
                ..base.clone()
            },
            200
        ));
        assert!(!check(
            &Filter {
                since: Some(at(101)),
                ..base.clone()
            },
            200
        ));
        assert!(!check(
            &Filter {
                until: Some(at(100)),
                ..base.clone()
            },
            200
        ));
        let important = |i| Filter {
            min_importance: Some(Importance::new(i).unwrap()),
            ..base.clone()
        };
        assert!(check(&important(4), 200) && !check(&important(5), 200));
    }

    #[test]
    fn a_member_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<Member>(), 24);
    }

    /// Node, created_at, closes_at, user, agent, session, kind, importance.
    type View = (u32, i64, i64, u32, u32, u32, u8, u8);

    /// Everything the index knows about the live member with `rowid`, in the database's terms.
    fn view(m: &Members, rowid: i64) -> Option<View> {
        let member = m.get(rowid)?;
        let class = m.class_of(member);
        assert_eq!(m.rowid(member), rowid);
        Some((
            member.node,
            member.created_at,
            m.closes_at(member),
            class.user,
            class.agent,
            class.session,
            class.kind,
            class.importance,
        ))
    }

    fn expected(m: &Members, a: &MemoryAttributes, node: u32) -> View {
        let name = |n: &Option<String>| n.as_deref().map_or(0, |n| m.lookup(n).unwrap());
        (
            node,
            a.created_at,
            a.closes_at(),
            m.lookup(&a.user_id).unwrap(),
            name(&a.agent_id),
            name(&a.session_id),
            kind_index(a.kind),
            a.importance,
        )
    }

    #[test]
    fn extreme_row_ids_and_times_round_trip_exactly() {
        let rowids = [
            0,
            1,
            i64::from(u32::MAX) - 1,
            i64::from(u32::MAX),
            i64::from(u32::MAX) + 1,
            1 << 40,
            i64::MAX,
            -1,
            i64::MIN,
        ];
        let times = [
            i64::MIN,
            -62_135_596_800_000_000,
            -1,
            0,
            1,
            i64::MAX - 1,
            i64::MAX,
        ];
        let mut m = Members::default();
        m.set_node_count(rowids.len());
        let mut all = Vec::new();
        for (i, &rowid) in rowids.iter().enumerate() {
            let time = times[i % times.len()];
            let mut a = attributes(rowid, "u");
            a.created_at = time;
            a.valid_to = (i % 3 == 1).then_some(times[(i + 2) % times.len()]);
            a.expires_at = (i % 2 == 1).then_some(times[(i + 4) % times.len()]);
            m.upsert(&a, Some(i as u32));
            all.push((a, i as u32));
        }
        for (a, node) in &all {
            assert_eq!(view(&m, a.rowid), Some(expected(&m, a, *node)), "{a:?}");
            let filter = Filter {
                include_closed: false,
                ..Filter::user("u")
            };
            let now = 0;
            let member = *m.get(a.rowid).unwrap();
            let open = m.compile(&filter, now).unwrap().accepts(&member);
            // `until` is exclusive and unbounded means i64::MAX, so the one instant no
            // timestamp can reach (jiff's largest is year 9999) never passes.
            assert_eq!(
                open,
                a.closes_at() > now && a.created_at < i64::MAX,
                "{a:?}"
            );
            let since = Filter {
                since: Some(Timestamp::from_microsecond(0).unwrap()),
                include_closed: true,
                ..Filter::user("u")
            };
            let after = m.compile(&since, now).unwrap().accepts(&member);
            assert_eq!(after, a.created_at >= 0 && a.created_at < i64::MAX, "{a:?}");
        }
        // Every row id is found again after compaction too.
        m.compact();
        for (a, node) in &all {
            assert_eq!(view(&m, a.rowid), Some(expected(&m, a, *node)), "{a:?}");
        }
        assert_eq!(
            m.slot_of_rowid(i64::MAX)
                .and_then(|s| m.slot(s))
                .map(|x| x.node),
            Some(6)
        );
    }

    #[test]
    fn memories_that_start_or_stop_expiring_keep_exact_closing_times() {
        let mut m = Members::default();
        m.set_node_count(2);
        let mut a = attributes(7, "u");
        m.upsert(&a, Some(0));
        assert_eq!(view(&m, 7).unwrap().2, i64::MAX);
        a.expires_at = Some(123);
        m.upsert(&a, Some(0));
        assert_eq!(view(&m, 7).unwrap().2, 123);
        a.valid_to = Some(-5);
        m.upsert(&a, Some(1));
        assert_eq!(view(&m, 7), Some(expected(&m, &a, 1)));
        assert_eq!(m.outliers.len(), 1, "the record was reused");
        a.valid_to = None;
        a.expires_at = None;
        m.upsert(&a, Some(1));
        assert_eq!(view(&m, 7).unwrap().2, i64::MAX);
        assert_eq!(m.dead_outliers, 1);
    }

    #[test]
    fn thousands_of_users_agents_and_sessions_are_told_apart() {
        let mut m = Members::default();
        let n = 6000i64;
        m.set_node_count(n as usize);
        let attrs: Vec<MemoryAttributes> = (0..n)
            .map(|i| MemoryAttributes {
                rowid: i * 3 + 1,
                user_id: format!("user-{}", i % 2000),
                agent_id: (i % 5 != 0).then(|| format!("agent-{}", i % 700)),
                session_id: (i % 7 != 0).then(|| format!("session-{i}")),
                kind: Kind::ALL[i as usize % Kind::ALL.len()],
                importance: (i % 5) as u8 + 1,
                created_at: i - 3000,
                valid_to: None,
                expires_at: None,
            })
            .collect();
        for (i, a) in attrs.iter().enumerate() {
            m.push_bulk(a, i as u32);
        }
        m.finish_bulk();
        for (i, a) in attrs.iter().enumerate() {
            assert_eq!(view(&m, a.rowid), Some(expected(&m, a, i as u32)));
            let member = *m.get(a.rowid).unwrap();
            let exact = Filter {
                agent_id: a.agent_id.clone(),
                session_id: a.session_id.clone(),
                kinds: vec![a.kind],
                min_importance: Some(Importance::new(a.importance.into()).unwrap()),
                ..Filter::user(&a.user_id)
            };
            assert!(m.compile(&exact, 0).unwrap().accepts(&member));
            let other_user = Filter::user(format!("user-{}", (i + 1) % 2000));
            assert!(!m.compile(&other_user, 0).unwrap().accepts(&member));
            let user = m.lookup(&a.user_id).unwrap();
            assert!(m.of_user(user).contains(&(i as u32)));
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(MemoryAttributes, Option<u32>),
        Remove(i64),
        Compact,
    }

    fn any_attributes() -> impl Strategy<Value = MemoryAttributes> {
        let rowid = prop_oneof![
            0i64..40,
            Just(i64::from(u32::MAX)),
            Just(i64::from(u32::MAX) + 1),
            Just(i64::MAX),
            Just(-1i64),
            Just(i64::MIN),
        ];
        let time = prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            -1_000i64..1_000,
            any::<i64>()
        ];
        (
            rowid,
            0usize..3,
            proptest::option::of(0usize..3),
            proptest::option::of(0usize..3),
            0usize..Kind::ALL.len(),
            1u8..=5,
            time.clone(),
            proptest::option::of(time.clone()),
            proptest::option::of(time),
        )
            .prop_map(
                |(
                    rowid,
                    user,
                    agent,
                    session,
                    kind,
                    importance,
                    created_at,
                    valid_to,
                    expires_at,
                )| {
                    MemoryAttributes {
                        rowid,
                        user_id: format!("u{user}"),
                        agent_id: agent.map(|a| format!("a{a}")),
                        session_id: session.map(|s| format!("s{s}")),
                        kind: Kind::ALL[kind],
                        importance,
                        created_at,
                        valid_to,
                        expires_at,
                    }
                },
            )
    }

    fn any_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any_attributes(), proptest::option::of(0u32..8)).prop_map(|(a, n)| Op::Upsert(a, n)),
            2 => prop_oneof![0i64..40, Just(i64::MAX), Just(i64::MIN)].prop_map(Op::Remove),
            1 => Just(Op::Compact),
        ]
    }

    proptest! {
        /// Whatever happens to memories, the table answers exactly what a plain map of their
        /// latest attributes would.
        #[test]
        fn the_compact_table_matches_a_plain_map(ops in proptest::collection::vec(any_op(), 1..80)) {
            let mut m = Members::default();
            m.set_node_count(8);
            let mut model: HashMap<i64, (MemoryAttributes, u32)> = HashMap::new();
            for op in ops {
                match op {
                    Op::Upsert(a, node) => {
                        m.upsert(&a, node);
                        match node {
                            Some(node) => { model.insert(a.rowid, (a, node)); }
                            None => { model.remove(&a.rowid); }
                        }
                    }
                    Op::Remove(rowid) => {
                        m.remove(rowid);
                        model.remove(&rowid);
                    }
                    Op::Compact => m.compact(),
                }
                prop_assert_eq!(m.len(), model.len());
                for (a, node) in model.values() {
                    prop_assert_eq!(view(&m, a.rowid), Some(expected(&m, a, *node)));
                }
                for node in 0..8u32 {
                    let mut want: Vec<i64> = model
                        .values()
                        .filter(|(_, n)| *n == node)
                        .map(|(a, _)| a.rowid)
                        .collect();
                    want.sort();
                    prop_assert_eq!(rowids_of(&m, node), want);
                }
            }
        }
    }
}
