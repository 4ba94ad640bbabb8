//! A shard's key index as the index stores it: the BCHT of `index::bcht`, each slot packed to the
//! bits it needs (format version 9; up to version 8 a slot was a whole feature and a 32-bit value).
//!
//! A bucket of [`BUCKET_SLOTS`] slots is [`KeyCode::bucket_words`] little-endian `u32` words: the
//! slots' tags, `tag_bits` each, then their values, `value_bits` each, LSB first, then zero bits to
//! the word. So the tags a lookup scans lie together (16 tags of 16 bits are one 32-byte sector of a
//! GPU's memory), and the value is read once, for the slot that matched.
//!
//! - A **tag** is 0 for an empty slot, else `quotient << 2 | (j + 1)`: the key's `j`-th hash is
//!   `quotient * buckets + bucket` ([`KeyHash`]: a permutation of the shard's local keys), so the
//!   bucket and the tag give the key back ([`PackedKeys::slots`]), and no two keys share a tag in a
//!   bucket. `j` is the first hash function whose candidate is the bucket (two may coincide), which
//!   is the one a lookup tries first. A tag needs the quotient's bits, about `32 - shard_bits -
//!   log2(buckets)`, and two: 16 bits in a shard of 6,000 buckets, where a whole key took 32.
//! - A **value** is the slot value of `index::locations` (an inline location or a list's first
//!   entry) with [`INLINE_FLAG`] moved to the value's top bit, in as many bits as the shard's
//!   largest value needs ([`value_bits`]), recorded per shard in its `ShardEntry`.
//!
//! The invariants of the BCHT hold slot for slot (empty slots are a suffix of their bucket), so a
//! lookup reads at most three buckets, usually one. Every shard's block has its stream's padding
//! words after the key index (at least [`PAD_WORDS`]), so reading a field of the last bucket
//! never passes the block. The device twin is `index_lookup` in `cuda/classify.cuh`.

use crate::index::bcht::{BUCKET_SLOTS, EMPTY_KEY, HASH_FUNCTIONS, KeyHash, Slot};
use crate::index::locations::{INLINE_FLAG, PAD_WORDS, bits_for};
use crate::sketch::Feature;

/// How one shard's slots are packed: its hash, its buckets and its fields' widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyCode {
    pub hash: KeyHash,
    pub buckets: u64,
    pub tag_bits: u32,
    pub value_bits: u32,
}

impl KeyCode {
    /// The code of a shard of `buckets` buckets whose values take `value_bits`.
    pub fn new(hash: KeyHash, buckets: u64, value_bits: u32) -> Self {
        Self { hash, buckets, tag_bits: tag_bits(hash, buckets), value_bits }
    }

    /// Words of one bucket.
    #[inline]
    pub fn bucket_words(&self) -> u64 {
        (BUCKET_SLOTS as u64 * (self.tag_bits + self.value_bits) as u64).div_ceil(32)
    }

    /// Words of the whole key index.
    pub fn words(&self) -> u64 {
        self.buckets * self.bucket_words()
    }

    /// The bucket of `key`'s `j`-th candidate, and the tag it has there.
    #[inline]
    pub fn place(&self, key: Feature, j: usize) -> (u64, u64) {
        let h = self.hash.permute(key, j) as u64;
        (h % self.buckets, (h / self.buckets) << 2 | (j as u64 + 1))
    }

    /// The key whose tag in `bucket` is `tag` (not 0).
    pub fn key(&self, bucket: u64, tag: u64, shard: usize) -> Feature {
        let j = (tag & 3) as usize - 1;
        let h = (tag >> 2) * self.buckets + bucket;
        self.hash.key_of(self.hash.unpermute(h as u32, j), shard)
    }
}

/// Bits of a tag in a shard of `buckets` buckets: its largest quotient's and two.
pub fn tag_bits(hash: KeyHash, buckets: u64) -> u32 {
    let largest_hash = u32::MAX as u64 >> (32 - hash.domain_bits());
    2 + bits_for(largest_hash / buckets.max(1) + 1)
}

/// Bits of a value field for `slots`: the largest value's (less its inline flag), and the flag's.
pub fn value_bits(slots: &[Slot]) -> u32 {
    let largest = slots.iter().filter(|s| s.key != EMPTY_KEY).map(|s| s.value & !INLINE_FLAG).max().unwrap_or(0);
    1 + bits_for(largest as u64 + 1)
}

