//! A shard as the index stores it (format 10): its lists laid out in the key index's slot order,
//! so that a slot needs no offset, only a code for its list's kind and size (`index::packed_keys`).
//!
//! The build (CPU and GPU alike) lays a shard out first as a [`ShardData`]: slots whose values are
//! inline locations or entries of a [`ListWriter`] stream, in whatever order its keys were placed
//! (the GPU writes lists before the host's walk places the keys the rounds left over). [`store`]
//! then rewrites it once the slots are final, on the thread that finishes the shard: the same
//! function for every backend, so the bytes stay the same. For each bucket in turn it writes the
//! lists of its slots in slot order (fixed lists short enough for a code without their head,
//! the others padded to the shard's unit), then its escaped lists, each after its size in entries,
//! and records the bit where the bucket's lists start. It picks the shard's code width, how many
//! codes name fixed lengths and the unit by counting what each choice would take, key index and
//! stream together (format 12: up to 11 the unit was the entry, and a delta list's padding to a
//! whole entry was an eighth of the GPU benchmark's strain-rich index).
//!
//! Against format 9 on `../shared/data/refs` this takes the slots from 40 bits (a 16-bit tag and a
//! 24-bit value, most of it an offset or an inline location) to the tag and two or three bits,
//! and drops the heads of short fixed lists; single locations move into the stream.
//!
//! The stored stream's entries are narrower than the built one's where the targets' windows are
//! fewer than their (target, window) pairs could number (format 11): each location is written
//! again as its global window number (`locations::GlobalWindows`), a delta list's codes copied
//! as they are after its renumbered first location. On refs that is 20 bits against 23.

use crate::index::bcht::{BUCKET_SLOTS, EMPTY_KEY, KeyHash, Slot};
use crate::index::locations::{
    self, GlobalWindows, ListWriter, LocationLayout, LocationList, PAD_WORDS, ShardOverflow, bits_for,
};
use crate::index::packed_keys::{self, BaseLine, KeyCode, PackedKeys, SlotCodes, bucket_bits, tag_bits};
use crate::index::write::ShardData;

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

    /// The list of `key` (of shard `shard`), if stored (the tests').
    #[cfg(any(test, feature = "test-helpers"))]
    pub fn lookup<'a>(
        &'a self,
        key: crate::sketch::Feature,
        shard: usize,
        layout: &LocationLayout,
        windows: &'a GlobalWindows,
    ) -> Option<LocationList<'a>> {
        Some(LocationList::at(self.packed_keys(shard).lookup(key)?, self.words(), layout, windows))
    }
}

/// A slot's list as the build wrote it (24 bytes: a shard has millions of slots).
#[derive(Debug, Clone, Copy)]
struct Built {
    /// The first entry in the built stream (the location itself for [`Kind::Inline`]).
    at: u64,
    /// Locations of a fixed list; stored bits of a described one (without its padding).
    n: u32,
    /// A delta list's codes' bits.
    codes: u32,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Empty,
    /// A single location, inline in the built slot.
    Inline,
    /// Locations, one entry each, after a head.
    Fixed,
    /// A list that says what it is: a delta list or a clade.
    Described,
}

impl Built {
    /// The list of `slot` in the built stream `words`, sized for the layout's stored entries.
    /// `code_bits`: a delta list's codes' bits if known, else [`UNKNOWN_CODE_BITS`] (found by
    /// skipping its codes).
    fn of(slot: &Slot, words: &[u32], layout: &LocationLayout, code_bits: u32) -> Self {
        let built = |at, n: u64, codes: u64, kind| Built { at, n: n as u32, codes: codes as u32, kind };
        if slot.key == EMPTY_KEY {
            return built(0, 0, 0, Kind::Empty);
        }
        match LocationList::decode(slot.value, words, layout) {
            LocationList::Single(loc) => built(loc, 1, 0, Kind::Inline),
            LocationList::Packed { bit, len, .. } => {
                debug_assert!(len > 0, "the build writes no empty list");
                built(bit / layout.entry_bits as u64, len as u64, 0, Kind::Fixed)
            }
            LocationList::Clade(_) => built(slot.value as u64, 2 * layout.stored_bits as u64, 0, Kind::Described),
            // Its codes are stored as they are; its first location takes a stored entry.
            list @ LocationList::Delta { bit, len, .. } => {
                let codes = match code_bits {
                    UNKNOWN_CODE_BITS => list.end_bit() - bit,
                    known => {
                        debug_assert_eq!(known as u64, list.end_bit() - bit, "the GPU's code bits are the list's");
                        known as u64
                    }
                };
                let n = locations::delta_list_bits(len as u64, layout.stored_bits as u64, codes);
                built(slot.value as u64, n, codes, Kind::Described)
            }
        }
    }

