//! A shard's key index as the index stores it: the BCHT of `index::bcht`, each slot packed to the
//! bits it needs, and no list offsets: a slot's list is found from its bucket's first bit and the
//! sizes its bucket's codes give (format version 10; format 9 kept a value of up to 24 bits a slot,
//! an offset or an inline location, and up to version 8 a slot was a whole feature and a 32-bit
//! value; up to version 11 lists started at whole entries).
//!
//! A bucket of [`BUCKET_SLOTS`] slots is `KeyCode::bucket_bits` bits of a little-endian stream
//! of `u32` words, bucket `b` from bit `b * bucket_bits` (format 11; up to format 10 each bucket
//! took whole words, a sixteenth of a bit a slot lost to the rounding on average): its **base**
//! (`base_bits`: the bit of the shard's stream where its lists start), then the slots one
//! after the other, each its tag (`tag_bits`) then its code (`SlotCodes::bits`), LSB first. A
//! slot's code lies beside its tag, so a lookup whose bucket was not prefetched (a key in its
//! second or third candidate) waits for one cache line, or two where its bucket straddles them.
//!
//! - A **tag** is 0 for an empty slot, else `quotient << 2 | (j + 1)`: the key's `j`-th hash is
//!   `quotient * buckets + bucket` ([`KeyHash`]: a permutation of the shard's local keys), so the
//!   bucket and the tag give the key back ([`PackedKeys::slots`]), and no two keys share a tag in a
//!   bucket. `j` is the first hash function whose candidate is the bucket (two may coincide), which
//!   is the one a lookup tries first. A tag needs the quotient's bits, about `32 - shard_bits -
//!   log2(buckets)`, and two: 16 bits in a shard of 6,000 buckets, where a whole key took 32.
//! - A **code** ([`SlotCodes`]) says what the slot's list is and how many bits it takes: a
//!   fixed list of 1 to `fixed` locations (no head: the code is its length), a list of 1 to `max -
//!   fixed` units that says what it is (a delta list, a clade, a longer fixed list with its head),
//!   or, for the code of all ones, an *escaped* list too long for the codes. A bucket's lists follow
//!   each other from its base in slot order, then its escaped lists, each after an entry holding
//!   its length in entries (`index::stored_shard` writes them). So a slot's list starts at the base
//!   plus the sizes of the slots before it: what the lookup has read anyway to find its tag.
//!   The writer picks each shard's code width, `fixed` and unit for the fewest bytes.
//!
//! The invariants of the BCHT hold slot for slot (empty slots are a suffix of their bucket), so a
//! lookup reads at most three buckets, usually one. Every shard's block has its stream's padding
//! words after the key index (at least [`PAD_WORDS`]), so reading a field of the last bucket
//! never passes the block. The device twin is `index_lookup` in `cuda/classify.cuh`.

use crate::index::bcht::{BUCKET_SLOTS, HASH_FUNCTIONS, KeyHash, Slot};
use crate::index::locations::{ListRef, PAD_WORDS, bits_for};
use crate::sketch::Feature;

/// What a shard's slot codes mean: `bits` wide; codes below `fixed` are fixed lists of code + 1
/// locations (`entry` bits each); codes from `fixed` below the escape ([`SlotCodes::escape`], all
/// ones) are lists that say what they are, of `code - fixed + 1` units of `unit` bits; the escape
/// is a list after the bucket's run.
///
/// The unit (format 12) is what a delta list is padded to: up to format 11 it was the entry, and
/// on the strain-rich GPU benchmark's collection the padding was a fifth of a delta list (12 of
/// 60 bits: an eighth of the index). A narrower unit spreads the lists' sizes over more codes;
/// the writer picks it with the codes, for the fewest bits (`index::stored_shard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCodes {
    pub bits: u32,
    pub fixed: u32,
    /// Bits of a stored entry (the layout's `stored_bits`).
    pub entry: u32,
    /// Bits of the unit a described list's size is counted in (1 to `entry`).
    pub unit: u32,
}

