//! The slab-list dynamic multi-value hash table of `cuda/slab_hash.cuh` (after SlabHash, Ashkiani
//! et al. 2018), on the CPU: the layout both sides share, the CPU twin of `slab_apply` and a reader
//! of a table's contents.
//!
//! The twin does the operations one after another, exactly as one warp of one GPU launch does
//! them (a warp takes its operations in index order and its allocator state starts afresh each
//! launch), so the same operations give the same bytes: every word of every slab and of the
//! allocator's bitmaps. `tests/gpu.rs` compares them, and compares many warps at once (whose
//! order is the hardware's) with a `HashMap` through [`SlabMemory::live_pairs`].

/// Words of a slab (128 bytes, one cache line; a warp's lane each).
pub const SLAB_WORDS: usize = 32;
/// (key, value) pairs of a slab: words 0..30; word 30 is unused.
pub const SLAB_PAIRS: usize = 15;
/// The word holding the next slab's index in the pool.
pub const SLAB_NEXT_WORD: usize = 31;
/// An empty key or value (a fresh slab is all ones); never a key.
pub const SLAB_EMPTY: u32 = u32::MAX;
/// The value of a deleted pair; values must be below it.
pub const SLAB_DELETED: u32 = u32::MAX - 1;
/// The end of a slab list.
pub const SLAB_NULL: u32 = u32::MAX;
/// Slabs of a memory block of the allocator (one bit each in 32 bitmap words).
pub const SLAB_BLOCK_SLABS: usize = 1024;
/// Full memory blocks a warp tries before an insertion fails.
pub const SLAB_MAX_ATTEMPTS: u32 = 64;
/// Status bits, as in `cuda/slab_hash.cuh`.
pub const STATUS_SLAB_POOL_EXHAUSTED: u32 = 1;
pub const STATUS_SLAB_BAD_PAIR: u32 = 2;
pub const STATUS_SLAB_BAD_OP: u32 = 4;

/// One operation, as `slab_apply` takes it: a code, a key and a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlabOp {
    /// Store the pair (another copy if it is there already). Result: 1 if stored.
    Insert { key: u32, value: u32 },
    /// Delete one live copy of the pair. Result: 1 if there was one.
    Delete { key: u32, value: u32 },
    /// Result: the number of live values of the key.
    Search { key: u32 },
}

impl SlabOp {
    /// The kernel's encoding: (`SLAB_INSERT`, `SLAB_DELETE` or `SLAB_SEARCH`, key, value).
    pub fn encode(&self) -> (u32, u32, u32) {
        match *self {
            SlabOp::Insert { key, value } => (0, key, value),
            SlabOp::Delete { key, value } => (1, key, value),
            SlabOp::Search { key } => (2, key, 0),
        }
    }
}

/// A table's shape: base slabs (one per bucket), memory blocks of the pool, the hash's seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlabConfig {
    pub buckets: u32,
    pub blocks: u32,
    pub seed: u32,
}

impl SlabConfig {
    /// A table for `pairs` pairs at a load of `load` slabs' worth of pairs a bucket, with a pool
    /// of `pool_factor` times the slabs the buckets' lists are expected to take past their first
    /// (a bucket's pairs are Poisson-distributed), and at least one block.
    pub fn for_pairs(pairs: u64, load: f64, pool_factor: f64) -> Self {
        let slabs = (pairs as f64 / SLAB_PAIRS as f64).ceil();
        let buckets = (slabs / load).ceil().max(1.0);
        let overflow = buckets * (expected_slabs(pairs as f64 / buckets) - 1.0) * pool_factor;
        let blocks = (overflow / SLAB_BLOCK_SLABS as f64).ceil().max(1.0);
        Self { buckets: buckets as u32, blocks: blocks as u32, seed: 0x5eed_51ab }
    }

    /// Bytes of the base slabs, the pool and the bitmaps.
    pub fn bytes(&self) -> u64 {
        let slabs = self.buckets as u64 + self.blocks as u64 * SLAB_BLOCK_SLABS as u64;
        slabs * SLAB_WORDS as u64 * 4 + self.blocks as u64 * 32 * 4
    }

    /// The bucket of `key` (`slab_bucket`).
    pub fn bucket(&self, key: u32) -> u32 {
        let mut h = key ^ self.seed;
        h ^= h >> 16;
        h = h.wrapping_mul(0x7feb_352d);
        h ^= h >> 15;
        h = h.wrapping_mul(0x846c_a68b);
        h ^= h >> 16;
        ((h as u64 * self.buckets as u64) >> 32) as u32
    }

