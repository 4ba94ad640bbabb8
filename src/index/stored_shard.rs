//! A shard as the index stores it (format 10): its lists laid out in the key index's slot order,
//! so that a slot needs no offset, only a code for its list's kind and size (`index::packed_keys`).
//!
//! The build (CPU and GPU alike) lays a shard out first as a [`ShardData`]: slots whose values are
//! inline locations or entries of a [`ListWriter`] stream, in whatever order its keys were placed
//! (the GPU writes lists before the host's walk places the keys the rounds left over). [`store`]
//! then rewrites it once the slots are final, on the thread that finishes the shard: the same
//! function for every backend, so the bytes stay the same. For each bucket in turn it writes the
//! lists of its slots in slot order (fixed lists short enough for a code without their head),
//! then its escaped lists, each after its size in entries, and records where the bucket's lists
//! start. It picks the shard's code width and how many codes name fixed lengths by counting what
//! each choice would take, key index and stream together.
//!
//! Against format 9 on `../shared/data/refs` this takes the slots from 40 bits (a 16-bit tag and a
//! 24-bit value, most of it an offset or an inline location) to the tag and two or three bits,
//! and drops the heads of short fixed lists; single locations move into the stream.

use crate::index::bcht::{BUCKET_SLOTS, EMPTY_KEY, KeyHash, Slot};
use crate::index::locations::{self, INLINE_FLAG, ListWriter, LocationLayout, LocationList, ShardOverflow, bits_for};
use crate::index::packed_keys::{self, KeyCode, PackedKeys, SlotCodes, bucket_words, tag_bits};
use crate::index::write::ShardData;
use crate::sketch::Feature;
use std::collections::BTreeMap;

/// One shard's block as stored: its key index, then its stream (padded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredShard {
    block: Vec<u32>,
    code: KeyCode,
}

impl StoredShard {
    pub fn code(&self) -> KeyCode {
        self.code
    }

    /// The key index's words.
    pub fn keys(&self) -> &[u32] {
        &self.block[..self.code.words() as usize]
    }

    /// The stream's words, padded.
    pub fn words(&self) -> &[u32] {
        &self.block[self.code.words() as usize..]
    }

    /// The key index, read as an index reads it (`shard` is the shard's number).
    pub fn packed_keys(&self, shard: usize) -> PackedKeys<'_> {
        PackedKeys::new(&self.block, self.code, shard)
    }

    /// The list of `key` (of shard `shard`), if stored.
    pub fn lookup(&self, key: Feature, shard: usize, layout: &LocationLayout) -> Option<LocationList<'_>> {
        Some(LocationList::at(self.packed_keys(shard).lookup(key)?, self.words(), layout))
    }
}

/// A slot's list as the build wrote it.
#[derive(Debug, Clone, Copy)]
enum Built {
    /// Locations, one entry each, from `first` of the built stream (`first` is the location
    /// itself for a single inline one: see `inline`).
    Fixed { first: u64, len: u64, inline: bool },
    /// A list that says what it is (delta or clade), `entries` from entry `start`.
    Described { start: u64, entries: u64 },
}

impl Built {
    fn of(value: u32, words: &[u32], layout: &LocationLayout) -> Self {
        if value & INLINE_FLAG != 0 && layout.inline_single() {
            return Built::Fixed { first: (value & !INLINE_FLAG) as u64, len: 1, inline: true };
        }
        match LocationList::decode(value, words, layout) {
            LocationList::Packed { first, len, .. } => Built::Fixed { first, len: len as u64, inline: false },
            _ => Built::Described { start: value as u64, entries: locations::written_entries(value, words, layout) },
        }
    }
}

/// How a list is stored under some [`SlotCodes`]: its code (`None`: escaped) and its entries.
fn stored(list: &Built, codes: &SlotCodes) -> (Option<u64>, u64) {
    match *list {
        Built::Fixed { len, .. } => match codes.of_fixed(len) {
            Some(c) => (Some(c), len),
            // With its head.
            None => (codes.of_described(len + 1), len + 1),
        },
        Built::Described { entries, .. } => (codes.of_described(entries), entries),
    }
}

/// Counts of the lists of a shard by kind and size: what choosing its codes needs.
#[derive(Default)]
struct Sizes {
    fixed: BTreeMap<u64, u64>,
    described: BTreeMap<u64, u64>,
}