impl SlotCodes {
    /// Widest code: a `ListRef` kind holds fixed lengths to 239 and 16 escapes a bucket.
    pub(crate) const MAX_BITS: u32 = 8;

    /// Whether a stored shard's codes are ones this reader understands.
    pub fn valid(&self) -> bool {
        (1..=Self::MAX_BITS).contains(&self.bits)
            && (self.fixed as u64) <= self.escape()
            && (self.fixed as u64) <= ListRef::MAX_FIXED
            && (1..=64).contains(&self.entry)
            && (1..=self.entry).contains(&self.unit)
    }

    /// The escape code (all ones).
    #[inline]
    pub fn escape(&self) -> u64 {
        (1 << self.bits) - 1
    }

    /// Bits in its bucket's run of the list of a slot with code `c` (0 for an escaped one).
    #[inline]
    pub fn size(&self, c: u64) -> u64 {
        // Without branches (selects): a probe adds the sizes of the slots before its key's, and
        // fixed and described codes mix in a bucket, so branches here were mispredicted.
        let fixed = self.fixed as u64;
        let (count, unit) = match c < fixed {
            true => (c + 1, self.entry as u64),
            false => (c.wrapping_sub(fixed).wrapping_add(1), self.unit as u64),
        };
        let size = count.wrapping_mul(unit);
        if c < self.escape() { size } else { 0 }
    }

    /// The list of a slot with code `c` (not the escape) that starts at bit `start`.
    #[inline]
    pub(crate) fn list_at(&self, c: u64, start: u64) -> ListRef {
        match c < self.fixed as u64 {
            true => ListRef::fixed(start, c + 1),
            false => ListRef::described(start),
        }
    }

    /// The code of a list of `len` locations without a head, if there is one.
    pub(crate) fn of_fixed(&self, len: u64) -> Option<u64> {
        (len >= 1 && len <= self.fixed as u64).then(|| len - 1)
    }

    /// The code of a list of `bits` that says what it is, if there is one (else it is escaped).
    pub(crate) fn of_described(&self, bits: u64) -> Option<u64> {
        let c = self.fixed as u64 + bits.div_ceil(self.unit as u64).checked_sub(1)?;
        (c < self.escape()).then_some(c)
    }
}

/// Where a shard's buckets' lists start, as a line: bucket `b`'s base is `b * slope / 2^32 +
/// field - bias`, its field the distance from the line (format 11). A shard's lists spread
/// evenly over its buckets, so the field needs the bits of the largest distance (about 15 in bits,
/// format 12, on refs and on the GPU benchmark's collection, where a whole base took 23 to 30).
/// A line of 0 and 0 makes the field the base itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BaseLine {
    /// Bits a bucket, fixed point with 32 fractional bits.
    pub slope: u64,
    pub bias: u64,
}

impl BaseLine {
    /// The line of a shard of `bits` bits of lists in `bases.len()` buckets whose lists start at
    /// `bases`, and the width of the fields it leaves.
    pub fn fit(bases: &[u64], bits: u64) -> (Self, u32) {
        let slope = match bases.len() {
            0 => 0,
            n => (((bits as u128) << 32) / n as u128) as u64,
        };
        let line = BaseLine { slope, bias: 0 };
        let below = bases.iter().enumerate().map(|(b, &base)| line.at(b as u64).saturating_sub(base)).max();
        let line = BaseLine { slope, bias: below.unwrap_or(0) };
        let widest = bases.iter().enumerate().map(|(b, &base)| line.field(b as u64, base)).max().unwrap_or(0);
        (line, bits_for(widest + 1))
    }

    /// The line at bucket `b` (the device twin is `bucket_base` in `cuda/classify.cuh`).
    #[inline]
    fn at(&self, b: u64) -> u64 {
        ((b as u128 * self.slope as u128) >> 32) as u64
    }

