//! Locations (target, window) and how a shard stores each feature's list of them.
//!
//! A location packs `target << window_bits | window` in `target_bits + window_bits` bits, as few as
//! the index's targets and longest target need (recorded in the header as [`LocationLayout`]).
//! Packed locations sort like (target, window) pairs.
//!
//! A shard's lists are one little-endian bit stream of `entry_bits`-wide entries, packed LSB first
//! into 32-bit words, with [`PAD_WORDS`] zero words at the end so that any entry can be read with
//! a fixed number of word reads. A list is its length as one entry, then its locations ascending.
//! `entry_bits` is the location width, or wider where the location cap needs it for the length.
//!
//! A key slot's value is either the feature's only location, inline, marked by [`INLINE_FLAG`]
//! (when entries fit in 31 bits), or the entry index where the feature's list starts.
//!
//! A feature in more locations than the cap is a *clade feature*: its "list" is a length of 0 (no
//! real list is empty) followed by one entry, the tree node (index of the taxon in the index's
//! taxonomy, ordered by taxid) of the lowest common ancestor of its targets' taxa. Classification
//! counts it for that clade, as Kraken 2 counts every minimizer; its locations are kept only for
//! `kmerdb update`, in the clade lists section (`index::clade_lists`).

use serde::{Deserialize, Serialize};

/// Marks a slot value that is itself the feature's single location.
pub const INLINE_FLAG: u32 = 1 << 31;
/// Zero words after each shard's stream: an entry of up to 64 bits starting anywhere in the last
/// real word can then be read as three words.
pub const PAD_WORDS: usize = 2;

/// How locations are packed; part of the index header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocationLayout {
    pub target_bits: u32,
    pub window_bits: u32,
    /// Width of one entry of a shard's list stream (a location or a list length).
    pub entry_bits: u32,
}

impl LocationLayout {
    /// The tightest layout for `targets` targets whose longest has `max_windows` windows, with
    /// lists of up to `max_list` locations and clade features naming any of `taxa` tree nodes.
    pub fn for_counts(targets: u64, max_windows: u64, max_list: u32, taxa: u64) -> Self {
        let (target_bits, window_bits) = (bits_for(targets), bits_for(max_windows));
        let entry_bits = (target_bits + window_bits).max(bits_for(max_list as u64 + 1)).max(bits_for(taxa));
        Self { target_bits, window_bits, entry_bits }
    }

    pub fn bits(&self) -> u32 {
        self.target_bits + self.window_bits
    }

    /// Whether a single location fits in a slot value beside [`INLINE_FLAG`].
    pub fn inline_single(&self) -> bool {
        self.entry_bits <= 31
    }

    #[inline]
    pub fn pack(&self, target: u32, window: u32) -> u64 {
        ((target as u64) << self.window_bits) | window as u64
    }

    #[inline]
    pub fn unpack(&self, loc: u64) -> (u32, u32) {
        ((loc >> self.window_bits) as u32, (loc & ((1u64 << self.window_bits) - 1)) as u32)
    }
}

/// Bits needed to number `n` things 0..n (at least 1).
fn bits_for(n: u64) -> u32 {
    (64 - n.saturating_sub(1).leading_zeros()).max(1)
}

/// Error: a shard's list stream no longer fits a 31-bit entry index.
#[derive(Debug, thiserror::Error)]
#[error("a shard holds more than 2^31 location entries; build with more shards")]
pub struct ShardOverflow;

/// Builds one shard's list stream.
#[derive(Debug)]
pub struct ListWriter {
    layout: LocationLayout,
    words: Vec<u32>,
    /// Bits not yet in a whole word, LSB first.
    pending: u128,
    pending_bits: u32,
    entries: u64,
}

impl ListWriter {
    pub fn new(layout: LocationLayout) -> Self {
        Self { layout, words: Vec::new(), pending: 0, pending_bits: 0, entries: 0 }
    }

