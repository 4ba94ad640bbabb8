//! The static key index of one shard: a bucketed cuckoo hash table (BCHT, Awad et al. 2022).
//!
//! Buckets of [`BUCKET_SLOTS`] slots; a slot is a (feature, value) pair. A key may live in any of
//! its [`HASH_FUNCTIONS`] candidate buckets ([`KeyHash::bucket`]). This module builds the table
//! with whole keys and values; the index stores it packed (`index::packed_keys`: per slot the
//! key's quotient and a value as wide as the shard needs), and looks keys up there.
//!
//! Invariants that lookups (CPU and GPU alike) rely on:
//! - slots of a bucket fill from the front and never empty again, so empty slots form a suffix;
//! - a key stored in its `j`-th candidate bucket implies its candidates `0..j` are full.
//!
//! So a lookup reads candidate buckets in order and stops at the key or at the first empty slot:
//! at most 3 bucket reads, and usually 1 for a feature that is not in the index.
//!
//! The table is built once, in rounds that do not depend on the order keys are visited in (so the
//! GPU can run them in parallel), then a cuckoo walk for the few keys left over whose choices come
//! from a fixed-seed generator: the same keys always give the same bytes (see [`build`]).

use crate::sketch::{Feature, NO_FEATURE};

/// Slots per bucket: as the table is built, 16 slots of 8 bytes, one 128-byte cache line; stored,
/// 16 packed slots (`index::packed_keys`).
pub const BUCKET_SLOTS: usize = 16;
/// Candidate buckets per key.
pub const HASH_FUNCTIONS: usize = 3;
/// Seeds of the bucket hash functions (part of the index format).
pub const BUCKET_SEEDS: [u32; HASH_FUNCTIONS] = [0x9e37_79b9, 0x85eb_ca6b, 0xc2b2_ae35];
/// Key of an empty slot.
pub const EMPTY_KEY: Feature = NO_FEATURE;
/// Load factor the builder aims at; it grows the table when a cuckoo walk fails.
pub(crate) const TARGET_LOAD: f64 = 0.98;
/// Evictions one insertion may cause before the builder gives up on this table size.
const MAX_EVICTIONS: usize = 2_000;

/// One slot: a feature and its value (an inline location or an offset, see `index::shard`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Slot {
    pub key: Feature,
    pub value: u32,
}

pub const EMPTY_SLOT: Slot = Slot { key: EMPTY_KEY, value: 0 };

/// Multipliers of [`KeyHash::permute`] (odd, so invertible modulo any power of two): murmur3's.
const MIX: [u32; 2] = [0x85eb_ca6b, 0xc2b2_ae35];

/// How a shard's keys hash into its table. The low `shard_bits` of a feature name its shard
/// (`index::format::shard_of`), so within a shard only the bits above them tell keys apart: the
/// *local key*, of `32 - shard_bits` bits. Each of the [`HASH_FUNCTIONS`] hashes is a permutation of
/// the local keys (xorshifts and odd multipliers within the domain's width), and a key's `j`-th
/// candidate bucket is its hash modulo the buckets. So the hash is the bucket and a quotient
/// together, and a slot need only store the quotient and `j` to name its key
/// (`index::packed_keys`): the key is `KeyHash::key_of` the bucket and the quotient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash {
    shard_bits: u32,
}

impl KeyHash {
    /// For an index of `1 << shard_bits` shards (at most 2^31: a local key needs a bit).
    pub const fn new(shard_bits: u32) -> Self {
        assert!(shard_bits < 32, "a local key needs at least one bit");
        Self { shard_bits }
    }

    /// Width of a local key.
    #[inline]
    pub(crate) fn domain_bits(&self) -> u32 {
        32 - self.shard_bits
    }

    #[inline]
    fn mask(&self) -> u32 {
        u32::MAX >> self.shard_bits
    }

    /// The two xorshift amounts: at least one bit, so that every step is invertible.
    #[inline]
    fn shifts(&self) -> (u32, u32) {
        let d = self.domain_bits();
        (d.div_ceil(2), d.div_ceil(3))
    }

    /// The `j`-th hash of `key`: a permutation of the local keys (the device twin is `permute` in
    /// `cuda/condense.cuh`).
    #[inline]
    pub(crate) fn permute(&self, key: Feature, j: usize) -> u32 {
        let (mask, (s1, s2)) = (self.mask(), self.shifts());
        let mut h = ((key >> self.shard_bits) ^ BUCKET_SEEDS[j]) & mask;
        h ^= h >> s1;
        h = h.wrapping_mul(MIX[0]) & mask;
        h ^= h >> s2;
        h = h.wrapping_mul(MIX[1]) & mask;
        h ^ (h >> s1)
    }