    /// How it is stored under `codes`: its code (`None`: escaped) and its bits without padding
    /// (and without the size entry an escaped list has before it).
    #[inline]
    fn stored(&self, codes: &SlotCodes) -> (Option<u64>, u64) {
        let (n, eb) = (self.n as u64, codes.entry as u64);
        match self.kind {
            Kind::Inline | Kind::Fixed => match codes.of_fixed(n) {
                Some(c) => (Some(c), n * eb),
                // With its head.
                None => (codes.of_described((n + 1) * eb), (n + 1) * eb),
            },
            Kind::Described => (codes.of_described(n), n),
            Kind::Empty => (Some(0), 0),
        }
    }

    /// Bits of the stream it takes under `codes`: its code's size, or an escaped list's size
    /// entry and its entries.
    #[inline]
    fn cost(&self, codes: &SlotCodes) -> u64 {
        match (self.kind, self.stored(codes)) {
            (Kind::Empty, _) => 0,
            (_, (Some(c), _)) => codes.size(c),
            (_, (None, bits)) => escaped_bits(bits, codes.entry as u64),
        }
    }

    /// Writes it into `out` (stored entries), its locations as the global window numbers of
    /// `windows`, without a head if `headless` (a fixed list whose code is its length).
    fn write(
        &self,
        out: &mut ListWriter,
        words: &[u32],
        layout: &LocationLayout,
        windows: &GlobalWindows,
        headless: bool,
    ) {
        let n = self.n as u64;
        match self.kind {
            Kind::Inline | Kind::Fixed if !headless => out.push(n << 1),
            _ => {}
        }
        match self.kind {
            Kind::Inline => out.push(windows.global(self.at)),
            Kind::Fixed => {
                for i in 0..n {
                    out.push(windows.global(locations::entry(words, layout.entry_bits, self.at + i)));
                }
            }
            Kind::Described => match LocationList::decode(self.at as u32, words, layout) {
                LocationList::Clade(node) => {
                    out.push(0);
                    out.push(node as u64);
                }
                LocationList::Delta { first_loc, bit, len, .. } => {
                    out.push_delta(len as u64, windows.global(first_loc), words, (bit, self.codes as u64));
                }
                _ => unreachable!("a described list decodes as it did"),
            },
            Kind::Empty => {}
        }
    }
}

/// Bits an escaped list of `bits` bits takes: an entry with its size in entries, then its
/// entries (escaped lists are few, long fixed lists mostly: padding them costs little, and their
/// sizes stay readable without the unit).
#[inline]
fn escaped_bits(bits: u64, eb: u64) -> u64 {
    eb + bits.div_ceil(eb) * eb
}

/// Counts of a shard's lists by kind and size: what choosing its codes needs.
#[derive(Default)]
struct Sizes {
    /// Lists of `i` locations.
    fixed: Vec<u64>,
    /// Lists that say what they are, of `i` bits.
    described: Vec<u64>,
}

impl Sizes {
    fn of(lists: &[Built]) -> Self {
        let mut sizes = Sizes::default();
        for l in lists {
            let counts = match l.kind {
                Kind::Empty => continue,
                Kind::Inline | Kind::Fixed => &mut sizes.fixed,
                Kind::Described => &mut sizes.described,
            };
            if counts.len() <= l.n as usize {
                counts.resize(l.n as usize + 1, 0);
            }
            counts[l.n as usize] += 1;
        }
        sizes
    }

    fn add(mut self, other: Self) -> Self {
        for (mine, theirs) in [(&mut self.fixed, other.fixed), (&mut self.described, other.described)] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            mine.iter_mut().zip(theirs).for_each(|(m, t)| *m += t);
        }
        self
    }

    /// The sizes that occur and how often, of fixed lists (locations) and described ones (bits).
    fn listed(&self) -> [Vec<(u64, u64)>; 2] {
        let listed =
            |counts: &[u64]| counts.iter().enumerate().filter(|(_, n)| **n > 0).map(|(s, &n)| (s as u64, n)).collect();
        [listed(&self.fixed), listed(&self.described)]
    }
}