    /// The memory block warp `warp` tries on its `attempt`th try (`slab_resident_block`).
    pub(crate) fn resident_block(&self, warp: u32, attempt: u32) -> u32 {
        let mut h = warp.wrapping_mul(0x9e37_79b9).wrapping_add(attempt.wrapping_mul(0x85eb_ca6b));
        h ^= h >> 15;
        h = h.wrapping_mul(0x2c1b_3c6d);
        h ^= h >> 12;
        ((h as u64 * self.blocks as u64) >> 32) as u32
    }
}

/// The expected slabs of a bucket holding Poisson(`mean`) pairs: E[max(1, ceil(X / 15))].
fn expected_slabs(mean: f64) -> f64 {
    let last = (mean + 10.0 * mean.sqrt() + 30.0) as u64;
    let (mut p, mut sum) = ((-mean).exp(), 0.0);
    for k in 0..=last {
        if k > 0 {
            p *= mean / k as f64;
        }
        sum += p * (k.div_ceil(SLAB_PAIRS as u64).max(1)) as f64;
    }
    sum
}

/// Every word of a table, as the GPU holds it: the base slabs, the pool, the bitmaps and the
/// status word. A new table is all ones but the bitmaps (no slab taken).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlabMemory {
    pub config: SlabConfig,
    pub buckets: Vec<u32>,
    pub pool: Vec<u32>,
    pub bitmaps: Vec<u32>,
    pub status: u32,
}

/// Where a slab is: a bucket's base slab, or a slab of the pool.
#[derive(Debug, Clone, Copy)]
enum SlabRef {
    Base(u32),
    Pool(u32),
}

/// The allocator state of one warp during one launch.
struct Allocator {
    resident: u32,
    attempt: u32,
}

impl SlabMemory {
    pub fn new(config: SlabConfig) -> Self {
        Self {
            config,
            buckets: vec![SLAB_EMPTY; config.buckets as usize * SLAB_WORDS],
            pool: vec![SLAB_EMPTY; config.blocks as usize * SLAB_BLOCK_SLABS * SLAB_WORDS],
            bitmaps: vec![0; config.blocks as usize * 32],
            status: 0,
        }
    }

    fn slab(&self, at: SlabRef) -> &[u32] {
        match at {
            SlabRef::Base(b) => &self.buckets[b as usize * SLAB_WORDS..][..SLAB_WORDS],
            SlabRef::Pool(p) => &self.pool[p as usize * SLAB_WORDS..][..SLAB_WORDS],
        }
    }

    fn slab_mut(&mut self, at: SlabRef) -> &mut [u32] {
        match at {
            SlabRef::Base(b) => &mut self.buckets[b as usize * SLAB_WORDS..][..SLAB_WORDS],
            SlabRef::Pool(p) => &mut self.pool[p as usize * SLAB_WORDS..][..SLAB_WORDS],
        }
    }

    /// The slabs of `bucket`'s list, in order.
    fn chain(&self, bucket: u32) -> Vec<SlabRef> {
        let mut out = vec![SlabRef::Base(bucket)];
        loop {
            let next = self.slab(*out.last().expect("not empty"))[SLAB_NEXT_WORD];
            if next == SLAB_NULL {
                return out;
            }
            out.push(SlabRef::Pool(next));
        }
    }

    /// Does `ops` as one warp of one launch of `slab_apply` does them, in order, and returns their
    /// results.
    pub fn apply(&mut self, ops: &[SlabOp]) -> Vec<u32> {
        let mut alloc = Allocator { resident: self.config.resident_block(0, 0), attempt: 0 };
        ops.iter()
            .map(|op| {
                let (code, key, value) = op.encode();
                if key == SLAB_EMPTY || (code != 2 && value >= SLAB_DELETED) {
                    self.status |= STATUS_SLAB_BAD_PAIR;
                    return 0;
                }
                match *op {
                    SlabOp::Insert { key, value } => {
                        let stored = self.insert(key, value, &mut alloc);
                        if !stored {
                            self.status |= STATUS_SLAB_POOL_EXHAUSTED;
                        }
                        stored as u32
                    }
                    SlabOp::Delete { key, value } => self.delete(key, value) as u32,
                    SlabOp::Search { key } => self.search(key),
                }
            })
            .collect()
    }

    fn insert(&mut self, key: u32, value: u32, alloc: &mut Allocator) -> bool {
        let chain = self.chain(self.config.bucket(key));
        for &at in &chain {
            let slab = self.slab_mut(at);
            if let Some(p) = (0..SLAB_PAIRS).find(|&p| slab[2 * p] == SLAB_EMPTY) {
                slab[2 * p] = key;
                slab[2 * p + 1] = value;
                return true;
            }
        }
        let Some(fresh) = self.allocate(alloc) else { return false };
        let last = *chain.last().expect("not empty");
        self.slab_mut(last)[SLAB_NEXT_WORD] = fresh;
        let slab = self.slab_mut(SlabRef::Pool(fresh));
        slab.fill(SLAB_EMPTY);
        slab[0] = key;
        slab[1] = value;
        true
    }