    /// The field of bucket `b` whose base is `base` (at least the line less the bias).
    fn field(&self, b: u64, base: u64) -> u64 {
        base + self.bias - self.at(b)
    }

    /// The base of bucket `b` whose field is `field` (wrapping: a damaged shard table's line gives
    /// some base, which the list's bounds checks then refuse or read).
    #[inline]
    pub fn base(&self, b: u64, field: u64) -> u64 {
        self.at(b).wrapping_add(field).wrapping_sub(self.bias)
    }
}

/// How one shard's slots are packed: its hash, its buckets and its fields' widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyCode {
    pub hash: KeyHash,
    pub buckets: u64,
    pub tag_bits: u32,
    pub codes: SlotCodes,
    pub base_bits: u32,
    /// What a bucket's base field is measured from.
    pub line: BaseLine,
    /// `ceil(2^64 / buckets)` (0 for one bucket): a hash's bucket and quotient by a
    /// multiplication, not a division (Lemire, Kaser and Kurz 2019: exact for every 32-bit hash),
    /// which lookups do for every feature of every read.
    magic: u64,
}

impl KeyCode {
    /// The code of a shard of `buckets` buckets with these codes and bases.
    pub fn new(hash: KeyHash, buckets: u64, codes: SlotCodes, base_bits: u32) -> Self {
        Self::with_widths(hash, buckets, tag_bits(hash, buckets), codes, base_bits)
    }

    /// The code of a stored shard, whose widths its shard table gives (the reader checks them).
    pub(crate) fn with_widths(hash: KeyHash, buckets: u64, tag_bits: u32, codes: SlotCodes, base_bits: u32) -> Self {
        let magic = match buckets {
            0 | 1 => 0,
            b => ((1u128 << 64) / b as u128 + 1) as u64,
        };
        Self { hash, buckets, tag_bits, codes, base_bits, line: BaseLine::default(), magic }
    }

    /// This code with its bases measured from `line`.
    pub(crate) fn with_line(self, line: BaseLine) -> Self {
        Self { line, ..self }
    }

    /// Bits of one slot: its tag and its code.
    #[inline]
    pub(crate) fn slot_bits(&self) -> u64 {
        (self.tag_bits + self.codes.bits) as u64
    }