    fn push(&mut self, value: u64) {
        debug_assert!(self.layout.entry_bits == 64 || value >> self.layout.entry_bits == 0);
        self.pending |= (value as u128) << self.pending_bits;
        self.pending_bits += self.layout.entry_bits;
        while self.pending_bits >= 32 {
            self.words.push(self.pending as u32);
            self.pending >>= 32;
            self.pending_bits -= 32;
        }
        self.entries += 1;
    }

    /// Adds one feature's sorted, non-empty `locs` and returns its slot value.
    pub fn add(&mut self, locs: &[u64]) -> Result<u32, ShardOverflow> {
        if locs.len() == 1 && self.layout.inline_single() {
            return Ok(INLINE_FLAG | locs[0] as u32);
        }
        let start = u32::try_from(self.entries).ok().filter(|&o| o < INLINE_FLAG).ok_or(ShardOverflow)?;
        self.push(locs.len() as u64);
        for &loc in locs {
            self.push(loc);
        }
        Ok(start)
    }

    /// Adds a clade feature whose targets' LCA is tree node `node`; returns its slot value.
    pub fn add_clade(&mut self, node: u32) -> Result<u32, ShardOverflow> {
        let start = u32::try_from(self.entries).ok().filter(|&o| o < INLINE_FLAG).ok_or(ShardOverflow)?;
        self.push(0);
        self.push(node as u64);
        Ok(start)
    }

    /// The stream's words, padded.
    pub fn finish(mut self) -> Vec<u32> {
        if self.pending_bits > 0 {
            self.words.push(self.pending as u32);
        }
        self.words.extend([0; PAD_WORDS]);
        self.words
    }
}

/// Reads entry `i` of a stream of `eb`-bit entries.
#[inline]
fn entry(words: &[u32], eb: u32, i: u64) -> u64 {
    let bit = i * eb as u64;
    let (w, shift) = ((bit / 32) as usize, (bit % 32) as u32);
    let mask = if eb == 64 { u64::MAX } else { (1u64 << eb) - 1 };
    if eb + shift <= 64 {
        let two = words[w] as u64 | (words[w + 1] as u64) << 32;
        (two >> shift) & mask
    } else {
        let three = words[w] as u128 | (words[w + 1] as u128) << 32 | (words[w + 2] as u128) << 64;
        ((three >> shift) as u64) & mask
    }
}

/// The locations of one feature, borrowed from the index; a clade feature's list is empty and
/// names its clade instead.
#[derive(Debug, Clone, Copy)]
pub enum LocationList<'a> {
    Single(u64),
    Packed {
        words: &'a [u32],
        entry_bits: u32,
        first: u64,
        len: usize,
    },
    /// A feature over the location cap: the tree node of its targets' LCA.
    Clade(u32),
}

impl<'a> LocationList<'a> {
    /// Decodes a slot value. `words` is the shard's stream.
    #[inline]
    pub fn decode(value: u32, words: &'a [u32], layout: &LocationLayout) -> Self {
        if value & INLINE_FLAG != 0 && layout.inline_single() {
            return LocationList::Single((value & !INLINE_FLAG) as u64);
        }
        let eb = layout.entry_bits;
        // Bounds are checked once here so that reading entries cannot fail: a damaged index
        // opened without verification gives an empty list, not a crash.
        let entries = (words.len().saturating_sub(PAD_WORDS) as u64 * 32) / eb as u64;
        if value as u64 >= entries {
            return LocationList::Packed { words, entry_bits: eb, first: 0, len: 0 };
        }
        let len = entry(words, eb, value as u64);
        if len == 0 {
            // A clade feature; a node past the tree (a damaged index) is left to the reader, which
            // checks it against its tree.
            return match value as u64 + 1 < entries {
                true => LocationList::Clade(entry(words, eb, value as u64 + 1).min(u32::MAX as u64) as u32),
                false => LocationList::Packed { words, entry_bits: eb, first: 0, len: 0 },
            };
        }
        let len = if value as u64 + 1 + len > entries { 0 } else { len as usize };
        LocationList::Packed { words, entry_bits: eb, first: value as u64 + 1, len }
    }

    /// The locations in the list (0 for a clade feature).
    pub fn len(&self) -> usize {
        match self {
            LocationList::Single(_) => 1,
            LocationList::Packed { len, .. } => *len,
            LocationList::Clade(_) => 0,
        }
    }