    /// `slab_allocate`: the first bitmap word of the resident block with a free bit, its lowest
    /// free bit.
    fn allocate(&mut self, alloc: &mut Allocator) -> Option<u32> {
        while alloc.attempt < SLAB_MAX_ATTEMPTS {
            let block = alloc.resident as usize;
            let words = &mut self.bitmaps[block * 32..][..32];
            match words.iter().position(|&w| w != u32::MAX) {
                Some(word) => {
                    let bit = (!words[word]).trailing_zeros();
                    words[word] |= 1 << bit;
                    return Some((block * SLAB_BLOCK_SLABS + word * 32) as u32 + bit);
                }
                None => {
                    alloc.attempt += 1;
                    alloc.resident = self.config.resident_block(0, alloc.attempt);
                }
            }
        }
        None
    }

    fn delete(&mut self, key: u32, value: u32) -> bool {
        for at in self.chain(self.config.bucket(key)) {
            let slab = self.slab_mut(at);
            if let Some(p) = (0..SLAB_PAIRS).find(|&p| slab[2 * p] == key && slab[2 * p + 1] == value) {
                slab[2 * p + 1] = SLAB_DELETED;
                return true;
            }
        }
        false
    }

    fn search(&self, key: u32) -> u32 {
        let live = |s: &[u32]| (0..SLAB_PAIRS).filter(|&p| s[2 * p] == key && s[2 * p + 1] < SLAB_DELETED).count();
        self.chain(self.config.bucket(key)).into_iter().map(|at| live(self.slab(at)) as u32).sum()
    }

    /// Every live pair, sorted: what the table holds, whatever order made it.
    pub fn live_pairs(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        for b in 0..self.config.buckets {
            for at in self.chain(b) {
                let s = self.slab(at);
                out.extend(
                    (0..SLAB_PAIRS)
                        .map(|p| (s[2 * p], s[2 * p + 1]))
                        .filter(|&(k, v)| k != SLAB_EMPTY && v < SLAB_DELETED),
                );
            }
        }
        out.sort_unstable();
        out
    }