    /// Bits of one bucket.
    #[inline]
    pub(crate) fn bucket_bits(&self) -> u64 {
        bucket_bits(self.base_bits, self.tag_bits, self.codes.bits)
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
        key_words(self.buckets, self.bucket_bits())
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

/// Bits of a bucket with a `base_bits` base and 16 slots of a tag and a code.
pub(crate) fn bucket_bits(base_bits: u32, tag_bits: u32, code_bits: u32) -> u64 {
    base_bits as u64 + BUCKET_SLOTS as u64 * (tag_bits as u64 + code_bits as u64)
}

/// Words of a key index of `buckets` buckets of `bucket_bits` bits (`None` where a damaged
/// shard table's sizes overflow).
pub(crate) fn key_words_checked(buckets: u64, bucket_bits: u64) -> Option<u64> {
    Some(buckets.checked_mul(bucket_bits)?.div_ceil(32))
}

/// [`key_words_checked`] of a key index whose size fits.
pub(crate) fn key_words(buckets: u64, bucket_bits: u64) -> u64 {
    (buckets * bucket_bits).div_ceil(32)
}

/// Bits of a tag in a shard of `buckets` buckets: its largest quotient's and two.
pub(crate) fn tag_bits(hash: KeyHash, buckets: u64) -> u32 {
    let largest_hash = u32::MAX as u64 >> (32 - hash.domain_bits());
    2 + bits_for(largest_hash / buckets.max(1) + 1)
}

/// Packs a shard's slots (whole buckets, as `bcht` builds them) with each occupied slot's code
/// and each bucket's base into `words`, the key index's (zeroed), in parallel by buckets.
pub(crate) fn pack_into(words: &mut [u32], slots: &[Slot], codes: &[u8], bases: &[u64], code: &KeyCode) {
    use rayon::prelude::*;
    // A multiple of 32 buckets starts at a whole word.
    const BUCKETS: usize = 4096;
    debug_assert_eq!(slots.len(), code.buckets as usize * BUCKET_SLOTS);
    debug_assert_eq!(words.len() as u64, code.words());
    let (tb, cb, bits) = (code.tag_bits, code.codes.bits, code.bucket_bits());
    if code.buckets == 0 {
        return;
    }
    let chunk_words = (BUCKETS as u64 * bits / 32) as usize;
    words.par_chunks_mut(chunk_words).enumerate().for_each(|(chunk, words)| {
        let first = chunk * BUCKETS;
        for i in 0..BUCKETS.min(code.buckets as usize - first) {
            let (b, start) = (first + i, i as u64 * bits);
            put(words, start, code.line.field(b as u64, bases[b]), code.base_bits);
            let bucket = &slots[b * BUCKET_SLOTS..(b + 1) * BUCKET_SLOTS];
            for (s, slot) in bucket.iter().enumerate().filter(|(_, s)| s.key != crate::index::bcht::EMPTY_KEY) {
                let tag = (0..HASH_FUNCTIONS)
                    .map(|j| code.place(slot.key, j))
                    .find(|&(at, _)| at == b as u64)
                    .expect("a key is in one of its candidate buckets")
                    .1;
                let at = start + code.base_bits as u64 + s as u64 * code.slot_bits();
                put(words, at, tag, tb);
                put(words, at + tb as u64, codes[b * BUCKET_SLOTS + s] as u64, cb);
            }
        }
    });
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

/// At least 57 bits of `bytes` from bit `bit`, by one unaligned load: enough for a tag, a code or
/// a base (branch-free, unlike a walk through words, which made lookups half again slower).
/// `bytes` holds at least 8 bytes from the byte of `bit` (a key index is followed by its stream's
/// padding).
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
    Found(ListRef),
    Absent,
    /// Not in this bucket, which is full: the key may be in the next.
    Full,
}

/// An occupied slot as stored: its key and where its list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredSlot {
    pub key: Feature,
    pub list: ListRef,
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

    /// Where the list stored for `key` (which is of this shard) is, if any.
    #[inline]
    pub fn lookup(&self, key: Feature) -> Option<ListRef> {
        for j in 0..HASH_FUNCTIONS {
            match self.probe(key, j) {
                Probe::Found(v) => return Some(v),
                Probe::Absent => return None,
                Probe::Full => {}
            }
        }
        None
    }

    /// What `key`'s `j`-th candidate bucket says of it: where its list is, that it is in no bucket
    /// (an empty slot ends the search: keys fill their buckets in order), or that the next bucket
    /// must be looked at. [`PackedKeys::lookup`] probes the buckets in turn; a caller with many
    /// keys probes them bucket by bucket, prefetching each key's next bucket
    /// (`PackedKeys::bucket_ends`) before it is read.
    #[inline]
    pub fn probe(&self, key: Feature, j: usize) -> Probe {
        if self.code.buckets == 0 {
            return Probe::Absent;
        }
        let (b, tag) = self.code.place(key, j);
        self.probe_at(b, tag)
    }

    /// [`PackedKeys::probe`] of the key whose candidate bucket `b` holds it with `tag`
    /// ([`KeyCode::place`]).
    #[inline]
    fn probe_at(&self, b: u64, tag: u64) -> Probe {
        let c = &self.code;
        if c.buckets == 0 {
            return Probe::Absent;
        }
        let (tb, cb) = (c.tag_bits as u64, c.codes.bits);
        let (tag_mask, width) = ((1u64 << tb) - 1, tb + cb as u64);
        let (bucket, start) = self.bucket(b);
        let first = start + c.base_bits as u64;
        // The key's slot, from the tags alone: most probes end without it (keys the index lacks
        // scan whole buckets, which are nearly all full), so the sizes of the slots before it are
        // added only once it is found. A slot's tag and code come in one read: at most 34 + 8
        // bits (the tag's width is checked at open).
        let mut s = 0;
        loop {
            if s == BUCKET_SLOTS {
                return Probe::Full;
            }
            let t = bits57(bucket, first + s as u64 * width) & tag_mask;
            if t == tag {
                break;
            }
            if t == 0 {
                return Probe::Absent;
            }
            s += 1;
        }
        let code_mask = (1u64 << cb) - 1;
        let code_at = |i: usize| (bits57(bucket, first + i as u64 * width) >> tb) & code_mask;
        let (mut before, mut escaped) = (0, 0);
        for i in 0..s {
            let code = code_at(i);
            before += c.codes.size(code);
            escaped += (code == c.codes.escape()) as u64;
        }
        let base = c.line.base(b, bits57(bucket, start) & ((1u64 << c.base_bits) - 1));
        let code = code_at(s);
        if code != c.codes.escape() {
            return Probe::Found(c.codes.list_at(code, base.wrapping_add(before)));
        }
        // Escaped lists follow the whole run: the sizes of the slots after this one too.
        let run = before + self.run_from((bucket, start), s + 1);
        Probe::Found(ListRef::escaped(base.wrapping_add(run), escaped))
    }

    /// Bits of the run of the occupied slots of a bucket (its bytes and first bit,
    /// [`PackedKeys::bucket`]'s) from slot `s` on.
    fn run_from(&self, (bucket, start): (&[u8], u64), s: usize) -> u64 {
        let c = &self.code;
        let (tb, cb) = (c.tag_bits as u64, c.codes.bits);
        let (tag_mask, code_mask) = ((1u64 << tb) - 1, (1u64 << cb) - 1);
        let mut run = 0;
        for i in s..BUCKET_SLOTS {
            let slot = bits57(bucket, start + c.base_bits as u64 + i as u64 * (tb + cb as u64));
            if slot & tag_mask == 0 {
                break;
            }
            run += c.codes.size((slot >> tb) & code_mask);
        }
        run
    }

    /// The first and last words of `key`'s `j`-th candidate bucket (for a prefetch: a bucket may
    /// straddle two cache lines).
    #[inline]
    pub(crate) fn bucket_ends(&self, key: Feature, j: usize) -> Option<[&'a u32; 2]> {
        if self.code.buckets == 0 {
            return None;
        }
        let (b, bits) = (self.code.place(key, j).0, self.code.bucket_bits());
        let (first, last) = (b * bits / 32, (b * bits + bits - 1) / 32);
        Some([self.words.get(first as usize)?, self.words.get(last as usize)?])
    }

    /// Every occupied slot, key and list, in slot order.
    pub fn slots(&self) -> impl Iterator<Item = StoredSlot> + '_ {
        let c = self.code;
        let (tb, cb) = (c.tag_bits as u64, c.codes.bits);
        let (tag_mask, code_mask) = ((1u64 << tb) - 1, (1u64 << cb) - 1);
        (0..c.buckets).flat_map(move |b| {
            let (bucket, start) = self.bucket(b);
            let base = c.line.base(b, bits57(bucket, start) & ((1u64 << c.base_bits) - 1));
            let run = base.wrapping_add(self.run_from((bucket, start), 0));
            let (mut before, mut escaped) = (0, 0);
            (0..BUCKET_SLOTS as u64).map_while(move |i| {
                let at = start + c.base_bits as u64 + i * (tb + cb as u64);
                let tag = bits57(bucket, at) & tag_mask;
                if tag == 0 {
                    return None;
                }
                let code = bits57(bucket, at + tb) & code_mask;
                let list = match code == c.codes.escape() {
                    true => {
                        escaped += 1;
                        ListRef::escaped(run, escaped - 1)
                    }
                    false => c.codes.list_at(code, base.wrapping_add(before)),
                };
                before += c.codes.size(code);
                Some(StoredSlot { key: c.key(b, tag, self.shard), list })
            })
        })
    }

