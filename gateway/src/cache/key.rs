//! What an entry is found by. The store hashes a key with a hasher keyed at random for
//! this process (std's `RandomState`, through moka), so clients cannot aim collisions, and
//! confirms a match by comparing the whole key, never by hash alone.

/// A loaded version and the bytes of everything that changes what it answers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The [`super::VersionCache`] instance: a reload gets a new one, so a version's old
    /// answers cannot be found after it.
    pub(crate) instance: u64,
    bytes: Box<[u8]>,
}

impl Key {
    /// Bytes it takes in the store.
    pub fn size(&self) -> usize {
        self.bytes.len() + std::mem::size_of::<Key>()
    }
}

/// Builds a key from fields, each written with its length, so that no two different
/// sequences of fields give the same bytes.
#[derive(Clone, Debug)]
pub struct KeyWriter {
    instance: u64,
    bytes: Vec<u8>,
}

impl KeyWriter {
    pub fn new(instance: u64) -> KeyWriter {
        KeyWriter {
            instance,
            bytes: Vec::new(),
        }
    }

    /// A field of its own: its length, then its bytes.
    pub fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes
            .extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        self.bytes.extend_from_slice(bytes);
        self
    }

    pub fn key(&self) -> Key {
        self.clone().into_key()
    }

    pub fn into_key(self) -> Key {
        Key {
            instance: self.instance,
            bytes: self.bytes.into_boxed_slice(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_delimited_and_instances_apart() {
        let key = |instance, fields: &[&[u8]]| {
            let mut w = KeyWriter::new(instance);
            for f in fields {
                w.field(f);
            }
            w.key()
        };
        assert_eq!(key(1, &[b"ab", b"c"]), key(1, &[b"ab", b"c"]));
        assert_ne!(key(1, &[b"ab", b"c"]), key(1, &[b"a", b"bc"]));
        assert_ne!(key(1, &[b"ab"]), key(2, &[b"ab"]));
    }
}