    /// Slabs of the pool taken (bits set in the bitmaps).
    pub fn pool_slabs_taken(&self) -> u64 {
        self.bitmaps.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// The paper's memory utilization: bytes of live pairs over bytes of slabs in use.
    pub fn memory_utilization(&self) -> f64 {
        let slabs = self.config.buckets as u64 + self.pool_slabs_taken();
        self.live_pairs().len() as f64 * 8.0 / (slabs as f64 * (SLAB_WORDS * 4) as f64)
    }

    /// The lists are whole: every pool slab linked from a list is taken in the bitmaps, none is
    /// linked twice, and every pair is empty, live or deleted with a key. An error says what is
    /// wrong.
    pub fn check(&self) -> Result<(), String> {
        let mut linked = vec![false; self.pool.len() / SLAB_WORDS];
        for b in 0..self.config.buckets {
            for at in self.chain(b).into_iter().skip(1) {
                let SlabRef::Pool(p) = at else { unreachable!("only the first slab is a base slab") };
                if std::mem::replace(&mut linked[p as usize], true) {
                    return Err(format!("pool slab {p} is linked twice"));
                }
                if self.bitmaps[p as usize / 32] & (1 << (p % 32)) == 0 {
                    return Err(format!("pool slab {p} is linked but free in its bitmap"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use std::collections::HashMap;

    /// A HashMap of multisets, the reference.
    fn reference(ops: &[SlabOp]) -> (HashMap<u32, Vec<u32>>, Vec<u32>) {
        let mut m: HashMap<u32, Vec<u32>> = HashMap::new();
        let results = ops
            .iter()
            .map(|op| match *op {
                SlabOp::Insert { key, value } => {
                    m.entry(key).or_default().push(value);
                    1
                }
                SlabOp::Delete { key, value } => {
                    let list = m.entry(key).or_default();
                    match list.iter().position(|&v| v == value) {
                        Some(i) => {
                            list.swap_remove(i);
                            1
                        }
                        None => 0,
                    }
                }
                SlabOp::Search { key } => m.get(&key).map_or(0, |l| l.len() as u32),
            })
            .collect();
        (m, results)
    }

    fn pairs_of(m: &HashMap<u32, Vec<u32>>) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = m.iter().flat_map(|(&k, l)| l.iter().map(move |&v| (k, v))).collect();
        out.sort_unstable();
        out
    }

    /// Random operations on few keys (long lists, repeated pairs, deletions of absent pairs) give
    /// the HashMap's results and contents, and the lists stay whole.
    #[test]
    fn operations_equal_a_hashmap() {
        let mut rng = StdRng::seed_from_u64(3);
        for buckets in [1, 7, 100] {
            let config = SlabConfig { buckets, blocks: 2, seed: 9 };
            let mut table = SlabMemory::new(config);
            let ops: Vec<SlabOp> = (0..20_000)
                .map(|_| {
                    let (key, value) = (rng.random_range(0..300u32), rng.random_range(0..20u32));
                    match rng.random_range(0..10) {
                        0..5 => SlabOp::Insert { key, value },
                        5..8 => SlabOp::Delete { key, value },
                        _ => SlabOp::Search { key },
                    }
                })
                .collect();
            let (expected, results) = reference(&ops);
            assert_eq!(table.apply(&ops), results, "{buckets} buckets");
            assert_eq!(table.live_pairs(), pairs_of(&expected), "{buckets} buckets");
            assert_eq!(table.status, 0);
            table.check().unwrap();
        }
    }

    /// A pool too small for the pairs: the insertions that find no slab fail, with the status bit,
    /// and the others are all there.
    #[test]
    fn a_full_pool_fails_insertions_with_a_status() {
        let mut table = SlabMemory::new(SlabConfig { buckets: 1, blocks: 1, seed: 0 });
        let ops: Vec<SlabOp> = (0..20_000).map(|i| SlabOp::Insert { key: i, value: i }).collect();
        let results = table.apply(&ops);
        let stored = results.iter().filter(|&&r| r == 1).count();
        assert_eq!(stored, SLAB_PAIRS * (1 + SLAB_BLOCK_SLABS));
        assert_eq!(table.status, STATUS_SLAB_POOL_EXHAUSTED);
        assert_eq!(table.live_pairs().len(), stored);
        assert_eq!(table.pool_slabs_taken(), SLAB_BLOCK_SLABS as u64);
    }

    /// The reserved key and values are refused with a status bit, and change nothing.
    #[test]
    fn reserved_pairs_are_refused() {
        let mut table = SlabMemory::new(SlabConfig { buckets: 4, blocks: 1, seed: 0 });
        let fresh = table.clone();
        let ops = [
            SlabOp::Insert { key: SLAB_EMPTY, value: 1 },
            SlabOp::Insert { key: 1, value: SLAB_DELETED },
            SlabOp::Delete { key: 1, value: SLAB_EMPTY },
        ];
        assert_eq!(table.apply(&ops), [0, 0, 0]);
        assert_eq!(table.status, STATUS_SLAB_BAD_PAIR);
        table.status = 0;
        assert_eq!(table, fresh);
    }

    /// A deleted pair is a tombstone: its key stays, searches and deletions pass over it, and the
    /// next insertion takes an empty pair after it.
    #[test]
    fn deletions_leave_tombstones() {
        let config = SlabConfig { buckets: 1, blocks: 1, seed: 0 };
        let mut table = SlabMemory::new(config);
        let r = table.apply(&[
            SlabOp::Insert { key: 5, value: 1 },
            SlabOp::Delete { key: 5, value: 1 },
            SlabOp::Delete { key: 5, value: 1 },
            SlabOp::Insert { key: 6, value: 2 },
            SlabOp::Search { key: 5 },
        ]);
        assert_eq!(r, [1, 1, 0, 1, 0]);
        assert_eq!(&table.buckets[..4], [5, SLAB_DELETED, 6, 2]);
    }

    /// The pool is sized for the lists' expected lengths: one slab a bucket when they are short,
    /// about mean / 15 + 1/2 when they are long.
    #[test]
    fn expected_list_lengths() {
        assert!((expected_slabs(0.5) - 1.0).abs() < 1e-9);
        assert!((expected_slabs(150.0) - 10.5).abs() < 0.1, "{}", expected_slabs(150.0));
        let config = SlabConfig::for_pairs(1_500_000, 1.0, 1.0);
        assert_eq!(config.buckets, 100_000);
        let overflow = config.blocks as f64 * SLAB_BLOCK_SLABS as f64 / 100_000.0;
        assert!((0.4..0.7).contains(&overflow), "{overflow}");
    }

    /// The bucket hash spreads keys evenly, and a warp's resident blocks cover the pool.
    #[test]
    fn hashes_spread_over_their_range() {
        let config = SlabConfig { buckets: 1000, blocks: 50, seed: 1 };
        let mut counts = vec![0u32; 1000];
        for k in 0..100_000u32 {
            counts[config.bucket(k) as usize] += 1;
        }
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*lo >= 50 && *hi < 160, "{lo}..{hi}");
        let blocks: std::collections::HashSet<u32> = (0..64).map(|a| config.resident_block(0, a)).collect();
        assert!(blocks.len() > 30 && blocks.iter().all(|&b| b < 50), "{blocks:?}");
    }
}