/// The codes for which the shard takes the fewest bits (the widest unit, then the fewest code
/// bits, then the fewest fixed codes, among equals). The bases are counted whole here: measured
/// from their line (`packed_keys::BaseLine`) they take about fifteen bits whatever the codes.
///
/// For each unit, the described lists' bits under every escape threshold come from prefix sums
/// over their sizes in units, so trying every unit, width and split stays a few milliseconds.
fn choose_codes(sizes: &Sizes, buckets: u64, tag_bits: u32, entry_bits: u32) -> SlotCodes {
    let eb = entry_bits as u64;
    let [fixed_lists, described] = sizes.listed();
    let mut best: Option<(u64, SlotCodes)> = None;
    for unit in (1..=entry_bits).rev() {
        let u = unit as u64;
        // By size in units m: the bits of those lists coded (m units each) and escaped.
        let most_units = described.iter().map(|&(b, _)| b.div_ceil(u)).max().unwrap_or(0) as usize;
        let mut coded = vec![0u64; most_units + 1];
        let mut escaped = vec![0u64; most_units + 1];
        for &(b, n) in &described {
            let m = b.div_ceil(u);
            coded[m as usize] += n * m * u;
            escaped[m as usize] += n * escaped_bits(b, eb);
        }
        for m in 1..=most_units {
            coded[m] += coded[m - 1];
            escaped[m] += escaped[m - 1];
        }
        let all_escaped = escaped[most_units];
        for bits in 1..=SlotCodes::MAX_BITS {
            let most = ((1u64 << bits) - 1).min(locations::ListRef::MAX_FIXED) as u32;
            for fixed in 0..=most {
                let codes = SlotCodes { bits, fixed, entry: entry_bits, unit };
                // Described lists of up to `t` units have codes; longer ones are escaped.
                let t = ((codes.escape() - fixed as u64) as usize).min(most_units);
                let mut stream = coded[t] + all_escaped - escaped[t];
                for &(n, count) in &fixed_lists {
                    stream += count * Built { at: 0, n: n as u32, codes: 0, kind: Kind::Fixed }.cost(&codes);
                }
                let base_bits = bits_for(stream + 1);
                let total = buckets * bucket_bits(base_bits, tag_bits, bits) + stream;
                if best.is_none_or(|(b, _)| total < b) {
                    best = Some((total, codes));
                }
            }
        }
    }
    best.expect("at least one choice").1
}

/// Buckets stored by one task: a shard is written in pieces in parallel (a GPU build finishes
/// the shards as they arrive, often one at a time), then the pieces' streams are joined.
const PIECE_BUCKETS: usize = 2048;

/// One piece of a shard's stream: its words (from bit 0), its slots' codes, its buckets' bases.
struct Piece {
    words: Vec<u32>,
    codes: Vec<u8>,
    bases: Vec<u64>,
}

/// Writes the lists of `lists` (whole buckets) whose stream starts at bit `offset` and takes
/// `bits` bits.
fn write_piece(
    lists: &[Built],
    (words, layout, windows): (&[u32], &LocationLayout, &GlobalWindows),
    codes: &SlotCodes,
    offset: u64,
    bits: u64,
) -> Piece {
    let mut out = ListWriter::with_capacity(layout.as_stored(), bits);
    let mut slot_codes = vec![0u8; lists.len()];
    let mut bases = Vec::with_capacity(lists.len() / BUCKET_SLOTS);
    let mut escaped = Vec::new();
    let eb = codes.entry as u64;
    for (b, bucket) in lists.chunks(BUCKET_SLOTS).enumerate() {
        bases.push(offset + out.bits());
        escaped.clear();
        for (i, list) in bucket.iter().enumerate().filter(|(_, l)| l.kind != Kind::Empty) {
            match list.stored(codes) {
                (Some(c), _) => {
                    slot_codes[b * BUCKET_SLOTS + i] = c as u8;
                    let start = out.bits();
                    list.write(&mut out, words, layout, windows, (c as u32) < codes.fixed);
                    out.zeros_to(start + codes.size(c));
                }
                (None, n) => {
                    slot_codes[b * BUCKET_SLOTS + i] = codes.escape() as u8;
                    escaped.push((list, n.div_ceil(eb)));
                }
            }
        }
        for &(list, entries) in &escaped {
            out.push(entries);
            let start = out.bits();
            list.write(&mut out, words, layout, windows, false);
            out.zeros_to(start + entries * eb);
        }
    }
    debug_assert_eq!(out.bits(), bits);
    Piece { words: out.finish_unpadded(), codes: slot_codes, bases }
}