impl Sizes {
    /// Entries of the stream under `codes`: each list's, and a size entry per escaped one.
    fn entries(&self, codes: &SlotCodes) -> u64 {
        let cost = |list: Built, n: u64| {
            let (code, entries) = stored(&list, codes);
            n * (entries + code.is_none() as u64)
        };
        let fixed = self.fixed.iter().map(|(&len, &n)| cost(Built::Fixed { first: 0, len, inline: false }, n));
        let described = self.described.iter().map(|(&entries, &n)| cost(Built::Described { start: 0, entries }, n));
        fixed.chain(described).sum()
    }
}

/// The codes for which the shard takes the fewest bits (the fewest code bits, then the fewest
/// fixed codes, among equals), and the width of its buckets' bases under them.
fn choose_codes(sizes: &Sizes, buckets: u64, tag_bits: u32, entry_bits: u32) -> (SlotCodes, u32) {
    let mut best: Option<(u64, SlotCodes, u32)> = None;
    for bits in 1..=SlotCodes::MAX_BITS {
        let most = ((1u64 << bits) - 1).min(locations::ListRef::MAX_FIXED) as u32;
        for fixed in 0..=most {
            let codes = SlotCodes { bits, fixed };
            let entries = sizes.entries(&codes);
            let base_bits = bits_for(entries + 1);
            let total = buckets * bucket_words(base_bits, tag_bits, bits) * 32 + entries * entry_bits as u64;
            if best.is_none_or(|(b, _, _)| total < b) {
                best = Some((total, codes, base_bits));
            }
        }
    }
    let (_, codes, base_bits) = best.expect("at least one choice");
    (codes, base_bits)
}

/// Rewrites a shard as built (final slots, whole buckets; values into `shard.words`) as stored.
pub fn store(shard: &ShardData, layout: &LocationLayout, hash: KeyHash) -> Result<StoredShard, ShardOverflow> {
    store_parts(&shard.slots, &shard.words, layout, hash)
}

/// [`store`] of the slots and words of a shard held elsewhere (a GPU's download buffer).
pub fn store_parts(
    slots: &[Slot],
    words: &[u32],
    layout: &LocationLayout,
    hash: KeyHash,
) -> Result<StoredShard, ShardOverflow> {
    store_with(slots, words, layout, hash, None)
}