/// A slot value as its field holds it.
#[inline]
fn pack_value(value: u32, value_bits: u32) -> u64 {
    match value & INLINE_FLAG {
        0 => value as u64,
        _ => 1 << (value_bits - 1) | (value & !INLINE_FLAG) as u64,
    }
}

/// The slot value a field holds.
#[inline]
fn unpack_value(field: u64, value_bits: u32) -> u32 {
    let flag = 1u64 << (value_bits - 1);
    match field & flag {
        0 => field as u32,
        _ => INLINE_FLAG | (field & !flag) as u32,
    }
}

/// Packs a shard's slots (whole buckets, as `bcht` builds them) for the index: its words (with
/// no padding: the stream's follows) and its code.
pub fn pack(slots: &[Slot], hash: KeyHash) -> (Vec<u32>, KeyCode) {
    debug_assert_eq!(slots.len() % BUCKET_SLOTS, 0);
    let code = KeyCode::new(hash, (slots.len() / BUCKET_SLOTS) as u64, value_bits(slots));
    let (tb, vb, bw) = (code.tag_bits as u64, code.value_bits as u64, code.bucket_words());
    let mut words = vec![0u32; code.words() as usize];
    for (b, bucket) in slots.chunks(BUCKET_SLOTS).enumerate() {
        let start = b as u64 * bw * 32;
        for (i, slot) in bucket.iter().enumerate().filter(|(_, s)| s.key != EMPTY_KEY) {
            let tag = (0..HASH_FUNCTIONS)
                .map(|j| code.place(slot.key, j))
                .find(|&(at, _)| at == b as u64)
                .expect("a key is in one of its candidate buckets")
                .1;
            put(&mut words, start + i as u64 * tb, tag, tb as u32);
            put(
                &mut words,
                start + BUCKET_SLOTS as u64 * tb + i as u64 * vb,
                pack_value(slot.value, vb as u32),
                vb as u32,
            );
        }
    }
    (words, code)
}

/// ORs the low `bits` of `v` into `words` at bit `bit`.
fn put(words: &mut [u32], bit: u64, v: u64, bits: u32) {
    let (mut bit, mut v, mut left) = (bit, v, bits);
    while left > 0 {
        let shift = (bit % 32) as u32;
        let take = (32 - shift).min(left);
        words[(bit / 32) as usize] |= ((v & ((1u64 << take) - 1)) as u32) << shift;
        v >>= take;
        bit += take as u64;
        left -= take;
    }
}

/// The `bits` (at most 34) at bit `bit` of `words`, which hold at least two words past it.
#[inline]
fn field(words: &[u32], bit: u64, bits: u32) -> u64 {
    let (w, shift) = ((bit / 32) as usize, (bit % 32) as u32);
    let two = words[w] as u64 | (words[w + 1] as u64) << 32;
    let v = match shift + bits <= 64 {
        true => two >> shift,
        false => two >> shift | (words[w + 2] as u64) << (64 - shift),
    };
    v & ((1u64 << bits) - 1)
}

/// A shard's stored key index, read in place.
#[derive(Debug, Clone, Copy)]
pub struct PackedKeys<'a> {
    /// The key index's words, then at least [`PAD_WORDS`] more (the stream's).
    words: &'a [u32],
    code: KeyCode,
    shard: usize,
}

impl<'a> PackedKeys<'a> {
    /// The key index of shard `shard`, coded by `code`, at the start of `words` (its block: the
    /// key index, then its stream; the caller has checked that it holds both).
    pub fn new(words: &'a [u32], code: KeyCode, shard: usize) -> Self {
        debug_assert!(words.len() as u64 >= code.words() + PAD_WORDS as u64);
        Self { words, code, shard }
    }

    pub fn code(&self) -> &KeyCode {
        &self.code
    }

    /// The slot value stored for `key` (which is of this shard), if any.
    #[inline]
    pub fn lookup(&self, key: Feature) -> Option<u32> {
        let c = &self.code;
        if c.buckets == 0 {
            return None;
        }
        let (tb, vb) = (c.tag_bits, c.value_bits);
        for j in 0..HASH_FUNCTIONS {
            let (b, tag) = c.place(key, j);
            let start = b * c.bucket_words() * 32;
            for i in 0..BUCKET_SLOTS as u64 {
                let t = field(self.words, start + i * tb as u64, tb);
                if t == tag {
                    let v = field(self.words, start + BUCKET_SLOTS as u64 * tb as u64 + i * vb as u64, vb);
                    return Some(unpack_value(v, vb));
                }
                if t == 0 {
                    return None;
                }
            }
        }
        None
    }

