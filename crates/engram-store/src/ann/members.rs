//! The memories behind each indexed vector, with just enough of each memory to evaluate the
//! common filters without asking SQLite.
//!
//! A vector belongs to a content hash (scope and text), which a current memory and any number of
//! closed ones may share, so a node has a list of members. A node passes a filter when any of its
//! members does. Member slots are never reused while the index lives: a removed memory leaves a
//! dead slot, and the whole table is compacted once dead slots pile up.

use std::collections::HashMap;

use engram_core::{Filter, Kind};

/// "No node" / "no next member".
pub(crate) const NONE: u32 = u32::MAX;

/// One memory as the index sees it (48 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    /// The memory's row in `memories`.
    pub rowid: i64,
    /// `created_at`, microseconds.
    pub created_at: i64,
    /// When it stops being current: the earlier of `valid_to` and `expires_at` (`i64::MAX`
    /// when neither is set).
    pub closes_at: i64,
    /// Interned user id.
    pub user: u32,
    /// Interned agent id, 0 for none.
    pub agent: u32,
    /// Interned session id, 0 for none.
    pub session: u32,
    /// The node holding its vector; [`NONE`] for a dead slot.
    pub node: u32,
    /// The next member of the same node, or [`NONE`].
    pub next: u32,
    /// Position of its kind in [`Kind::ALL`].
    pub kind: u8,
    /// Importance, 1 to 5.
    pub importance: u8,
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
    dead: usize,
    /// Bulk loading appends without keeping `by_rowid` sorted; [`Members::finish_bulk`] sorts.
    unsorted: bool,
}

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
    }

    /// Gives nodes `0..nodes` member lists (empty for new nodes).
    pub fn set_node_count(&mut self, nodes: usize) {
        if self.node_first.len() < nodes {
            self.node_first.resize(nodes, NONE);
        }
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

    fn find(&self, rowid: i64) -> Result<usize, usize> {
        self.by_rowid
            .binary_search_by_key(&rowid, |&slot| self.slots[slot as usize].rowid)
    }

    /// The live member with this row id.
    #[cfg(test)]
    pub fn get(&self, rowid: i64) -> Option<&Member> {
        let position = self.find(rowid).ok()?;
        self.slots.get(self.by_rowid[position] as usize)
    }

    fn make(&mut self, attributes: &MemoryAttributes, node: u32) -> Member {
        let user = self.intern(&attributes.user_id);
        let agent = attributes.agent_id.as_deref().map_or(0, |a| self.intern(a));
        let session = attributes
            .session_id
            .as_deref()
            .map_or(0, |s| self.intern(s));
        Member {
            rowid: attributes.rowid,
            created_at: attributes.created_at,
            closes_at: attributes
                .valid_to
                .unwrap_or(i64::MAX)
                .min(attributes.expires_at.unwrap_or(i64::MAX)),
            user,
            agent,
            session,
            node,
            next: NONE,
            kind: kind_index(attributes.kind),
            importance: attributes.importance,
        }
    }

    fn push(&mut self, member: Member) -> u32 {
        let slot = self.slots.len() as u32;
        let user = member.user as usize;
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

    /// Adds a member during a bulk load (row ids in any order; call [`Members::finish_bulk`]).
    pub fn push_bulk(&mut self, attributes: &MemoryAttributes, node: u32) {
        let member = self.make(attributes, node);
        let slot = self.push(member);
        self.by_rowid.push(slot);
        self.unsorted = true;
    }

    /// Sorts the row-id lookup after a bulk load, dropping duplicate row ids (the later wins).
    pub fn finish_bulk(&mut self) {
        if !self.unsorted {
            return;
        }
        self.unsorted = false;
        let slots = &self.slots;
        self.by_rowid
            .sort_by_key(|&slot| (slots[slot as usize].rowid, std::cmp::Reverse(slot)));
        let mut duplicates = Vec::new();
        let mut previous = None;
        self.by_rowid.retain(|&slot| {
            let rowid = slots[slot as usize].rowid;
            let keep = previous != Some(rowid);
            if !keep {
                duplicates.push(slot);
            }
            previous = Some(rowid);
            keep
        });
        for slot in duplicates {
            self.detach(slot);
            self.dead += 1;
        }
    }

    /// Records a memory's current state: attached to `node`, or removed when it has no vector
    /// in the index (`None`).
    pub fn upsert(&mut self, attributes: &MemoryAttributes, node: Option<u32>) {
        match (self.find(attributes.rowid), node) {
            (Ok(position), Some(node)) => {
                let slot = self.by_rowid[position];
                let fresh = self.make(attributes, node);
                let old = self.slots[slot as usize];
                if (old.user, old.agent, old.session) != (fresh.user, fresh.agent, fresh.session) {
                    // Another memory took this row id: the old one is gone.
                    self.remove(attributes.rowid);
                    self.upsert(attributes, Some(node));
                    return;
                }
                if old.node != node {
                    self.detach(slot);
                    self.attach(slot, node);
                }
                let member = &mut self.slots[slot as usize];
                member.created_at = fresh.created_at;
                member.closes_at = fresh.closes_at;
                member.kind = fresh.kind;
                member.importance = fresh.importance;
            }
            (Ok(_), None) => self.remove(attributes.rowid),
            (Err(position), Some(node)) => {
                let member = self.make(attributes, node);
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
            self.detach(slot);
            self.dead += 1;
        }
    }

    /// Rebuilds the table without dead slots once they are a quarter of it (call after a batch
    /// of changes).
    pub fn compact_if_needed(&mut self) {
        if self.dead > 1024 && self.dead * 4 > self.slots.len() {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let live: Vec<Member> = self
            .by_rowid
            .iter()
            .filter_map(|&slot| self.slots.get(slot as usize).copied())
            .collect();
        let nodes = self.node_first.len();
        let names = std::mem::take(&mut self.names);
        *self = Self {
            names,
            ..Self::default()
        };
        self.set_node_count(nodes);
        self.slots.reserve_exact(live.len());
        self.by_rowid.reserve_exact(live.len());
        for mut member in live {
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

    /// Every slot (live or dead) of the members of a user; check [`Member::node`] and
    /// [`Member::user`] when reading them.
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
    pub fn compile(&self, filter: &Filter, now: i64) -> Option<MemberFilter> {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberFilter {
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

impl MemberFilter {
    /// True when a live member meets every condition.
    #[inline(always)]
    pub fn accepts(&self, m: &Member) -> bool {
        m.node != NONE
            && m.user == self.user
            && self.agent.is_none_or(|a| m.agent == a)
            && self.session.is_none_or(|s| m.session == s)
            && (self.kinds >> m.kind) & 1 == 1
            && m.created_at >= self.since
            && m.created_at < self.until
            && m.importance >= self.min_importance
            && self.open_at.is_none_or(|now| m.closes_at > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::Importance;
    use jiff::Timestamp;

    fn attributes(rowid: i64, user: &str) -> MemoryAttributes {
        MemoryAttributes {
            rowid,
            user_id: user.to_string(),
            agent_id: None,
            session_id: None,
            kind: Kind::Episode,
            importance: 3,
            created_at: 1_000 * rowid,
            valid_to: None,
            expires_at: None,
        }
    }

    fn rowids_of(members: &Members, node: u32) -> Vec<i64> {
        let mut r: Vec<i64> = members.of_node(node).map(|(_, m)| m.rowid).collect();
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
}