/// The pieces' bits laid side by side in `stream` (zeros), piece `p`'s `counts[p]` bits from bit
/// `offsets[p]`, in parallel: each piece ORs its bits into the words from the one its first bit
/// is in up to the next piece's first, and hands back those it has for that one (the pieces
/// share it), which are ORed in after.
fn join_pieces(stream: &mut [u32], pieces: &[Piece], offsets: &[u64], counts: &[u64]) {
    use rayon::prelude::*;
    let first_word = |p: usize| offsets.get(p).map_or(stream.len(), |&at| (at / 32) as usize);
    let bounds: Vec<usize> = (0..=pieces.len()).map(first_word).collect();
    let mut parts = Vec::with_capacity(pieces.len());
    let mut rest = &mut *stream;
    for w in bounds.windows(2) {
        let (part, after) = rest.split_at_mut(w[1] - w[0]);
        parts.push(part);
        rest = after;
    }
    let carries: Vec<u32> = (parts.into_par_iter().zip(pieces).zip(offsets.par_iter().zip(counts)))
        .map(|((part, piece), (&at, &bits))| or_bits(part, (at % 32) as u32, &piece.words, bits))
        .collect();
    for (p, carry) in carries.into_iter().enumerate().filter(|&(_, c)| c != 0) {
        stream[bounds[p + 1]] |= carry;
    }
}

/// ORs the first `bits` bits of `from` into `into` from bit `shift` of its first word (the bits
/// after them in `from` are zero); returns those for the word after `into`.
fn or_bits(into: &mut [u32], shift: u32, from: &[u32], bits: u64) -> u32 {
    let (mut carry, len) = (0, into.len());
    let mut or = |i: usize, v: u32| match into.get_mut(i) {
        Some(word) => *word |= v,
        None if i == len => carry |= v,
        None => debug_assert_eq!(v, 0, "a piece's bits end in the word after its words"),
    };
    for (i, &v) in from.iter().take(bits.div_ceil(32) as usize).enumerate() {
        or(i, v << shift);
        if shift > 0 {
            or(i + 1, v >> (32 - shift));
        }
    }
    carry
}

/// Rewrites a shard as built (final slots, whole buckets; values into `shard.words`) as stored,
/// its locations numbered by `windows`.
pub fn store(
    shard: &ShardData,
    layout: &LocationLayout,
    windows: &GlobalWindows,
    hash: KeyHash,
) -> Result<StoredShard, ShardOverflow> {
    store_parts(&shard.slots, &shard.words, None, layout, windows, hash)
}

/// A slot's list's code bits where they are not known (see [`store_parts`]).
pub const UNKNOWN_CODE_BITS: u32 = u32::MAX;

/// Each slot's delta list's code bits, found by walking its codes ([`UNKNOWN_CODE_BITS`] for the
/// other slots): what the GPU's `sort_lists` gives, which `gpu::condense`'s test twin checks.
pub fn walked_code_bits(slots: &[Slot], words: &[u32], layout: &LocationLayout) -> Vec<u32> {
    let bits = |s: &Slot| match s.key != EMPTY_KEY {
        false => UNKNOWN_CODE_BITS,
        true => match LocationList::decode(s.value, words, layout) {
            list @ LocationList::Delta { bit, .. } => u32::try_from(list.end_bit() - bit).unwrap_or(UNKNOWN_CODE_BITS),
            _ => UNKNOWN_CODE_BITS,
        },
    };
    slots.iter().map(bits).collect()
}

/// [`store`] of the slots and words of a shard held elsewhere (a GPU's download buffer).
/// `code_bits`, if given, has a delta list's codes' bits for each slot (or [`UNKNOWN_CODE_BITS`]),
/// as the GPU wrote the lists: reading a list then needs no walk over its codes to find their end.
pub fn store_parts(
    slots: &[Slot],
    words: &[u32],
    code_bits: Option<&[u32]>,
    layout: &LocationLayout,
    windows: &GlobalWindows,
    hash: KeyHash,
) -> Result<StoredShard, ShardOverflow> {
    store_with(slots, (words, layout, windows), hash, None, code_bits)
}