    /// The word where `key`'s first candidate bucket starts (for a prefetch).
    #[inline]
    pub fn first_bucket(&self, key: Feature) -> Option<&'a u32> {
        if self.code.buckets == 0 {
            return None;
        }
        let (b, _) = self.code.place(key, 0);
        self.words.get((b * self.code.bucket_words()) as usize)
    }

    /// Every occupied slot, key and value, in slot order.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        let c = self.code;
        let (tb, vb) = (c.tag_bits as u64, c.value_bits);
        (0..c.buckets).flat_map(move |b| {
            let start = b * c.bucket_words() * 32;
            (0..BUCKET_SLOTS as u64).map_while(move |i| {
                let tag = field(self.words, start + i * tb, tb as u32);
                (tag != 0).then(|| Slot {
                    key: c.key(b, tag, self.shard),
                    value: unpack_value(field(self.words, start + BUCKET_SLOTS as u64 * tb + i * vb as u64, vb), vb),
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::bcht;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// Keys of shard `shard` of `1 << shard_bits`, with values inline and not.
    fn entries(n: usize, shard_bits: u32, shard: u32, seed: u64) -> Vec<Slot> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut keys: Vec<u32> = (0..n)
            .map(|_| (rng.random::<u32>() >> shard_bits << shard_bits) | shard)
            .filter(|&k| k != EMPTY_KEY)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys.iter()
            .map(|&k| Slot { key: k, value: if k % 3 == 0 { INLINE_FLAG | (k >> 9) } else { k >> 12 } })
            .collect()
    }

    fn padded(mut words: Vec<u32>) -> Vec<u32> {
        words.extend([0; PAD_WORDS]);
        words
    }

    /// Packed, every key is found with its value and listed back, absent keys are not found, at
    /// every shard count and table size (tags from 3 to 34 bits).
    #[test]
    fn packed_slots_give_back_their_keys_and_values() {
        for (shard_bits, n) in [(0, 0), (0, 1), (0, 17), (6, 1000), (6, 50_000), (12, 3000), (31, 1), (3, 5)] {
            let shard = if shard_bits == 0 { 0 } else { 5 };
            let hash = KeyHash::new(shard_bits);
            let e = entries(n, shard_bits, shard, n as u64 + shard_bits as u64);
            let slots = bcht::build(&e, hash);
            let (words, code) = pack(&slots, hash);
            assert_eq!(words.len() as u64, code.words());
            let words = padded(words);
            let keys = PackedKeys::new(&words, code, shard as usize);
            for s in &e {
                assert_eq!(keys.lookup(s.key), Some(s.value), "shard bits {shard_bits}, {n} keys");
            }
            let listed: Vec<Slot> = keys.slots().collect();
            let stored: Vec<Slot> = slots.iter().copied().filter(|s| s.key != EMPTY_KEY).collect();
            assert_eq!(listed, stored);
            let mut rng = StdRng::seed_from_u64(1);
            for _ in 0..5000 {
                let k = (rng.random::<u32>() >> shard_bits << shard_bits) | shard;
                if e.binary_search_by_key(&k, |s| s.key).is_err() {
                    assert_eq!(keys.lookup(k), None);
                }
            }
        }
    }

    /// The sizes the format is for: a shard of 6,000 buckets (64 shards) has 16-bit tags, and
    /// values as wide as the largest.
    #[test]
    fn fields_are_as_narrow_as_the_shard_allows() {
        let hash = KeyHash::new(6);
        assert_eq!(tag_bits(hash, 6000), 16);
        assert_eq!(tag_bits(hash, 1), 28);
        assert_eq!(tag_bits(KeyHash::new(0), 1), 34);
        let slots = [Slot { key: 1, value: INLINE_FLAG | 0x7f_ffff }, Slot { key: 2, value: 1000 }];
        assert_eq!(value_bits(&slots), 24);
        assert_eq!(value_bits(&[]), 2);
        for vb in [2, 24, 32] {
            for v in [0, 1, INLINE_FLAG, INLINE_FLAG | 1] {
                let v = v & if vb == 32 { u32::MAX } else { INLINE_FLAG | ((1 << (vb - 1)) - 1) };
                assert_eq!(unpack_value(pack_value(v, vb), vb), v);
            }
        }
        let code = KeyCode::new(hash, 6000, 24);
        assert_eq!(code.bucket_words(), 20);
    }
}
