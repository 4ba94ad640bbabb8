//! A shard's key index as the index stores it: the BCHT of `index::bcht`, each slot packed to the
//! bits it needs (format version 9; up to version 8 a slot was a whole feature and a 32-bit value).
//!
//! A bucket of [`BUCKET_SLOTS`] slots is [`KeyCode::bucket_words`] little-endian `u32` words: the
//! slots one after the other, each its tag (`tag_bits`) then its value (`value_bits`), LSB first,
//! then zero bits to the word. A slot's value lies beside its tag, so a lookup whose bucket was not
//! prefetched (a key in its second or third candidate) waits for one cache line, not two: with the
//! tags together and the values after them, the CPU classify was 20% slower.
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
    /// `ceil(2^64 / buckets)` (0 for one bucket): a hash's bucket and quotient by a
    /// multiplication, not a division (Lemire, Kaser and Kurz 2019: exact for every 32-bit hash),
    /// which lookups do for every feature of every read.
    magic: u64,
}

impl KeyCode {
    /// The code of a shard of `buckets` buckets whose values take `value_bits`.
    pub fn new(hash: KeyHash, buckets: u64, value_bits: u32) -> Self {
        Self::with_widths(hash, buckets, tag_bits(hash, buckets), value_bits)
    }

    /// The code of a stored shard, whose widths its shard table gives (the reader checks them).
    pub fn with_widths(hash: KeyHash, buckets: u64, tag_bits: u32, value_bits: u32) -> Self {
        let magic = match buckets {
            0 | 1 => 0,
            b => ((1u128 << 64) / b as u128 + 1) as u64,
        };
        Self { hash, buckets, tag_bits, value_bits, magic }
    }

    /// Words of one bucket.
    #[inline]
    pub fn bucket_words(&self) -> u64 {
        (BUCKET_SLOTS as u64 * (self.tag_bits + self.value_bits) as u64).div_ceil(32)
    }

    /// `h / buckets` and `h % buckets`, for a shard of fewer than 2^32 buckets (a table of more
    /// would need more slots than there are keys).
    #[inline]
    fn div_mod(&self, h: u32) -> (u64, u64) {
        if self.buckets > u32::MAX as u64 || self.buckets <= 1 {
            return (h as u64 / self.buckets.max(1), h as u64 % self.buckets.max(1));
        }
        let q = ((self.magic as u128 * h as u128) >> 64) as u64;
        (q, h as u64 - q * self.buckets)
    }

    /// Words of the whole key index.
    pub fn words(&self) -> u64 {
        self.buckets * self.bucket_words()
    }

    /// The bucket of `key`'s `j`-th candidate, and the tag it has there.
    #[inline]
    pub fn place(&self, key: Feature, j: usize) -> (u64, u64) {
        let (q, b) = self.div_mod(self.hash.permute(key, j));
        (b, q << 2 | (j as u64 + 1))
    }

    /// The key whose tag in `bucket` is `tag` (not 0).
    pub fn key(&self, bucket: u64, tag: u64, shard: usize) -> Feature {
        // A tag whose hash bits are 0 is in no index this writer made (only a damaged one): it
        // names some key rather than none.
        let j = (tag & 3).max(1) as usize - 1;
        let h = (tag >> 2).wrapping_mul(self.buckets).wrapping_add(bucket);
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
            let at = start + i as u64 * (tb + vb);
            put(&mut words, at, tag, tb as u32);
            put(&mut words, at + tb, pack_value(slot.value, vb as u32), vb as u32);
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

/// At least 57 bits of `bytes` from bit `bit`, by one unaligned load: enough for a tag or a value
/// (branch-free, unlike a walk through words, which made lookups half again slower). `bytes`
/// holds at least 8 bytes from the byte of `bit` (a key index is followed by its stream's padding).
#[inline(always)]
fn bits57(bytes: &[u8], bit: u64) -> u64 {
    let at = (bit >> 3) as usize;
    debug_assert!(at + 8 <= bytes.len());
    // SAFETY: callers pass `PackedKeys::bucket`'s slice, a bucket and the 8 bytes after it, and
    // a field's first byte lies within the bucket.
    let eight: [u8; 8] = unsafe { bytes.get_unchecked(at..at + 8) }.try_into().expect("8 bytes");
    u64::from_le_bytes(eight) >> (bit & 7)
}

/// What one candidate bucket says of a key ([`PackedKeys::probe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Found(u32),
    Absent,
    /// Not in this bucket, which is full: the key may be in the next.
    Full,
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
        for j in 0..HASH_FUNCTIONS {
            match self.probe(key, j) {
                Probe::Found(v) => return Some(v),
                Probe::Absent => return None,
                Probe::Full => {}
            }
        }
        None
    }