    /// The local key whose `j`-th hash is `h` (the inverse of [`KeyHash::permute`]).
    pub(crate) fn unpermute(&self, h: u32, j: usize) -> u32 {
        let (mask, (s1, s2)) = (self.mask(), self.shifts());
        let unshift = |y: u32, s: u32| {
            let mut x = y;
            for _ in 0..self.domain_bits().div_ceil(s) {
                x = y ^ (x >> s);
            }
            x
        };
        let mut x = unshift(h & mask, s1);
        x = x.wrapping_mul(inverse(MIX[1])) & mask;
        x = unshift(x, s2);
        x = x.wrapping_mul(inverse(MIX[0])) & mask;
        x = unshift(x, s1);
        (x ^ BUCKET_SEEDS[j]) & mask
    }

    /// The feature of shard `shard` whose local key is `local`.
    #[inline]
    pub(crate) fn key_of(&self, local: u32, shard: usize) -> Feature {
        ((local as u64) << self.shard_bits) as u32 | shard as u32
    }

    /// The `j`-th candidate bucket of `key` in a table of `n_buckets` buckets.
    #[inline]
    pub fn bucket(&self, key: Feature, j: usize, n_buckets: usize) -> usize {
        self.permute(key, j) as usize % n_buckets
    }
}

/// The inverse of odd `m` modulo 2^32 (Newton's iteration doubles the correct bits each step).
const fn inverse(m: u32) -> u32 {
    let mut x = m;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u32.wrapping_sub(m.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// The value stored for `key`, if any. `slots` holds whole buckets (the builder's table, which the
/// tests read; the stored one is read by `index::packed_keys`).
#[cfg(test)]
pub fn lookup(slots: &[Slot], key: Feature, hash: KeyHash) -> Option<u32> {
    let n_buckets = slots.len() / BUCKET_SLOTS;
    if n_buckets == 0 {
        return None;
    }
    for j in 0..HASH_FUNCTIONS {
        let b = hash.bucket(key, j, n_buckets);
        for slot in &slots[b * BUCKET_SLOTS..(b + 1) * BUCKET_SLOTS] {
            if slot.key == key {
                return Some(slot.value);
            }
            if slot.key == EMPTY_KEY {
                return None;
            }
        }
    }
    None
}

/// Buckets of the first table tried for `n` keys.
pub fn initial_buckets(n: usize) -> usize {
    if n == 0 { 0 } else { ((n as f64 / (BUCKET_SLOTS as f64 * TARGET_LOAD)).ceil() as usize).max(1) }
}

/// The next table size to try after a failed one.
pub(crate) fn grown_buckets(n_buckets: usize) -> usize {
    n_buckets + n_buckets / 32 + 1
}

/// Builds the table for `entries`: (key, value) pairs with distinct keys, none of them [`EMPTY_KEY`],
/// in ascending key order. An empty input gives an empty table.
///
/// Two phases, both deterministic:
/// 1. [`place_rounds`]: in round `j` every key not yet placed goes to its `j`-th candidate bucket if
///    that has room, smallest keys first. The result does not depend on the order keys are visited
///    in, so the GPU runs it in parallel (`place_round` in `cuda/condense.cu`) and gets these bytes.
/// 2. [`place_stragglers`]: the few keys whose three buckets filled up (about 3% at load 0.98) go
///    through a cuckoo walk, sequentially, with a fixed-seed generator.
///
/// If a walk fails, the table grows by about 3% and both phases start again.
pub fn build(entries: &[Slot], hash: KeyHash) -> Vec<Slot> {
    let keys: Vec<Feature> = entries.iter().map(|e| e.key).collect();
    let mut slots = place(&keys, hash);
    for s in slots.iter_mut().filter(|s| s.key != EMPTY_KEY) {
        s.value = entries[s.value as usize].value;
    }
    slots
}

/// Places ascending, distinct `keys`; each occupied slot's value is the index of its key.
pub fn place(keys: &[Feature], hash: KeyHash) -> Vec<Slot> {
    let mut n_buckets = initial_buckets(keys.len());
    loop {
        let (mut slots, stragglers) = place_rounds(keys, n_buckets, hash);
        if place_stragglers(&mut slots, &stragglers, hash) {
            return slots;
        }
        n_buckets = grown_buckets(n_buckets);
    }
}

/// Phase 1 of [`build`] on a table of `n_buckets`: the slots (values are key indexes) and the keys
/// left over, ascending, as slots.
pub fn place_rounds(keys: &[Feature], n_buckets: usize, hash: KeyHash) -> (Vec<Slot>, Vec<Slot>) {
    let mut slots = vec![EMPTY_SLOT; n_buckets * BUCKET_SLOTS];
    let mut fill = vec![0u8; n_buckets];
    let mut left: Vec<Slot> = keys.iter().enumerate().map(|(i, &key)| Slot { key, value: i as u32 }).collect();
    for j in 0..HASH_FUNCTIONS {
        left.retain(|&s| {
            let b = hash.bucket(s.key, j, n_buckets);
            if (fill[b] as usize) < BUCKET_SLOTS {
                slots[b * BUCKET_SLOTS + fill[b] as usize] = s;
                fill[b] += 1;
                false
            } else {
                true
            }
        });
    }
    (slots, left)
}

/// Phase 2 of [`build`]: places `stragglers` (ascending) into `slots` by cuckoo walks. False if a
/// walk gave up: the table must grow.
pub fn place_stragglers(slots: &mut [Slot], stragglers: &[Slot], hash: KeyHash) -> bool {
    place_stragglers_logged(slots, stragglers, hash, &mut Vec::new())
}

/// Undoes a walk of [`place_stragglers_logged`] from its log: `slots` as they were before it.
pub fn undo_walk(slots: &mut [Slot], undo: &[(usize, Slot)]) {
    for &(i, old) in undo.iter().rev() {
        slots[i] = old;
    }
}

/// [`place_stragglers`], recording every slot it overwrites, with its old content, in `undo`: a
/// failed walk leaves moved slots (and one key in hand), and the GPU build walks in its download
/// buffer, so it rolls back from the log instead of keeping a copy of every shard.
pub fn place_stragglers_logged(
    slots: &mut [Slot],
    stragglers: &[Slot],
    hash: KeyHash,
    undo: &mut Vec<(usize, Slot)>,
) -> bool {
    let n_buckets = slots.len() / BUCKET_SLOTS;
    if stragglers.is_empty() {
        return true;
    }
    let mut fill: Vec<u8> = slots
        .chunks(BUCKET_SLOTS)
        .map(|b| b.iter().position(|s| s.key == EMPTY_KEY).unwrap_or(BUCKET_SLOTS) as u8)
        .collect();
    let mut rng = XorShift64(0x2545_f491_4f6c_dd1d ^ n_buckets as u64);
    for &entry in stragglers {
        let mut cur = entry;
        // The bucket `cur` was just evicted from, which it must not go back to.
        let mut from = usize::MAX;
        let mut placed = false;
        for _ in 0..MAX_EVICTIONS {
            let candidates: [usize; HASH_FUNCTIONS] = std::array::from_fn(|j| hash.bucket(cur.key, j, n_buckets));
            if let Some(&b) = candidates.iter().find(|&&b| b != from && (fill[b] as usize) < BUCKET_SLOTS) {
                let at = b * BUCKET_SLOTS + fill[b] as usize;
                undo.push((at, slots[at]));
                slots[at] = cur;
                fill[b] += 1;
                placed = true;
                break;
            }
            // Every candidate is full: swap `cur` with a random slot of a random other candidate.
            let others: Vec<usize> = candidates.iter().copied().filter(|&b| b != from).collect();
            if others.is_empty() {
                return false;
            }
            let b = others[(rng.next() % others.len() as u64) as usize];
            let s = b * BUCKET_SLOTS + (rng.next() % BUCKET_SLOTS as u64) as usize;
            undo.push((s, slots[s]));
            std::mem::swap(&mut slots[s], &mut cur);
            from = b;
        }
        if !placed {
            return false;
        }
    }
    true
}

/// A small fixed-seed generator: the builder's choices must be the same on every run.
struct XorShift64(u64);

impl XorShift64 {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// One shard: every key is local.
    const H: KeyHash = KeyHash { shard_bits: 0 };

    /// Each hash is a permutation of its shard's local keys, undone by `unpermute`, at every
    /// width; keys of one shard spread over the buckets.
    #[test]
    fn hashes_are_permutations_of_the_local_keys() {
        for shard_bits in [0, 1, 6, 12, 31] {
            let hash = KeyHash::new(shard_bits);
            let mut rng = StdRng::seed_from_u64(shard_bits as u64);
            for _ in 0..20_000 {
                let key: u32 = rng.random();
                let (shard, local) = (key as u64 & ((1 << shard_bits) - 1), key >> shard_bits);
                for j in 0..HASH_FUNCTIONS {
                    let h = hash.permute(key, j);
                    assert!(h as u64 >> hash.domain_bits() == 0);
                    assert_eq!(hash.unpermute(h, j), local);
                    assert_eq!(hash.key_of(hash.unpermute(h, j), shard as usize), key);
                }
            }
        }
        // A small domain, whole: a bijection.
        let hash = KeyHash::new(20);
        let mut seen = vec![false; 1 << 12];
        for local in 0..1u32 << 12 {
            let h = hash.permute(local << 20 | 5, 1) as usize;
            assert!(!seen[h]);
            seen[h] = true;
        }
        // Keys of one shard of 64 (the features of a sketch crowd the bottom of the range).
        let hash = KeyHash::new(6);
        let mut per_bucket = vec![0u32; 1000];
        for local in 0..64_000u32 {
            per_bucket[hash.bucket(local << 6 | 9, 0, 1000)] += 1;
        }
        assert!(per_bucket.iter().all(|&c| (30..100).contains(&c)), "{per_bucket:?}");
    }

    fn random_entries(n: usize, seed: u64) -> Vec<Slot> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut keys: Vec<u32> = (0..n).map(|_| rng.random_range(0..EMPTY_KEY)).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.iter().map(|&k| Slot { key: k, value: k.wrapping_mul(3) }).collect()
    }

    #[test]
    fn every_key_is_found_and_absent_keys_are_not() {
        for n in [0, 1, 15, 16, 17, 1000, 100_000] {
            let entries = random_entries(n, n as u64);
            let table = build(&entries, H);
            assert_eq!(table.len() % BUCKET_SLOTS, 0);
            for e in &entries {
                assert_eq!(lookup(&table, e.key, H), Some(e.value));
            }
            let present: std::collections::HashSet<u32> = entries.iter().map(|e| e.key).collect();
            let mut rng = StdRng::seed_from_u64(99);
            for _ in 0..10_000 {
                let k = rng.random_range(0..EMPTY_KEY);
                if !present.contains(&k) && !table.is_empty() {
                    assert_eq!(lookup(&table, k, H), None);
                }
            }
        }
    }

    #[test]
    fn reaches_the_target_load() {
        let entries = random_entries(200_000, 4);
        let table = build(&entries, H);
        let load = entries.len() as f64 / table.len() as f64;
        assert!(load > 0.9, "load {load}");
    }

    #[test]
    fn empty_slots_form_a_suffix_of_each_bucket() {
        let table = build(&random_entries(50_000, 5), H);
        for bucket in table.chunks(BUCKET_SLOTS) {
            let first_empty = bucket.iter().position(|s| s.key == EMPTY_KEY).unwrap_or(BUCKET_SLOTS);
            assert!(bucket[first_empty..].iter().all(|s| s.key == EMPTY_KEY));
        }
    }

    /// At the target load the rounds leave a few keys over, so the walk is exercised here.
    #[test]
    fn rounds_leave_stragglers_that_the_walk_places() {
        let entries = random_entries(100_000, 7);
        let keys: Vec<u32> = entries.iter().map(|e| e.key).collect();
        let (mut slots, left) = place_rounds(&keys, initial_buckets(keys.len()), H);
        assert!(!left.is_empty() && left.len() < keys.len() / 10, "{} left", left.len());
        assert!(place_stragglers(&mut slots, &left, H));
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(lookup(&slots, k, H), Some(i as u32));
        }
    }

    #[test]
    fn deterministic() {
        let entries = random_entries(30_000, 6);
        assert_eq!(build(&entries, H), build(&entries, H));
    }

    /// Regression: a table of a single bucket whose 3 candidates coincide must grow, not loop.
    #[test]
    fn regression_single_bucket_overflow_grows_the_table() {
        let entries = random_entries(17, 8);
        assert_eq!(entries.len(), 17);
        let table = build(&entries, H);
        assert!(table.len() >= 2 * BUCKET_SLOTS);
        for e in &entries {
            assert_eq!(lookup(&table, e.key, H), Some(e.value));
        }
    }
}
