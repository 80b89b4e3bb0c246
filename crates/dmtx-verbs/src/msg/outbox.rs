//! The entries a mailbox queued per destination since its last flush.

use super::{encode_entry, Entry};

/// Entries queued per destination between flushes, for transports that send each
/// destination's entries as one message ([`super::Mailbox::flush`]). Destinations are
/// the transport's worker indices; they are kept in first-push order, so a flush sends in
/// a deterministic order.
#[derive(Debug, Default)]
pub struct Outbox {
    queued: Vec<Queued>,
}

#[derive(Debug)]
struct Queued {
    to: usize,
    bytes: Vec<u8>,
    entries: u32,
}

impl Outbox {
    /// An empty outbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue `entry` for destination `to` (its size was checked by the caller,
    /// [`super::check_size`]).
    pub fn push(&mut self, to: usize, entry: &Entry<'_>) {
        let q = match self.queued.iter().position(|q| q.to == to) {
            Some(p) => &mut self.queued[p],
            None => {
                self.queued.push(Queued {
                    to,
                    bytes: Vec::new(),
                    entries: 0,
                });
                self.queued.last_mut().expect("just pushed")
            }
        };
        encode_entry(&mut q.bytes, entry);
        q.entries += 1;
    }

    /// Hand each destination's queued entries to `send` as one message (destination,
    /// encoded entries, entry count), and forget them.
    pub fn flush(&mut self, mut send: impl FnMut(usize, Vec<u8>, u32)) {
        for q in &mut self.queued {
            if q.entries > 0 {
                send(q.to, std::mem::take(&mut q.bytes), std::mem::take(&mut q.entries));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{decode_entries, EntryKind};

    /// Goal: entries for one destination leave together, in push order, once; other
    /// destinations keep their own messages, in first-push order.
    #[test]
    fn one_message_per_destination_per_flush() {
        let entry = |id: u64| Entry {
            kind: EntryKind::OneWay,
            id,
            retry: false,
            payload: b"x",
        };
        let mut o = Outbox::new();
        o.push(3, &entry(1));
        o.push(1, &entry(2));
        o.push(3, &entry(3));
        let mut sent = Vec::new();
        o.flush(|to, bytes, n| {
            let mut ids = Vec::new();
            assert_eq!(decode_entries(&bytes, &mut |e| ids.push(e.id)).unwrap(), n as usize);
            sent.push((to, ids));
        });
        assert_eq!(sent, [(3, vec![1, 3]), (1, vec![2])]);
        o.flush(|_, _, _| panic!("nothing is left to send"));
    }
}