/// [`store_parts`] with the codes `forced`, if given, instead of the best ones. The pieces run on
/// the current rayon pool; the bytes do not depend on it.
fn store_with(
    slots: &[Slot],
    built: (&[u32], &LocationLayout, &GlobalWindows),
    hash: KeyHash,
    forced: Option<SlotCodes>,
    code_bits: Option<&[u32]>,
) -> Result<StoredShard, ShardOverflow> {
    use rayon::prelude::*;
    debug_assert_eq!(slots.len() % BUCKET_SLOTS, 0);
    let (words, layout, _) = built;
    let mut clock = std::time::Instant::now();
    let mut laps = Vec::with_capacity(4);
    let mut lap = |what: &'static str| {
        laps.push((what, clock.elapsed().as_secs_f64()));
        clock = std::time::Instant::now();
    };
    let buckets = (slots.len() / BUCKET_SLOTS) as u64;
    let piece = PIECE_BUCKETS * BUCKET_SLOTS;
    let lists: Vec<Built> = match code_bits {
        None => slots.par_iter().map(|s| Built::of(s, words, layout, UNKNOWN_CODE_BITS)).collect(),
        Some(bits) => (slots.par_iter().zip(bits)).map(|(s, &b)| Built::of(s, words, layout, b)).collect(),
    };
    lap("lists read");
    let sizes = lists.par_chunks(piece).map(Sizes::of).reduce(Sizes::default, Sizes::add);
    let tb = tag_bits(hash, buckets);
    let codes = forced.unwrap_or_else(|| choose_codes(&sizes, buckets, tb, layout.stored_bits));
    let counts: Vec<u64> = lists.par_chunks(piece).map(|p| p.iter().map(|l| l.cost(&codes)).sum()).collect();
    let offsets: Vec<u64> = counts.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
    let total: u64 = counts.iter().sum();
    // A list's start is a bit below 2^56 (`ListRef`), and a bucket's base at most 32 bits from
    // the line through them (the shard table's check).
    if total >= 1 << 56 {
        return Err(ShardOverflow);
    }
    let pieces: Vec<Piece> = (lists.par_chunks(piece).zip(&offsets).zip(&counts))
        .map(|((p, &offset), &n)| write_piece(p, built, &codes, offset, n))
        .collect();
    lap("sizes, codes and pieces");
    drop(lists);
    let bases: Vec<u64> = pieces.iter().flat_map(|p| p.bases.iter().copied()).collect();
    let (line, base_bits) = BaseLine::fit(&bases, total);
    if base_bits > 32 {
        return Err(ShardOverflow);
    }
    let code = KeyCode::new(hash, buckets, codes, base_bits).with_line(line);
    let key_words = code.words() as usize;
    let mut block = vec![0u32; key_words + total.div_ceil(32) as usize + PAD_WORDS];
    let (keys, stream) = block.split_at_mut(key_words);
    join_pieces(stream, &pieces, &offsets, &counts);
    lap("stream joined");
    let slot_codes: Vec<u8> = pieces.iter().flat_map(|p| p.codes.iter().copied()).collect();
    packed_keys::pack_into(keys, slots, &slot_codes, &bases, &code);
    lap("keys packed");
    log::trace!(
        "shard laid out ({} slots, {} stream bits): {}",
        slots.len(),
        total,
        laps.iter().map(|(w, s)| format!("{w} {s:.3} s")).collect::<Vec<_>>().join(", ")
    );
    Ok(StoredShard { block, code })
}