/// [`store_parts`] with the codes `forced`, if given, instead of the best ones.
fn store_with(
    slots: &[Slot],
    words: &[u32],
    layout: &LocationLayout,
    hash: KeyHash,
    forced: Option<SlotCodes>,
) -> Result<StoredShard, ShardOverflow> {
    debug_assert_eq!(slots.len() % BUCKET_SLOTS, 0);
    let buckets = (slots.len() / BUCKET_SLOTS) as u64;
    let eb = layout.entry_bits;
    let lists: Vec<Option<Built>> =
        slots.iter().map(|s| (s.key != EMPTY_KEY).then(|| Built::of(s.value, words, layout))).collect();
    let mut sizes = Sizes::default();
    for list in lists.iter().flatten() {
        match *list {
            Built::Fixed { len, .. } => *sizes.fixed.entry(len).or_default() += 1,
            Built::Described { entries, .. } => *sizes.described.entry(entries).or_default() += 1,
        }
    }
    let tb = tag_bits(hash, buckets);
    let (codes, base_bits) = match forced {
        Some(codes) => (codes, bits_for(sizes.entries(&codes) + 1)),
        None => choose_codes(&sizes, buckets, tb, eb),
    };

    let mut out = ListWriter::new(*layout);
    let mut slot_codes = vec![0u64; slots.len()];
    let mut bases = Vec::with_capacity(buckets as usize);
    let copy = |out: &mut ListWriter, from: u64, n: u64| {
        for i in from..from + n {
            out.push_entry(locations::entry(words, eb, i));
        }
    };
    let write = |out: &mut ListWriter, list: &Built, headless: bool| match *list {
        Built::Fixed { first, len, inline } => {
            if !headless {
                out.push_entry(len << 1);
            }
            match inline {
                true => out.push_entry(first),
                false => copy(out, first, len),
            }
        }
        Built::Described { start, entries } => copy(out, start, entries),
    };
    for b in 0..buckets as usize {
        bases.push(out.entries());
        let mut escaped = Vec::new();
        for i in b * BUCKET_SLOTS..(b + 1) * BUCKET_SLOTS {
            let Some(list) = &lists[i] else { continue };
            let (code, entries) = stored(list, &codes);
            match code {
                Some(c) => {
                    slot_codes[i] = c;
                    write(&mut out, list, (c as u32) < codes.fixed);
                }
                None => {
                    slot_codes[i] = codes.escape();
                    escaped.push((list, entries));
                }
            }
        }
        for (list, entries) in escaped {
            out.push_entry(entries);
            write(&mut out, list, false);
        }
    }
    if out.entries() >= INLINE_FLAG as u64 {
        return Err(ShardOverflow);
    }
    let code = KeyCode::new(hash, buckets, codes, base_bits);
    let mut block = packed_keys::pack(slots, &slot_codes, &bases, &code);
    block.extend(out.finish());
    Ok(StoredShard { block, code })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::bcht;

    /// Lists of every kind (single, short and long fixed, delta, clade), stored and read back by
    /// lookup and by the slots' walk, at code choices from escaping most lists to escaping none.
    #[test]
    fn stored_lists_read_back_by_lookup_and_walk() {
        let layout = LocationLayout::for_counts(300, 5000, 254, 50);
        let hash = KeyHash::new(4);
        let mut writer = ListWriter::new(layout);
        let mut expected = Vec::new();
        let mut keys = Vec::new();
        for f in 0..3000u32 {
            let key = (f * 7919 + 3) << 4 | 5;
            let list: Vec<u64> = match f % 6 {
                0 | 1 => vec![layout.pack(f % 300, f % 5000)],
                2 => (0..(f % 9 + 2)).map(|i| layout.pack((f * 3 + i * 37) % 300, i * 11)).collect(),
                3 => (0..(f % 200 + 20)).map(|i| layout.pack(i, (i * 101 + f) % 5000)).collect(),
                // Strains side by side: delta lists.
                4 => (0..(f % 40 + 3)).map(|i| layout.pack(i + f % 100, 17)).collect(),
                _ => vec![],
            };
            let value = match list.is_empty() {
                true => writer.add_clade(f % 50).unwrap(),
                false => writer.add(&list).unwrap(),
            };
            keys.push(bcht::Slot { key, value });
            expected.push((key, list, f % 6 == 5));
        }
        keys.sort_unstable_by_key(|s| s.key);
        let slots = bcht::build(&keys, hash);
        let built = ShardData { slots, words: writer.finish() };
        let stored = store(&built, &layout, hash).unwrap();
        let packed = stored.packed_keys(5);
        let words = stored.words();
        for (key, list, clade) in &expected {
            let r = packed.lookup(*key).expect("stored");
            let got = LocationList::at(r, words, &layout);
            match clade {
                true => assert!(got.clade().is_some()),
                false => assert_eq!(got.iter().collect::<Vec<_>>(), *list, "key {key}"),
            }
        }
        let walked: Vec<_> = packed.slots().collect();
        assert_eq!(walked.len(), expected.len());
        for s in walked {
            assert_eq!(packed.lookup(s.key), Some(s.list));
        }
        assert!(packed.lookup(4 << 4 | 5).is_none());
        // Smaller than format 9's slots of a tag and a 24-bit value, and its stream.
        let old = built.slots.len() as u64 * (stored.code.tag_bits as u64 + 24) / 32 + built.words.len() as u64;
        assert!((stored.block.len() as u64) < old);
    }

    /// Each choice of codes reads back: every width, every split between fixed and described.
    #[test]
    fn every_code_choice_reads_back() {
        let layout = LocationLayout::for_counts(64, 4096, 254, 10);
        let hash = KeyHash::new(2);
        let mut writer = ListWriter::new(layout);
        let mut entries = Vec::new();
        let mut lists = Vec::new();
        for f in 0..400u32 {
            let mut l: Vec<u64> = (0..(f % 13 + 1)).map(|i| layout.pack((i * 5 + f) % 64, f % 4096)).collect();
            l.sort_unstable();
            l.dedup();
            entries.push(bcht::Slot { key: (f + 1) << 2 | 1, value: writer.add(&l).unwrap() });
            lists.push(l);
        }
        let slots = bcht::build(&entries, hash);
        let words = writer.finish();
        for bits in 1..=4 {
            for fixed in 0..(1 << bits) {
                let codes = SlotCodes { bits, fixed };
                let stored = store_with(&slots, &words, &layout, hash, Some(codes)).unwrap();
                assert_eq!(stored.code.codes, codes);
                let packed = stored.packed_keys(1);
                for (e, l) in entries.iter().zip(&lists) {
                    let r = packed.lookup(e.key).unwrap();
                    let got: Vec<u64> = LocationList::at(r, stored.words(), &layout).iter().collect();
                    assert_eq!(&got, l, "codes {codes:?}");
                }
                assert!(packed.slots().all(|s| packed.lookup(s.key) == Some(s.list)));
            }
        }
    }
}