    /// The clade of a clade feature.
    #[inline]
    pub fn clade(&self) -> Option<u32> {
        match *self {
            LocationList::Clade(node) => Some(node),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        match *self {
            LocationList::Single(loc) => loc,
            LocationList::Packed { words, entry_bits, first, .. } => entry(words, entry_bits, first + i as u64),
            LocationList::Clade(_) => panic!("a clade feature has no locations"),
        }
    }

    /// Appends every location to `out`, decoding the stream sequentially (the classifier's hot path).
    #[inline]
    pub fn append_to(&self, out: &mut Vec<u64>) {
        match *self {
            LocationList::Single(loc) => out.push(loc),
            LocationList::Packed { words, entry_bits, first, len } if entry_bits <= 32 => {
                out.reserve(len);
                let eb = entry_bits as u64;
                let mask = (1u64 << eb) - 1;
                let mut bit = first * eb;
                for _ in 0..len {
                    let w = (bit / 32) as usize;
                    let two = words[w] as u64 | (words[w + 1] as u64) << 32;
                    out.push((two >> (bit % 32)) & mask);
                    bit += eb;
                }
            }
            LocationList::Packed { .. } => out.extend(self.iter()),
            LocationList::Clade(_) => {}
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_as_few_as_possible() {
        assert_eq!(bits_for(1), 1);
        assert_eq!(bits_for(2), 1);
        assert_eq!(bits_for(3), 2);
        assert_eq!(bits_for(256), 8);
        assert_eq!(bits_for(257), 9);
        let l = LocationLayout::for_counts(101, 51_000, 254, 40);
        assert_eq!((l.target_bits, l.window_bits, l.entry_bits), (7, 16, 23));
        assert!(l.inline_single());
        // One short target: the list length needs more bits than a location.
        assert_eq!(LocationLayout::for_counts(1, 2, 254, 2).entry_bits, 8);
        // Many taxa and few targets: the clade's node needs more.
        assert_eq!(LocationLayout::for_counts(1, 2, 254, 1000).entry_bits, 10);
    }

    #[test]
    fn round_trip_at_every_width() {
        for (targets, windows) in [(2, 2), (100, 1000), (1 << 16, 1 << 15), (1 << 20, 1 << 20), (1 << 32, 1 << 32)] {
            let layout = LocationLayout::for_counts(targets, windows, 254, 3);
            let mut w = ListWriter::new(layout);
            let lists: Vec<Vec<u64>> = (0..50u64)
                .map(|f| {
                    (0..f % 7 + 1)
                        .map(|i| {
                            layout.pack(((targets - 1) - (f * 31 + i) % targets) as u32, ((f * 7 + i) % windows) as u32)
                        })
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect()
                })
                .collect();
            let values: Vec<u32> = lists.iter().map(|l| w.add(l).unwrap()).collect();
            let clade = w.add_clade(2).unwrap();
            let words = w.finish();
            let list = LocationList::decode(clade, &words, &layout);
            assert_eq!((list.clade(), list.len(), list.iter().count()), (Some(2), 0, 0));
            for (l, &v) in lists.iter().zip(&values) {
                let list = LocationList::decode(v, &words, &layout);
                let got: Vec<u64> = list.iter().collect();
                assert_eq!(&got, l, "layout {layout:?}");
                let mut appended = Vec::new();
                list.append_to(&mut appended);
                assert_eq!(&appended, l);
            }
        }
    }

    #[test]
    fn a_32_bit_layout_stores_single_locations_in_the_list() {
        let layout = LocationLayout { target_bits: 16, window_bits: 16, entry_bits: 32 };
        assert!(!layout.inline_single());
        let mut w = ListWriter::new(layout);
        let loc = layout.pack(0xffff, 0xffff);
        let v = w.add(&[loc]).unwrap();
        let words = w.finish();
        assert_eq!(words, vec![1, u32::MAX, 0, 0]);
        assert_eq!(LocationList::decode(v, &words, &layout).get(0), loc);
    }
}
