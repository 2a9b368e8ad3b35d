//! The trainer table: a slot is reserved when a connection is accepted (so `max_trainers`
//! holds before any hello, and no two connections ever share a slot) and filled when that
//! connection says hello. Every change names the connection it comes from, so a departure
//! or a message of one connection never touches another's record.

use std::collections::BTreeMap;

use super::trainer_slot::TrainerSlot;

/// A connection's place: its slot (the `trainer` label of the metrics, reused once free)
/// and its connection number (never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub slot: usize,
    pub conn: u64,
}

enum Entry {
    /// Accepted, no hello yet.
    Reserved,
    Joined(Box<TrainerSlot>),
}

pub struct Slots {
    max: usize,
    next_conn: u64,
    entries: BTreeMap<usize, (u64, Entry)>,
}

impl Slots {
    pub fn new(max: usize) -> Slots {
        Slots {
            max,
            next_conn: 0,
            entries: BTreeMap::new(),
        }
    }

    /// A slot for a new connection, or `None` when `max` are taken (joined or not).
    pub fn reserve(&mut self) -> Option<Tag> {
        let slot = (0..self.max).find(|s| !self.entries.contains_key(s))?;
        let conn = self.next_conn;
        self.next_conn += 1;
        self.entries.insert(slot, (conn, Entry::Reserved));
        Some(Tag { slot, conn })
    }

    /// Fills the connection's reserved slot; false (and `trainer` dropped) if the slot is
    /// not that connection's, or it already joined.
    pub fn join(&mut self, tag: Tag, trainer: TrainerSlot) -> bool {
        match self.entries.get_mut(&tag.slot) {
            Some((conn, entry @ Entry::Reserved)) if *conn == tag.conn => {
                *entry = Entry::Joined(Box::new(trainer));
                true
            }
            _ => false,
        }
    }

    pub fn get_mut(&mut self, tag: Tag) -> Option<&mut TrainerSlot> {
        match self.entries.get_mut(&tag.slot) {
            Some((conn, Entry::Joined(t))) if *conn == tag.conn => Some(t),
            _ => None,
        }
    }

    /// Frees the connection's slot; its trainer, if it had joined.
    pub fn remove(&mut self, tag: Tag) -> Option<Box<TrainerSlot>> {
        if self
            .entries
            .get(&tag.slot)
            .is_none_or(|(c, _)| *c != tag.conn)
        {
            return None;
        }
        match self.entries.remove(&tag.slot) {
            Some((_, Entry::Joined(t))) => Some(t),
            _ => None,
        }
    }

    pub fn joined(&self) -> impl Iterator<Item = &TrainerSlot> {
        self.entries.values().filter_map(|(_, e)| match e {
            Entry::Joined(t) => Some(&**t),
            Entry::Reserved => None,
        })
    }

    pub fn joined_mut(&mut self) -> impl Iterator<Item = &mut TrainerSlot> {
        self.entries.values_mut().filter_map(|(_, e)| match e {
            Entry::Joined(t) => Some(&mut **t),
            Entry::Reserved => None,
        })
    }

    pub fn joined_count(&self) -> usize {
        self.joined().count()
    }

    /// Every record goes; dropping a trainer's continues it if it was stopped.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_hold_the_limit_and_never_share_a_slot() {
        let mut s = Slots::new(2);
        let a = s.reserve().unwrap();
        let b = s.reserve().unwrap();
        assert_ne!(a.slot, b.slot);
        assert_eq!(
            s.reserve(),
            None,
            "two reserved: the limit holds before any hello"
        );
        // A departure of a stale tag (an old connection of the same slot) frees nothing.
        let stale = Tag {
            slot: a.slot,
            conn: a.conn + 100,
        };
        assert!(s.remove(stale).is_none());
        assert_eq!(s.reserve(), None);
        assert!(s.remove(a).is_none(), "reserved, never joined");
        let c = s.reserve().unwrap();
        assert_eq!(c.slot, a.slot);
        assert_ne!(c.conn, a.conn);
    }
}