    /// The bytes of bucket `b` (from the byte of its first bit) and the 8 after them (the next
    /// bucket's, or the stream's padding), by one bounds check: what `bits57` may read of any of
    /// its fields; and the bucket's first bit in them.
    #[inline]
    fn bucket(&self, b: u64) -> (&'a [u8], u64) {
        let (first, bits) = (b * self.code.bucket_bits(), self.code.bucket_bits());
        let (at, end) = ((first / 8) as usize, (first + bits).div_ceil(8) as usize);
        let bytes: &'a [u8] = bytemuck::cast_slice(self.words);
        (&bytes[at..end + PAD_WORDS * 4], first % 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::bcht;
    use crate::index::locations::{LocationLayout, LocationList};
    use rand::{Rng, SeedableRng, rngs::StdRng};

    const ANY_CODES: SlotCodes = SlotCodes { bits: 1, fixed: 0, entry: 20, unit: 20 };

    /// Stored, every key is found with its list and listed back, absent keys are not found, at
    /// every shard count and table size (tags from 3 to 34 bits).
    #[test]
    fn packed_slots_give_back_their_keys_and_lists() {
        let layout = LocationLayout::uniform(1000, 1000, 254, 10);
        for (shard_bits, n) in [(0, 0), (0, 1), (0, 17), (6, 1000), (6, 50_000), (12, 3000), (31, 1), (3, 5)] {
            let shard = if shard_bits == 0 { 0 } else { 5 };
            let hash = KeyHash::new(shard_bits);
            let mut rng = StdRng::seed_from_u64(n as u64 + shard_bits as u64);
            let mut keys: Vec<u32> = (0..n)
                .map(|_| (rng.random::<u32>() >> shard_bits << shard_bits) | shard)
                .filter(|&k| k != bcht::EMPTY_KEY)
                .collect();
            keys.sort_unstable();
            keys.dedup();
            let lists: Vec<(Feature, Vec<u64>)> = keys
                .iter()
                .map(|&k| (k, (0..k % 3 + 1).map(|i| layout.pack(i * 7 + k % 100, k % 1000)).collect()))
                .collect();
            let data = crate::index::stored_shard::built(&layout, hash, &lists);
            let numbering = crate::index::GlobalWindows::uniform(1000, 1000, &layout);
            let stored = crate::index::stored_shard::store(&data, &layout, &numbering, hash).unwrap();
            let packed = stored.packed_keys(shard as usize);
            for (key, l) in &lists {
                let r = packed.lookup(*key).expect("stored");
                let got: Vec<u64> = LocationList::at(r, stored.words(), &layout, &numbering).iter().collect();
                assert_eq!(&got, l, "shard bits {shard_bits}, {n} keys");
            }
            let listed: Vec<Feature> = packed.slots().map(|s| s.key).collect();
            let placed: Vec<Feature> = data.slots.iter().map(|s| s.key).filter(|&k| k != bcht::EMPTY_KEY).collect();
            assert_eq!(listed, placed);
            for _ in 0..5000 {
                let k = (rng.random::<u32>() >> shard_bits << shard_bits) | shard;
                if keys.binary_search(&k).is_err() {
                    assert_eq!(packed.lookup(k), None);
                }
            }
        }
    }

    /// A line through a shard's bases gives each back from its field, which is narrower than the
    /// base where the entries spread evenly; no buckets and one bucket take a line too.
    /// The size without branches is the size as the format defines it, for every code of every
    /// width, fixed count, entry and unit.
    #[test]
    fn slot_sizes_are_the_format_s() {
        for bits in 1..=SlotCodes::MAX_BITS {
            let escape = (1u64 << bits) - 1;
            for fixed in (0..=escape as u32).step_by(3) {
                for (entry, unit) in [(1, 1), (23, 5), (30, 30), (64, 7), (64, 64)] {
                    let c = SlotCodes { bits, fixed, entry, unit };
                    for code in 0..=escape {
                        let want = if code < fixed as u64 {
                            (code + 1) * entry as u64
                        } else if code < escape {
                            (code - fixed as u64 + 1) * unit as u64
                        } else {
                            0
                        };
                        assert_eq!(c.size(code), want, "{c:?} code {code}");
                    }
                }
            }
        }
    }

    #[test]
    fn bases_come_back_from_their_line() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut bases = vec![0u64];
        for _ in 1..20_000 {
            bases.push(bases.last().unwrap() + rng.random_range(0..80));
        }
        let entries = bases.last().unwrap() + 40;
        let (line, bits) = BaseLine::fit(&bases, entries);
        assert!(bits < bits_for(entries) - 4, "{bits} bits for {entries} entries");
        for (b, &base) in bases.iter().enumerate() {
            let field = line.field(b as u64, base);
            assert!(field < 1 << bits);
            assert_eq!(line.base(b as u64, field), base);
        }
        assert_eq!(BaseLine::fit(&[], 0), (BaseLine::default(), 1));
        let (one, bits) = BaseLine::fit(&[0], 7);
        assert_eq!((one.base(0, 0), bits), (0, 1));
    }

    /// The sizes the format is for: a shard of 6,000 buckets (64 shards) has 16-bit tags, and a
    /// bucket of 16 slots of a tag and a 2-bit code with an 18-bit base takes 306 bits, and the
    /// buckets lie side by side (format 10 rounded each to 10 words; format 9's, with 24-bit
    /// values, took 20).
    #[test]
    fn fields_are_as_narrow_as_the_shard_allows() {
        let hash = KeyHash::new(6);
        assert_eq!(tag_bits(hash, 6000), 16);
        assert_eq!(tag_bits(hash, 1), 28);
        assert_eq!(tag_bits(KeyHash::new(0), 1), 34);
        let code = KeyCode::new(hash, 6000, SlotCodes { bits: 2, fixed: 1, entry: 20, unit: 20 }, 18);
        assert_eq!((code.bucket_bits(), code.words()), (306, 6000 * 306 / 32));
        // Fixed lists in 20-bit entries, described ones in 8-bit units.
        let codes = SlotCodes { bits: 3, fixed: 2, entry: 20, unit: 8 };
        assert!(codes.valid());
        assert_eq!((0..8).map(|c| codes.size(c)).collect::<Vec<_>>(), [20, 40, 8, 16, 24, 32, 40, 0]);
        assert_eq!(
            (codes.of_fixed(2), codes.of_fixed(3), codes.of_described(40), codes.of_described(41)),
            (Some(1), None, Some(6), None)
        );
        assert_eq!((codes.of_described(1), codes.of_described(8), codes.of_described(9)), (Some(2), Some(2), Some(3)));
        let valid = |bits, fixed, entry, unit| SlotCodes { bits, fixed, entry, unit }.valid();
        assert!(!valid(9, 0, 20, 20));
        assert!(!valid(2, 4, 20, 20));
        assert!(!valid(8, 240, 20, 20));
        assert!(!valid(2, 1, 20, 21), "a unit wider than an entry");
        assert!(!valid(2, 1, 20, 0));
        assert!(!valid(2, 1, 65, 20));
    }

    /// Fuzzing (index_open): a damaged tag whose hash bits are 0 underflowed the hash's index.
    #[test]
    fn regression_a_tag_with_no_hash_names_a_key_without_panicking() {
        let code = KeyCode::new(KeyHash::new(6), 1 << 40, ANY_CODES, 24);
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
            let code = KeyCode::new(KeyHash::new(0), buckets, ANY_CODES, 8);
            for h in [0, 1, u32::MAX, u32::MAX - 1, buckets as u32, (buckets as u32).wrapping_sub(1)]
                .into_iter()
                .chain((0..10_000).map(|_| rng.random()))
            {
                assert_eq!(code.div_mod(h), (h as u64 / buckets, h as u64 % buckets), "{h} / {buckets}");
            }
        }
    }
}