/// A shard as the build lays it out, from keys (of one shard, any order) and their sorted lists,
/// an empty list standing for a clade feature of tree node 1 (the tests').
#[cfg(test)]
pub(crate) fn built(layout: &LocationLayout, hash: KeyHash, lists: &[(crate::sketch::Feature, Vec<u64>)]) -> ShardData {
    let mut writer = ListWriter::new(*layout);
    let mut entries: Vec<Slot> = lists
        .iter()
        .map(|(key, list)| {
            let value = match list.is_empty() {
                true => writer.add_clade(1),
                false => writer.add(list),
            };
            Slot { key: *key, value: value.expect("a small shard") }
        })
        .collect();
    entries.sort_unstable_by_key(|s| s.key);
    ShardData { slots: crate::index::bcht::build(&entries, hash), words: writer.finish() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists of every kind (single, short and long fixed, delta, clade), stored and read back by
    /// lookup and by the slots' walk, at code choices from escaping most lists to escaping none.
    #[test]
    fn stored_lists_read_back_by_lookup_and_walk() {
        let layout = LocationLayout::uniform(300, 5000, 254, 50);
        let hash = KeyHash::new(4);
        let mut expected = Vec::new();
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
            expected.push((key, list));
        }
        let numbering = GlobalWindows::uniform(300, 5000, &layout);
        let built = built(&layout, hash, &expected);
        let stored = store(&built, &layout, &numbering, hash).unwrap();
        let packed = stored.packed_keys(5);
        let words = stored.words();
        for (key, list) in &expected {
            let r = packed.lookup(*key).expect("stored");
            let got = LocationList::at(r, words, &layout, &numbering);
            match list.is_empty() {
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

    /// Known code bits (as the GPU gives them) lay a shard out in the bytes the walk gives, also
    /// with some of them unknown (the slots the leftover keys' walk moved); and they are the
    /// delta lists' only.
    #[test]
    fn known_code_bits_give_the_walks_bytes() {
        let layout = LocationLayout::uniform(300, 5000, 254, 50);
        let hash = KeyHash::new(4);
        let lists: Vec<(u32, Vec<u64>)> = (0..2000u32)
            .map(|f| {
                let list = match f % 4 {
                    0 => vec![layout.pack(f % 300, 9)],
                    1 => (0..(f % 30 + 2)).map(|i| layout.pack((f * 3 + i * 37) % 300, i * 11)).collect(),
                    2 => (0..(f % 40 + 3)).map(|i| layout.pack(i + f % 100, 17 + i % 3)).collect(),
                    _ => vec![],
                };
                ((f * 7919 + 3) << 4 | 5, list)
            })
            .collect();
        let numbering = GlobalWindows::uniform(300, 5000, &layout);
        let shard = built(&layout, hash, &lists);
        let known = walked_code_bits(&shard.slots, &shard.words, &layout);
        let deltas = shard
            .slots
            .iter()
            .filter(|s| s.key != EMPTY_KEY)
            .filter(|s| matches!(LocationList::decode(s.value, &shard.words, &layout), LocationList::Delta { .. }))
            .count();
        assert!(deltas > 100);
        assert_eq!(known.iter().filter(|&&b| b != UNKNOWN_CODE_BITS).count(), deltas);
        let walked = store(&shard, &layout, &numbering, hash).unwrap();
        let given = store_parts(&shard.slots, &shard.words, Some(&known), &layout, &numbering, hash).unwrap();
        assert_eq!(given.block, walked.block);
        let some: Vec<u32> =
            known.iter().enumerate().map(|(i, &b)| if i % 3 == 0 { UNKNOWN_CODE_BITS } else { b }).collect();
        let mixed = store_parts(&shard.slots, &shard.words, Some(&some), &layout, &numbering, hash).unwrap();
        assert_eq!(mixed.block, walked.block);
    }

    /// Each choice of codes reads back: every width, every split between fixed and described,
    /// units from a bit to a whole entry.
    #[test]
    fn every_code_choice_reads_back() {
        let layout = LocationLayout::uniform(64, 4096, 254, 10);
        let hash = KeyHash::new(2);
        let lists: Vec<(u32, Vec<u64>)> = (0..400u32)
            .map(|f| {
                let mut l: Vec<u64> = (0..(f % 13 + 1)).map(|i| layout.pack((i * 5 + f) % 64, f % 4096)).collect();
                l.sort_unstable();
                l.dedup();
                ((f + 1) << 2 | 1, l)
            })
            .collect();
        let ShardData { slots, words } = built(&layout, hash, &lists);
        let numbering = GlobalWindows::uniform(64, 4096, &layout);
        let entry = layout.stored_bits;
        for (bits, unit) in (1..=4).flat_map(|bits| [1, 3, 8, entry - 1, entry].map(|unit| (bits, unit))) {
            for fixed in 0..(1 << bits) {
                let codes = SlotCodes { bits, fixed, entry, unit };
                let stored = store_with(&slots, (&words, &layout, &numbering), hash, Some(codes), None).unwrap();
                assert_eq!(stored.code.codes, codes);
                let packed = stored.packed_keys(1);
                for (key, l) in &lists {
                    let r = packed.lookup(*key).unwrap();
                    let got: Vec<u64> = LocationList::at(r, stored.words(), &layout, &numbering).iter().collect();
                    assert_eq!(&got, l, "codes {codes:?}");
                }
                assert!(packed.slots().all(|s| packed.lookup(s.key) == Some(s.list)));
            }
        }
    }

    /// Pieces of every length (empty, within one word, across words) joined in parallel give
    /// their bits one after another, as written one bit at a time.
    #[test]
    fn joined_pieces_are_their_bits_one_after_another() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut next = move |n: u64| rng.random_range(0..n);
        for round in 0..200 {
            let counts: Vec<u64> = (0..1 + round % 40).map(|_| [0, next(32), next(300)][next(3) as usize]).collect();
            let pieces: Vec<Piece> = counts
                .iter()
                .map(|&bits| {
                    let mut words: Vec<u32> = (0..bits.div_ceil(32)).map(|_| next(1 << 32) as u32).collect();
                    if bits % 32 != 0 {
                        *words.last_mut().unwrap() &= (1 << (bits % 32)) - 1;
                    }
                    Piece { words, codes: Vec::new(), bases: Vec::new() }
                })
                .collect();
            let offsets: Vec<u64> = counts.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
            let total: u64 = counts.iter().sum();
            let mut joined = vec![0u32; total.div_ceil(32) as usize + PAD_WORDS];
            join_pieces(&mut joined, &pieces, &offsets, &counts);
            let mut expected = vec![0u32; joined.len()];
            for ((piece, &at), &bits) in pieces.iter().zip(&offsets).zip(&counts) {
                for b in 0..bits {
                    let bit = piece.words[(b / 32) as usize] >> (b % 32) & 1;
                    expected[((at + b) / 32) as usize] |= bit << ((at + b) % 32);
                }
            }
            assert_eq!(joined, expected, "counts {counts:?}");
        }
    }

    /// Not a test: times laying out a shard like the 50 Gbp collection's (lists of strains side
    /// by side, about 19 locations) on one thread. `cargo test --release store_speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn store_speed() {
        let layout = LocationLayout::uniform(10_000, 1 << 19, 254, 14_000);
        let hash = KeyHash::new(0);
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut next = move || rng.random::<u64>();
        let lists: Vec<(u32, Vec<u64>)> = (0..1_000_000u32)
            .map(|f| {
                let species = next() % 2000 * 5;
                let len = 1 + next() % 37;
                let w = next() % (1 << 19);
                let mut l: Vec<u64> = (0..len)
                    .map(|_| {
                        layout.pack((species + next() % 5) as u32 % 10_000, ((w + next() % 64) % (1 << 19)) as u32)
                    })
                    .collect();
                l.sort_unstable();
                l.dedup();
                (((f as u64 * 2654435761) as u32) | 1, l)
            })
            .collect();
        let mut keys: Vec<u32> = lists.iter().map(|l| l.0).collect();
        keys.sort_unstable();
        keys.dedup();
        let lists: Vec<_> = lists.into_iter().filter(|l| keys.binary_search(&l.0).is_ok()).collect();
        let mut shard = built(&layout, hash, &lists);
        // Lists in slot order, as the GPU writes them.
        let by_key: std::collections::HashMap<u32, &Vec<u64>> = lists.iter().map(|(k, l)| (*k, l)).collect();
        let mut writer = ListWriter::new(layout);
        for s in shard.slots.iter_mut().filter(|s| s.key != crate::index::bcht::EMPTY_KEY) {
            s.value = writer.add(by_key[&s.key]).unwrap();
        }
        shard.words = writer.finish();
        let numbering = GlobalWindows::uniform(10_000, 1 << 19, &layout);
        let _ = env_logger::builder().filter_level(log::LevelFilter::Trace).is_test(true).try_init();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let lists: Vec<Built> =
                shard.slots.iter().map(|s| Built::of(s, &shard.words, &layout, UNKNOWN_CODE_BITS)).collect();
            let read = t.elapsed();
            drop(lists);
            let t = std::time::Instant::now();
            let stored = pool.install(|| store(&shard, &layout, &numbering, hash)).unwrap();
            eprintln!(
                "{} slots, {} words: lists read {:.3} s, whole layout {:.3} s ({} words)",
                shard.slots.len(),
                shard.words.len(),
                read.as_secs_f64(),
                t.elapsed().as_secs_f64(),
                stored.block.len()
            );
        }
    }
}