    /// What `key`'s `j`-th candidate bucket says of it: its value, that it is in no bucket (an
    /// empty slot ends the search: keys fill their buckets in order), or that the next bucket
    /// must be looked at. [`PackedKeys::lookup`] probes the buckets in turn; a caller with many
    /// keys probes them bucket by bucket, prefetching each key's next bucket
    /// ([`PackedKeys::bucket_ends`]) before it is read.
    #[inline]
    pub fn probe(&self, key: Feature, j: usize) -> Probe {
        let c = &self.code;
        if c.buckets == 0 {
            return Probe::Absent;
        }
        let (tb, vb) = (c.tag_bits as u64, c.value_bits);
        let (tag_mask, value_mask) = ((1u64 << tb) - 1, (1u64 << vb) - 1);
        let (b, tag) = c.place(key, j);
        let bucket = self.bucket(b);
        let mut at = 0;
        for _ in 0..BUCKET_SLOTS {
            let t = bits57(bucket, at) & tag_mask;
            if t == tag {
                return Probe::Found(unpack_value(bits57(bucket, at + tb) & value_mask, vb));
            }
            if t == 0 {
                return Probe::Absent;
            }
            at += tb + vb as u64;
        }
        Probe::Full
    }

    /// The first and last words of `key`'s `j`-th candidate bucket (for a prefetch: a bucket may
    /// straddle two cache lines).
    #[inline]
    pub fn bucket_ends(&self, key: Feature, j: usize) -> Option<[&'a u32; 2]> {
        if self.code.buckets == 0 {
            return None;
        }
        let (b, bw) = (self.code.place(key, j).0 as usize, self.code.bucket_words() as usize);
        Some([self.words.get(b * bw)?, self.words.get(b * bw + bw - 1)?])
    }

    /// Every occupied slot, key and value, in slot order.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        let c = self.code;
        let (tb, vb) = (c.tag_bits as u64, c.value_bits);
        let (tag_mask, value_mask) = ((1u64 << tb) - 1, (1u64 << vb) - 1);
        (0..c.buckets).flat_map(move |b| {
            let bucket = self.bucket(b);
            (0..BUCKET_SLOTS as u64).map_while(move |i| {
                let at = i * (tb + vb as u64);
                let tag = bits57(bucket, at) & tag_mask;
                (tag != 0).then(|| Slot {
                    key: c.key(b, tag, self.shard),
                    value: unpack_value(bits57(bucket, at + tb) & value_mask, vb),
                })
            })
        })
    }

    /// Bucket `b`'s bytes and the 8 after them (the next bucket's, or the stream's padding), by one
    /// bounds check: what `bits57` may read of any of its fields.
    #[inline]
    fn bucket(&self, b: u64) -> &'a [u8] {
        let (b, bw) = (b as usize, self.code.bucket_words() as usize);
        let bytes: &'a [u8] = bytemuck::cast_slice(self.words);
        &bytes[b * bw * 4..(b * bw + bw + PAD_WORDS) * 4]
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

    /// Fuzzing (index_open): a damaged tag whose hash bits are 0 underflowed the hash's index.
    #[test]
    fn regression_a_tag_with_no_hash_names_a_key_without_panicking() {
        let code = KeyCode::new(KeyHash::new(6), 1 << 40, 24);
        let _ = code.key(3, 4, 5);
        let _ = code.key(u64::MAX, u64::MAX >> 30, 5);
    }

    /// The multiplication gives the division's quotient and remainder, for every bucket count a
    /// shard can have and hashes at the ends of the range.
    #[test]
    fn div_mod_is_a_division() {
        let mut rng = StdRng::seed_from_u64(3);
        let counts = [1u64, 2, 3, 7, 5500, 65_537, 1 << 20, (1 << 31) + 11, u32::MAX as u64, 1 << 33];
        for &buckets in counts.iter().chain(&[rng.random::<u32>() as u64 | 1]) {
            let code = KeyCode::new(KeyHash::new(0), buckets, 8);
            for h in [0, 1, u32::MAX, u32::MAX - 1, buckets as u32, (buckets as u32).wrapping_sub(1)]
                .into_iter()
                .chain((0..10_000).map(|_| rng.random()))
            {
                assert_eq!(code.div_mod(h), (h as u64 / buckets, h as u64 % buckets), "{h} / {buckets}");
            }
        }
    }
}
