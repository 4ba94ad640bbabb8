//! Locations (target, window) and how a shard stores each feature's list of them.
//!
//! A location packs `target << window_bits | window` in `target_bits + window_bits` bits, as few as
//! the index's targets and longest target need (recorded in the header as [`LocationLayout`]).
//! Packed locations sort like (target, window) pairs.
//!
//! A shard's lists are one little-endian bit stream of `entry_bits`-wide entries, packed LSB first
//! into 32-bit words, with [`PAD_WORDS`] zero words at the end so that any entry can be read with
//! a fixed number of word reads. A list starts at an entry, in one of two codes, told apart by its
//! first bit:
//! - fixed (0): a head entry, `length << 1`, then each location ascending as an entry;
//! - delta (1): the length's Elias gamma code, the first location (`entry_bits` bits), then a bit
//!   stream of gamma codes, two per location, of the differences from the location before: the
//!   target's plus one, then, within the same target, the window's (less one, as windows ascend)
//!   plus one, else the zigzag of the window's change plus one; padded with zeros to a whole entry.
//!   A step of `JUMP` targets or more is a *jump* (format 12): the code `JUMP + 1`, then the
//!   location itself in `target_bits + window_bits` bits. At k = 16 a feature of a large
//!   collection is shared by unrelated species as well as by strains, and the window's change to an
//!   unrelated target was a gamma code of about 33 bits; on the 10 Gbp strain-rich collection
//!   jumps take the lists from 2.49 to 1.98 GB.
//!   (Up to the first format 9 the length took a whole head entry: a fifth of a strain-rich index.)
//!
//! The writer takes the delta form where it is less than half the fixed one (`use_delta`). The strains of a species are numbered side by
//! side and share windows, so a feature's locations mostly differ by one target and a few windows:
//! two or three bits each instead of a whole entry. Every code is below 2^32 (else the list is
//! fixed), so a code is read with two 64-bit reads. `entry_bits` is the location width, or wider
//! where the location cap needs it for the head or the taxonomy for a clade's node.
//!
//! As the build writes a shard ([`ListWriter`]), a key slot's value is either the feature's only
//! location, inline, marked by [`INLINE_FLAG`] (when entries fit in 31 bits), or the entry index
//! where the feature's list starts. The index stores neither (format 10, `index::stored_shard`):
//! it writes the lists again in slot order, a single location as a one-entry list, and fixed
//! lists short enough for the slot's code without their head; a lookup finds a list's start from
//! its bucket ([`ListRef`]). And it stores a location (a fixed list's entries, a delta list's
//! first) as its global window number ([`GlobalWindows`], format 11) in entries of the layout's
//! `stored_bits`; the delta codes stay the differences of (target, window) pairs. A stored list
//! starts at any bit (format 12): a delta list is padded to its shard's unit
//! (`index::packed_keys::SlotCodes::unit`), not to a whole entry.
//!
//! A feature in more locations than the cap is a *clade feature*: its "list" is a head of 0 (no
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
    /// Width of one entry of a shard's list stream as the build writes it (a location or a list
    /// length).
    pub entry_bits: u32,
    /// Width of one entry of a stored shard's stream, where a location is its global window
    /// number ([`GlobalWindows`]; format 11).
    pub stored_bits: u32,
}

impl LocationLayout {
    /// The tightest layout for `targets` targets whose longest has `max_windows` windows and
    /// which have `windows` in all, with lists of up to `max_list` locations and clade features
    /// naming any of `taxa` tree nodes.
    pub fn for_counts(targets: u64, max_windows: u64, windows: u64, max_list: u32, taxa: u64) -> Self {
        let (target_bits, window_bits) = (bits_for(targets), bits_for(max_windows));
        let head = bits_for((max_list as u64 + 1) * 2).max(bits_for(taxa));
        let entry_bits = (target_bits + window_bits).max(head);
        Self { target_bits, window_bits, entry_bits, stored_bits: bits_for(windows).max(head) }
    }

    /// [`Self::for_counts`] of targets of `max_windows` windows each (the tests').
    #[cfg(any(test, feature = "test-helpers"))]
    pub fn uniform(targets: u64, max_windows: u64, max_list: u32, taxa: u64) -> Self {
        Self::for_counts(targets, max_windows, targets.saturating_mul(max_windows), max_list, taxa)
    }

    /// This layout with its stored entries as the stream's: how a stored stream is written.
    pub(crate) fn as_stored(&self) -> Self {
        Self { entry_bits: self.stored_bits, ..*self }
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

/// Global window numbers: a stored list's location is the number of its window among all the
/// index's windows, target after target (the windows of the targets before it, plus its window),
/// which takes `bits_for(windows)` bits where `(target, window)` takes the bits of the target
/// count and of the longest target. Real collections mix chromosomes with plasmids and viruses:
/// `../shared/data/refs` has 101 targets and 878,225 windows, 20 bits against 7 + 16.
///
/// A number goes back to its target by a directory of the target at each `2^shift`-th window
/// and a step forward past the targets that start before it (a few: the directory has about
/// twice as many entries as there are targets); the GPU's twin is `stored_location` in
/// `cuda/classify.cuh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalWindows {
    /// The first window of each target, then the total.
    starts: Vec<u64>,
    /// The target holding window `i << shift`.
    dir: Vec<u32>,
    shift: u32,
    window_bits: u32,
    /// The last of `starts`.
    total: u64,
}

impl GlobalWindows {
    /// The numbering of targets with `windows` windows each, under `layout`.
    pub fn new(windows: impl IntoIterator<Item = u64>, layout: &LocationLayout) -> Self {
        let mut starts = vec![0u64];
        for w in windows {
            starts.push(starts.last().unwrap().saturating_add(w));
        }
        let (targets, total) = (starts.len() as u64 - 1, *starts.last().unwrap());
        let shift = bits_for(total).saturating_sub(bits_for(targets.max(1)) + 1);
        let mut dir = Vec::with_capacity(total.div_ceil(1 << shift) as usize);
        let mut t = 0usize;
        for b in 0..total.div_ceil(1 << shift) {
            while starts[t + 1] <= b << shift {
                t += 1;
            }
            dir.push(t as u32);
        }
        Self { starts, dir, shift, window_bits: layout.window_bits, total }
    }

    /// Windows in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The global window number of a location of a target it numbers.
    #[inline]
    pub fn global(&self, loc: u64) -> u64 {
        let (t, w) = (loc >> self.window_bits, loc & ((1u64 << self.window_bits) - 1));
        self.starts[t as usize] + w
    }

    /// The location of global window `g`; `UNREADABLE` past the last (a damaged stream).
    #[inline]
    pub fn location(&self, g: u64) -> u64 {
        if g >= self.total {
            return UNREADABLE;
        }
        // SAFETY: `g` is below the total, so its block is in the directory, and the walk ends at
        // the target whose end is above `g`, at the last one at most: `t + 1 < starts.len()`.
        // (The classifier's hot path: this is every location of a fixed list.)
        unsafe {
            let mut t = *self.dir.get_unchecked((g >> self.shift) as usize) as usize;
            while *self.starts.get_unchecked(t + 1) <= g {
                t += 1;
            }
            (t as u64) << self.window_bits | (g - *self.starts.get_unchecked(t))
        }
    }

    /// The numbering of `targets` targets of `windows` windows each (the tests').
    #[cfg(any(test, feature = "test-helpers"))]
    pub fn uniform(targets: u64, windows: u64, layout: &LocationLayout) -> Self {
        Self::new(std::iter::repeat_n(windows, targets as usize), layout)
    }

    /// The tables as the GPU takes them: the starts (with the total), the directory, its shift.
    pub fn tables(&self) -> (&[u64], &[u32], u32) {
        (&self.starts, &self.dir, self.shift)
    }
}

/// Bits needed to number `n` things 0..n (at least 1).
pub(crate) fn bits_for(n: u64) -> u32 {
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

    /// Appends the low `bits` (at most 64) of `value`.
    fn push_bits(&mut self, value: u64, bits: u32) {
        debug_assert!(bits == 64 || value >> bits == 0);
        self.pending |= (value as u128) << self.pending_bits;
        self.pending_bits += bits;
        while self.pending_bits >= 32 {
            self.words.push(self.pending as u32);
            self.pending >>= 32;
            self.pending_bits -= 32;
        }
    }

    /// Appends one whole entry.
    pub(crate) fn push(&mut self, value: u64) {
        self.push_bits(value, self.layout.entry_bits);
        self.entries += 1;
    }

    /// Adds one feature's sorted, non-empty `locs` and returns its slot value.
    pub fn add(&mut self, locs: &[u64]) -> Result<u32, ShardOverflow> {
        if locs.len() == 1 && self.layout.inline_single() {
            return Ok(INLINE_FLAG | locs[0] as u32);
        }
        let start = u32::try_from(self.entries).ok().filter(|&o| o < INLINE_FLAG).ok_or(ShardOverflow)?;
        let eb = self.layout.entry_bits as u64;
        let delta = delta_bits(locs, &self.layout).filter(|&bits| use_delta(bits, locs.len() as u64, eb));
        let len = locs.len() as u64;
        match delta {
            None => {
                self.push(len << 1);
                for &loc in locs {
                    self.push(loc);
                }
            }
            Some(bits) => {
                // A one bit, the length's gamma code, the first location, the codes, zeros to the
                // next entry.
                self.push_bits(1, 1);
                self.push_bits(gamma(len), gamma_len(len));
                self.push_bits(locs[0], eb as u32);
                for pair in locs.windows(2) {
                    let (a, b) = delta_codes(&self.layout, pair[0], pair[1]);
                    self.push_bits(gamma(a), gamma_len(a));
                    match a == JUMP_CODE {
                        true => self.push_bits(b, self.layout.bits()),
                        false => self.push_bits(gamma(b), gamma_len(b)),
                    }
                }
                self.end_delta(len, bits);
            }
        }
        Ok(start)
    }

    /// Zeros after a delta list of `len` locations whose codes took `bits`, to the next entry.
    fn end_delta(&mut self, len: u64, bits: u64) {
        let eb = self.layout.entry_bits as u64;
        let entries = delta_entries(len, eb, bits);
        self.push_bits(0, (entries * eb - delta_list_bits(len, eb, bits)) as u32);
        self.entries += entries;
    }

    /// Appends a delta list of `len` locations whose first is the entry `first` and whose codes
    /// are bits `codes.0..codes.0 + codes.1` of the stream `words` (a built list, stored again by
    /// `index::stored_shard` with its first location renumbered), without padding: the stored
    /// stream pads each list to its size ([`ListWriter::zeros_to`]).
    pub(crate) fn push_delta(&mut self, len: u64, first: u64, words: &[u32], codes: (u64, u64)) {
        self.push_bits(1, 1);
        self.push_bits(gamma(len), gamma_len(len));
        self.push_bits(first, self.layout.entry_bits);
        self.copy_bits(words, codes.0, codes.1);
    }

    /// Appends zeros up to bit `bit` (not before the bits written).
    pub(crate) fn zeros_to(&mut self, bit: u64) {
        let mut gap = bit - self.bits();
        while gap > 0 {
            let n = gap.min(64) as u32;
            self.push_bits(0, n);
            gap -= n as u64;
        }
    }

    /// Bits written so far.
    pub(crate) fn bits(&self) -> u64 {
        self.words.len() as u64 * 32 + self.pending_bits as u64
    }

    /// Appends bits `bit..bit + n` of the stream `words` (padded as [`ListWriter::finish`] pads),
    /// 64 at a time; counts no entry.
    fn copy_bits(&mut self, words: &[u32], mut bit: u64, n: u64) {
        let end = bit + n;
        while bit < end {
            let take = (end - bit).min(64) as u32;
            let v = bits_at(words, bit);
            self.push_bits(if take == 64 { v } else { v & ((1u64 << take) - 1) }, take);
            bit += take as u64;
        }
    }

    /// A writer whose words are reserved for `bits` bits.
    pub(crate) fn with_capacity(layout: LocationLayout, bits: u64) -> Self {
        let words = bits.div_ceil(32) as usize;
        Self { layout, words: Vec::with_capacity(words), pending: 0, pending_bits: 0, entries: 0 }
    }

    /// The stream's words without padding (the last one holding the bits not yet in a whole word).
    pub(crate) fn finish_unpadded(mut self) -> Vec<u32> {
        if self.pending_bits > 0 {
            self.words.push(self.pending as u32);
        }
        self.words
    }

    /// Adds a clade feature whose targets' LCA is tree node `node`; returns its slot value.
    pub(crate) fn add_clade(&mut self, node: u32) -> Result<u32, ShardOverflow> {
        let start = u32::try_from(self.entries).ok().filter(|&o| o < INLINE_FLAG).ok_or(ShardOverflow)?;
        self.push(0);
        self.push(node as u64);
        Ok(start)
    }

    /// The stream's words, padded.
    pub fn finish(self) -> Vec<u32> {
        let mut words = self.finish_unpadded();
        words.extend([0; PAD_WORDS]);
        words
    }
}

/// Targets apart from which a step is a jump: its location follows whole (see the module's comment).
/// The device twin is `JUMP` in `cuda/condense.cuh`.
pub(crate) const JUMP: u64 = 4;
/// The target code of a jump.
const JUMP_CODE: u64 = JUMP + 1;

/// The codes (the first a gamma code, at least 1) of location `b` after `a`: the target's
/// difference (1 for the next target, the commonest, 2 for the same target, else the difference
/// plus one), then within one target the window's less one (windows ascend), else its zigzag, plus
/// one, as a gamma code; or, [`JUMP`] targets on or more, [`JUMP_CODE`] and `b` itself (packed by
/// `layout`), written in `layout.bits()` bits.
#[inline]
fn delta_codes(layout: &LocationLayout, from: u64, to: u64) -> (u64, u64) {
    let (a, b) = (layout.unpack(from), layout.unpack(to));
    let dt = b.0.wrapping_sub(a.0) as u64;
    if dt >= JUMP {
        return (JUMP_CODE, to);
    }
    let t_code = match dt {
        0 => 2,
        1 => 1,
        d => d + 1,
    };
    let dw = if dt == 0 {
        b.1.wrapping_sub(a.1).wrapping_sub(1) as u64
    } else {
        let d = b.1 as i64 - a.1 as i64;
        ((d << 1) ^ (d >> 63)) as u64
    };
    (t_code, dw + 1)
}

/// Bits of one step's codes (see [`delta_codes`]).
#[inline]
fn step_bits((a, b): (u64, u64), layout: &LocationLayout) -> u64 {
    gamma_len(a) as u64 + if a == JUMP_CODE { layout.bits() as u64 } else { gamma_len(b) as u64 }
}

/// Bits of a delta list of `len` locations in `eb`-bit entries whose codes take `bits`: its flag,
/// its length's gamma code, its first location and its codes.
#[inline]
pub(crate) fn delta_list_bits(len: u64, eb: u64, bits: u64) -> u64 {
    1 + gamma_len(len) as u64 + eb + bits
}

/// Entries a delta list takes (see [`delta_list_bits`]).
#[inline]
pub(crate) fn delta_entries(len: u64, eb: u64, bits: u64) -> u64 {
    delta_list_bits(len, eb, bits).div_ceil(eb)
}

/// Whether a list of `len` locations whose delta codes take `bits` is delta-coded: when that
/// takes less than half the fixed entries. A delta list decodes a few times slower, and real
/// strains' lists (windows shifted by rearrangements) rarely save more; lists of strains that share
/// their windows save three quarters.
#[inline]
fn use_delta(bits: u64, len: u64, eb: u64) -> bool {
    2 * bits < (len - 1) * eb
}

/// Largest code the delta form holds: a code is read as its zeros, then as many more bits.
pub const MAX_CODE: u64 = (1 << 32) - 1;

/// Bits of the delta codes of sorted `locs` after the first, `None` if a code is too large.
fn delta_bits(locs: &[u64], layout: &LocationLayout) -> Option<u64> {
    let mut bits = 0;
    for pair in locs.windows(2) {
        let step = delta_codes(layout, pair[0], pair[1]);
        if step.0 != JUMP_CODE && step.1 > MAX_CODE {
            return None;
        }
        bits += step_bits(step, layout);
    }
    Some(bits)
}

/// Elias gamma, LSB first: `z` zeros, a one, then the low `z` bits of `x` (`z` = its top bit).
#[inline]
fn gamma(x: u64) -> u64 {
    let z = 63 - x.leading_zeros();
    1 << z | (x & ((1 << z) - 1)) << (z + 1)
}

#[inline]
fn gamma_len(x: u64) -> u32 {
    2 * (63 - x.leading_zeros()) + 1
}

/// 64 bits of `words` from bit `bit` (which the caller keeps at least 64 bits before the end of
/// the padded words).
#[inline]
fn bits_at(words: &[u32], bit: u64) -> u64 {
    let (w, shift) = ((bit / 32) as usize, (bit % 32) as u32);
    let three = words[w] as u128 | (words[w + 1] as u128) << 32 | (words[w + 2] as u128) << 64;
    (three >> shift) as u64
}

/// Reads entry `i` of a stream of `eb`-bit entries.
#[inline]
pub(crate) fn entry(words: &[u32], eb: u32, i: u64) -> u64 {
    entry_at(words, eb, i * eb as u64)
}

/// Reads the `eb`-bit entry at bit `bit` of a stream (a stored stream's entries start at any bit).
#[inline]
pub(crate) fn entry_at(words: &[u32], eb: u32, bit: u64) -> u64 {
    let (w, shift) = ((bit / 32) as usize, (bit % 32) as u32);
    let mask = low_bits(eb);
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
    /// `len` locations, one entry each, from bit `bit`: global window numbers in a stored stream
    /// (`windows`), packed locations in a built one.
    Packed {
        words: &'a [u32],
        entry_bits: u32,
        bit: u64,
        len: usize,
        windows: Option<&'a GlobalWindows>,
    },
    /// `len` locations: `first_loc`, then delta codes from bit `bit`, which end by bit `end`
    /// (a jump's location in `loc_bits`).
    Delta {
        words: &'a [u32],
        window_bits: u32,
        loc_bits: u32,
        first_loc: u64,
        bit: u64,
        end: u64,
        len: usize,
    },
    /// A feature over the location cap: the tree node of its targets' LCA.
    Clade(u32),
}

/// Where a feature's list is in its shard's stored stream, as a lookup finds it in the key
/// index (`index::packed_keys`: from its bucket's first entry and its slot's code, format 10):
/// the entry it starts at and what kind of list is there. Packed in a `u64` as the GPU's lookups
/// hand it on: `start << 8 | kind`, the kind being
/// - `1..=``ListRef::MAX_FIXED`: a fixed list of that many locations, one entry each, no head;
/// - 0: a list that says what it is ([`LocationList::decode`]: a head, a delta list or a clade);
/// - `ListRef::ESCAPED`` + k`: the `k`-th of its bucket's escaped lists, whose lists follow
///   the bucket's others from `start` on, each after an entry with its length in entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListRef(pub u64);

impl ListRef {
    pub(crate) const MAX_FIXED: u64 = 239;
    pub(crate) const ESCAPED: u64 = 240;
    /// Escaped lists a bucket can have (one a slot).
    pub(crate) const MAX_ESCAPED: u64 = 16;

    #[inline]
    pub fn fixed(start: u64, len: u64) -> Self {
        debug_assert!((1..=Self::MAX_FIXED).contains(&len));
        Self(start << 8 | len)
    }

    #[inline]
    pub(crate) fn described(start: u64) -> Self {
        Self(start << 8)
    }

    #[inline]
    pub fn escaped(run_end: u64, k: u64) -> Self {
        debug_assert!(k < Self::MAX_ESCAPED);
        Self(run_end << 8 | (Self::ESCAPED + k))
    }

    #[inline]
    pub fn start(self) -> u64 {
        self.0 >> 8
    }

    #[inline]
    pub fn kind(self) -> u64 {
        self.0 & 0xff
    }
}

/// What a location that cannot be decoded (a damaged stream) reads as: a target past any index's.
pub(crate) const UNREADABLE: u64 = u64::MAX;

impl<'a> LocationList<'a> {
    /// Decodes a slot value of a shard as the build writes it (`words` its stream).
    #[inline]
    pub fn decode(value: u32, words: &'a [u32], layout: &LocationLayout) -> Self {
        if value & INLINE_FLAG != 0 && layout.inline_single() {
            return LocationList::Single((value & !INLINE_FLAG) as u64);
        }
        Self::decode_at(value as u64 * layout.entry_bits as u64, words, layout, None)
    }

    /// The list from bit `at` of a stream of `layout`'s entries, whose locations are global
    /// window numbers if `windows` is given (a stored stream), else packed (a built one).
    #[inline]
    fn decode_at(at: u64, words: &'a [u32], layout: &LocationLayout, windows: Option<&'a GlobalWindows>) -> Self {
        let eb = layout.entry_bits as u64;
        // Bounds are checked here and as codes are read, so that reading cannot fail: a damaged
        // index opened without verification gives empty lists or unreadable locations, not a crash.
        let real_bits = words.len().saturating_sub(PAD_WORDS) as u64 * 32;
        let empty = LocationList::Packed { words, entry_bits: eb as u32, bit: 0, len: 0, windows };
        // Every list is two entries or more (a delta list's flag, length and first location).
        if at.saturating_add(2 * eb) > real_bits {
            return empty;
        }
        let head = entry_at(words, eb as u32, at);
        if head & 1 == 1 {
            // A delta list: the length's gamma code after the flag, then the first location.
            let mut bit = at + 1;
            let Some(len) = read_gamma(words, &mut bit, real_bits) else { return empty };
            // Each location after the first takes two codes of a bit or more: a longer length is
            // a damaged stream's (and would have a reader count to 2^32).
            if bit + eb > real_bits || len > (real_bits - bit - eb) / 2 + 1 {
                return empty;
            }
            let mask = low_bits(eb as u32);
            let first = bits_at(words, bit) & mask;
            let first_loc = windows.map_or(first, |g| g.location(first));
            return LocationList::Delta {
                words,
                window_bits: layout.window_bits,
                loc_bits: layout.bits(),
                first_loc,
                bit: bit + eb,
                end: real_bits,
                len: len as usize,
            };
        }
        match (head >> 1).min(u32::MAX as u64) as usize {
            // A clade feature; a node past the tree (a damaged index) is left to the reader, which
            // checks it against its tree.
            0 => LocationList::Clade(entry_at(words, eb as u32, at + eb).min(u32::MAX as u64) as u32),
            // A fixed list, whose second entry is its first location.
            len => match (len as u64 + 1).saturating_mul(eb) > real_bits - at {
                true => empty,
                false => LocationList::Packed { words, entry_bits: eb as u32, bit: at + eb, len, windows },
            },
        }
    }

    /// The list `r` (from a bit of the stream) points to in a stored shard's stream `words`, whose locations `windows`
    /// numbers (bounds checked as in [`LocationList::decode`]: a damaged index gives an empty list).
    #[inline]
    pub fn at(r: ListRef, words: &'a [u32], layout: &LocationLayout, windows: &'a GlobalWindows) -> Self {
        let stored = layout.as_stored();
        let eb = stored.entry_bits as u64;
        let real_bits = words.len().saturating_sub(PAD_WORDS) as u64 * 32;
        let windows = Some(windows);
        let empty = LocationList::Packed { words, entry_bits: eb as u32, bit: 0, len: 0, windows };
        let (mut start, kind) = (r.start(), r.kind());
        match kind {
            0 => Self::decode_at(start, words, &stored, windows),
            len if len <= ListRef::MAX_FIXED => match start.saturating_add(len * eb) > real_bits {
                true => empty,
                false => LocationList::Packed { words, entry_bits: eb as u32, bit: start, len: len as usize, windows },
            },
            escaped => {
                // Past the bucket's other escaped lists, each after its length in entries.
                for _ in 0..(escaped - ListRef::ESCAPED).min(ListRef::MAX_ESCAPED) {
                    if start.saturating_add(eb) > real_bits {
                        return empty;
                    }
                    let size = entry_at(words, eb as u32, start);
                    start = start.saturating_add(eb).saturating_add(size.saturating_mul(eb));
                }
                Self::decode_at(start.saturating_add(eb), words, &stored, windows)
            }
        }
    }

    /// The bit after a delta list's last code (readable or not); 0 for other lists. (Every list
    /// of a shard is walked so when the build lays it out: codes are read from a window of the
    /// stream, not one load a code as [`read_step`] reads them.)
    pub(crate) fn end_bit(&self) -> u64 {
        let LocationList::Delta { words, bit, end, len, loc_bits, .. } = *self else { return 0 };
        let mut codes = CodeReader::new(words, bit, end);
        for _ in 1..len {
            if !codes.skip_step(loc_bits) {
                return end;
            }
        }
        codes.bit
    }

    /// The locations in the list (0 for a clade feature).
    pub fn len(&self) -> usize {
        match self {
            LocationList::Single(_) => 1,
            LocationList::Packed { len, .. } | LocationList::Delta { len, .. } => *len,
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

    /// Appends every location to `out` (the classifier's hot path).
    #[inline]
    pub fn append_to(&self, out: &mut Vec<u64>) {
        match *self {
            LocationList::Single(loc) => out.push(loc),
            LocationList::Packed { words, entry_bits, mut bit, len, windows } if entry_bits <= 32 => {
                out.reserve(len);
                let eb = entry_bits as u64;
                let mask = (1u64 << eb) - 1;
                for _ in 0..len {
                    let w = (bit / 32) as usize;
                    let two = words[w] as u64 | (words[w + 1] as u64) << 32;
                    let e = (two >> (bit % 32)) & mask;
                    out.push(windows.map_or(e, |g| g.location(e)));
                    bit += eb;
                }
            }
            LocationList::Delta { words, window_bits, loc_bits, first_loc, bit, end, len } => {
                out.reserve(len);
                out.push(first_loc);
                let mask = (1u64 << window_bits) - 1;
                let (mut t, mut w) = ((first_loc >> window_bits) as u32, (first_loc & mask) as u32);
                // The classifier's hot path for lists of strains side by side: codes read from a
                // window of the stream (as `read_step` reads them, one load per code).
                let mut codes = CodeReader::new(words, bit, end);
                for k in 1..len {
                    let Some((a, b)) = codes.step(loc_bits) else {
                        out.extend(std::iter::repeat_n(UNREADABLE, len - k));
                        return;
                    };
                    (t, w) = apply_delta((t, w), a, b, window_bits);
                    out.push((t as u64) << window_bits | (w as u64 & mask));
                }
            }
            LocationList::Clade(_) => {}
            _ => out.extend(self.iter()),
        }
    }

    /// The locations, in order; those a damaged stream cannot give read as `UNREADABLE`.
    pub fn iter(&self) -> Locations<'a> {
        Locations { list: *self, i: 0, prev: (0, 0) }
    }
}

/// The locations of a [`LocationList`], decoded one after the other.
pub struct Locations<'a> {
    list: LocationList<'a>,
    i: usize,
    /// The last (target, window) of a delta list.
    prev: (u32, u32),
}

/// The (target, window) after `prev` whose delta codes are `a` and `b` (see [`delta_codes`]; a
/// jump's `b` is the location, of `window_bits` window bits).
#[inline]
fn apply_delta((t, w): (u32, u32), a: u64, b: u64, window_bits: u32) -> (u32, u32) {
    if a == JUMP_CODE {
        return ((b >> window_bits) as u32, (b & ((1u64 << window_bits) - 1)) as u32);
    }
    let dt = match a {
        1 => 1,
        2 => 0,
        a => (a - 1) as u32,
    };
    let w = match dt {
        0 => w.wrapping_add((b - 1) as u32).wrapping_add(1),
        _ => {
            let z = b - 1;
            w.wrapping_add(((z >> 1) as i64 ^ -((z & 1) as i64)) as u32)
        }
    };
    (t.wrapping_add(dt), w)
}

/// One step's codes at `*bit` of `words` (see [`delta_codes`]), if whole before `end`: the
/// target's gamma code, then the window's, or a jump's location of `loc_bits` bits.
#[inline]
fn read_step(words: &[u32], bit: &mut u64, end: u64, loc_bits: u32) -> Option<(u64, u64)> {
    let a = read_gamma(words, bit, end)?;
    if a != JUMP_CODE {
        return Some((a, read_gamma(words, bit, end)?));
    }
    if *bit + loc_bits as u64 > end {
        return None;
    }
    let loc = bits_at(words, *bit) & low_bits(loc_bits);
    *bit += loc_bits as u64;
    Some((a, loc))
}

/// The low `bits` (1 to 64) set.
#[inline]
fn low_bits(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

/// A stream's codes, read from a 64-bit window of it that is loaded again only when a code may
/// not be whole in it. It gives what [`read_gamma`] gives at each bit, and fails where it fails.
struct CodeReader<'a> {
    words: &'a [u32],
    /// The next code's first bit, and the end of the readable stream.
    bit: u64,
    end: u64,
    /// Bits `bit..bit + avail` of the stream, zeros above.
    window: u64,
    avail: u32,
}

impl<'a> CodeReader<'a> {
    fn new(words: &'a [u32], bit: u64, end: u64) -> Self {
        let mut codes = CodeReader { words, bit, end, window: 0, avail: 0 };
        codes.load();
        codes
    }

    /// Bits from `bit` (none past the end: `bits_at` reads up to two words on, which the
    /// padding holds only below it).
    #[inline]
    fn load(&mut self) {
        (self.window, self.avail) = if self.bit < self.end { (bits_at(self.words, self.bit), 64) } else { (0, 0) };
    }

    /// Moves `n` bits on.
    #[inline]
    fn advance(&mut self, n: u32) {
        self.bit += n as u64;
        if n < self.avail {
            self.window >>= n;
            self.avail -= n;
        } else {
            (self.window, self.avail) = (0, 0);
        }
    }

    /// The next gamma code (as [`read_gamma`]).
    #[inline]
    fn gamma(&mut self) -> Option<u64> {
        let mut z = self.window.trailing_zeros();
        if 2 * z + 1 > self.avail {
            self.load();
            z = self.window.trailing_zeros();
        }
        if z > 31 || self.bit + 2 * z as u64 + 1 > self.end {
            return None;
        }
        let x = 1 << z | ((self.window >> (z + 1)) & ((1 << z) - 1));
        self.advance(2 * z + 1);
        Some(x)
    }

    /// The next `n` (1 to 64) raw bits (a jump's location), if they are whole before the end.
    #[inline]
    fn raw(&mut self, n: u32) -> Option<u64> {
        if self.bit + n as u64 > self.end {
            return None;
        }
        if n > self.avail {
            self.load();
        }
        let value = self.window & low_bits(n);
        self.advance(n);
        Some(value)
    }

    /// Skips the next step (as [`CodeReader::step`] reads it): whether it was whole. (Without
    /// the values a list's end is found at twice the speed: the build's layout reads every list.)
    #[inline]
    fn skip_step(&mut self, loc_bits: u32) -> bool {
        match self.gamma() {
            Some(JUMP_CODE) if self.bit + loc_bits as u64 <= self.end => {
                self.advance(loc_bits);
                true
            }
            Some(JUMP_CODE) | None => false,
            Some(_) => self.gamma().is_some(),
        }
    }

    /// The next step's codes (as [`read_step`]), a jump's location in `loc_bits` bits.
    #[inline]
    fn step(&mut self, loc_bits: u32) -> Option<(u64, u64)> {
        match self.gamma()? {
            JUMP_CODE => Some((JUMP_CODE, self.raw(loc_bits)?)),
            a => Some((a, self.gamma()?)),
        }
    }
}

/// One gamma code at `*bit` of `words`, if it is whole before `end` and at most [`MAX_CODE`].
#[inline]
fn read_gamma(words: &[u32], bit: &mut u64, end: u64) -> Option<u64> {
    if *bit >= end {
        return None;
    }
    let window = bits_at(words, *bit);
    let z = window.trailing_zeros() as u64;
    if z > 31 || *bit + 2 * z + 1 > end {
        return None;
    }
    // A code is at most 63 bits: it is all in the window.
    let x = 1 << z | ((window >> (z + 1)) & ((1 << z) - 1));
    *bit += 2 * z + 1;
    Some(x)
}

impl Iterator for Locations<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.i >= self.list.len() {
            return None;
        }
        self.i += 1;
        match &mut self.list {
            LocationList::Single(loc) => Some(*loc),
            LocationList::Packed { words, entry_bits, bit, windows, .. } => {
                let e = entry_at(words, *entry_bits, *bit + (self.i as u64 - 1) * *entry_bits as u64);
                Some(windows.map_or(e, |g| g.location(e)))
            }
            LocationList::Delta { words, window_bits, loc_bits, first_loc, bit, end, .. } => {
                let wb = *window_bits;
                let mask = (1u64 << wb) - 1;
                if self.i == 1 {
                    self.prev = ((*first_loc >> wb) as u32, (*first_loc & mask) as u32);
                    return Some(*first_loc);
                }
                let Some((a, b)) = read_step(words, bit, *end, *loc_bits) else {
                    // The rest is unreadable too.
                    *bit = *end;
                    return Some(UNREADABLE);
                };
                self.prev = apply_delta(self.prev, a, b, wb);
                Some((self.prev.0 as u64) << wb | (self.prev.1 as u64 & mask))
            }
            LocationList::Clade(_) => None,
        }
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
        let l = LocationLayout::uniform(101, 51_000, 254, 40);
        assert_eq!((l.target_bits, l.window_bits, l.entry_bits), (7, 16, 23));
        assert!(l.inline_single());
        // One short target: the list's head needs more bits than a location.
        assert_eq!(LocationLayout::uniform(1, 2, 254, 2).entry_bits, 9);
        // Many taxa and few targets: the clade's node needs more.
        assert_eq!(LocationLayout::uniform(1, 2, 254, 1000).entry_bits, 10);
    }

    #[test]
    fn round_trip_at_every_width() {
        for (targets, windows) in [(2, 2), (100, 1000), (1 << 16, 1 << 15), (1 << 20, 1 << 20), (1 << 32, 1 << 32)] {
            let layout = LocationLayout::uniform(targets, windows, 254, 3);
            let mut w = ListWriter::new(layout);
            // Scattered lists (fixed), strain-like runs of neighbouring targets at nearby windows
            // (delta), and the extremes: the last target and window, a window going back by all.
            let mut lists: Vec<Vec<u64>> = (0..50u64)
                .map(|f| {
                    let strains = f % 2 == 0;
                    (0..f % 7 + 1)
                        .map(|i| match strains {
                            true => layout.pack(((f + i) % targets) as u32, ((f * 5 + i % 3) % windows) as u32),
                            false => layout
                                .pack(((targets - 1) - (f * 31 + i) % targets) as u32, ((f * 7 + i) % windows) as u32),
                        })
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect()
                })
                .collect();
            let (t, w_) = ((targets - 1) as u32, (windows - 1) as u32);
            lists.push(vec![layout.pack(t - 1, w_), layout.pack(t, 0)]);
            lists.push(vec![layout.pack(0, 0), layout.pack(t, w_)]);
            lists.push(vec![layout.pack(0, 0), layout.pack(0, w_), layout.pack(1, 0), layout.pack(1, 1)]);
            let values: Vec<u32> = lists.iter().map(|l| w.add(l).unwrap()).collect();
            let clade = w.add_clade(2).unwrap();
            let words = w.finish();
            let list = LocationList::decode(clade, &words, &layout);
            assert_eq!((list.clade(), list.len(), list.iter().count()), (Some(2), 0, 0));
            let mut deltas = 0;
            for (l, &v) in lists.iter().zip(&values) {
                let list = LocationList::decode(v, &words, &layout);
                deltas += matches!(list, LocationList::Delta { .. }) as usize;
                let got: Vec<u64> = list.iter().collect();
                assert_eq!(&got, l, "layout {layout:?}");
                let mut appended = Vec::new();
                list.append_to(&mut appended);
                assert_eq!(&appended, l);
            }
            assert!(deltas >= 10, "layout {layout:?}: {deltas} delta lists");
        }
    }

    /// A strain run that also holds unrelated targets (at k = 16 a large collection's features
    /// are shared by unrelated species): each unrelated location is a jump, the jump code and the
    /// location, not a gamma code of the window's change; the list stays delta-coded and reads
    /// back, through every reader and at the widest layout too.
    #[test]
    fn jumps_to_unrelated_targets_read_back() {
        for (targets, windows) in [(5000, 50_000), (1 << 32, 1 << 32)] {
            let layout = LocationLayout::uniform(targets, windows, 254, 10);
            let (far, last_w) = ((targets - 1) as u32, (windows - 1) as u32);
            let mut list: Vec<u64> = (0..40).map(|t| layout.pack(100 + t, 4000 + t % 2)).collect();
            // Steps of JUMP - 1 targets (not a jump), JUMP (the smallest jump), and far.
            list.push(layout.pack(139 + JUMP as u32 - 1, 4002));
            list.push(layout.pack(139 + 2 * JUMP as u32 - 1, 17));
            list.extend([layout.pack(far - 1, last_w), layout.pack(far, last_w)]);
            let mut w = ListWriter::new(layout);
            let v = w.add(&list).unwrap();
            let words = w.finish();
            let decoded = LocationList::decode(v, &words, &layout);
            assert!(matches!(decoded, LocationList::Delta { .. }), "{layout:?}");
            assert_eq!(decoded.iter().collect::<Vec<_>>(), list);
            let mut appended = Vec::new();
            decoded.append_to(&mut appended);
            assert_eq!(appended, list);
            let LocationList::Delta { bit, .. } = decoded else { unreachable!() };
            assert_eq!(decoded.end_bit() - bit, delta_bits(&list, &layout).unwrap());
            // Two jumps (JUMP targets on, and to the far targets); the far targets' own steps are not.
            let jumps = (1..list.len()).filter(|&i| delta_codes(&layout, list[i - 1], list[i]).0 == JUMP_CODE).count();
            assert_eq!(jumps, 2);
        }
    }

    /// Strain-like lists cost a few bits a location: 300 neighbouring targets at one window take
    /// about 600 bits and a few entries, not 300 entries.
    #[test]
    fn neighbouring_strains_cost_two_bits_each() {
        let layout = LocationLayout::uniform(1000, 10_000, 400, 10);
        let mut w = ListWriter::new(layout);
        let list: Vec<u64> = (0..300).map(|t| layout.pack(t, 77)).collect();
        let v = w.add(&list).unwrap();
        let words = w.finish();
        assert!(words.len() * 32 < 800, "{} words", words.len());
        assert!(LocationList::decode(v, &words, &layout).iter().eq(list.iter().copied()));
    }

    /// Damaged streams: every list decodes to its length in locations, some unreadable, and never
    /// reads outside the words.
    #[test]
    fn damaged_streams_decode_without_reading_outside() {
        let layout = LocationLayout::uniform(64, 4096, 254, 10);
        let mut x = 7u64;
        for round in 0..300 {
            let words: Vec<u32> = (0..round % 40)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u32 & if round % 3 == 0 { 0x0101_0101 } else { u32::MAX }
                })
                .collect();
            for value in 0..words.len() as u32 * 2 {
                let list = LocationList::decode(value, &words, &layout);
                assert_eq!(list.iter().count(), list.len());
                let mut out = Vec::new();
                list.append_to(&mut out);
                assert!(out.iter().copied().eq(list.iter()));
                assert_eq!(list.end_bit(), end_bit_by_steps(&list), "round {round}, value {value}");
            }
        }
    }

    /// [`LocationList::end_bit`] one step at a time, as [`read_step`] reads them.
    fn end_bit_by_steps(list: &LocationList<'_>) -> u64 {
        let LocationList::Delta { words, mut bit, end, len, loc_bits, .. } = *list else { return 0 };
        for _ in 1..len {
            if read_step(words, &mut bit, end, loc_bits).is_none() {
                return end;
            }
        }
        bit
    }

    /// Whole lists (every code length, jumps of short and long locations) and lists cut short by
    /// the stream's end: the skipped codes end where the read ones do.
    #[test]
    fn skipped_codes_end_where_read_codes_end() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(99);
        let mut next = move |n: u64| rng.random_range(0..n);
        for (targets, windows) in [(64u64, 4096u64), (1 << 20, 1 << 22), (1 << 31, 1 << 31)] {
            let layout = LocationLayout::uniform(targets, windows, 254, 10);
            let mut w = ListWriter::new(layout);
            let mut values = Vec::new();
            for i in 0..400u64 {
                // Windows far apart (long codes) or side by side, targets near (deltas) or far (jumps).
                let spread = [2, 64, windows][(i % 3) as usize];
                let mut list: Vec<u64> = (0..2 + next(60))
                    .map(|_| layout.pack(next(targets.min(8 + i)) as u32, next(spread.min(windows)) as u32))
                    .collect();
                list.sort_unstable();
                list.dedup();
                values.push(w.add(&list).unwrap());
            }
            let words = w.finish();
            for cut in [words.len(), words.len() * 2 / 3, words.len() / 3] {
                let mut cut_words = words[..cut].to_vec();
                cut_words.extend([0; PAD_WORDS]);
                let deltas = values
                    .iter()
                    .map(|&v| LocationList::decode(v, &cut_words, &layout))
                    .filter(|l| matches!(l, LocationList::Delta { .. }))
                    .inspect(|l| assert_eq!(l.end_bit(), end_bit_by_steps(l)))
                    .count();
                assert!(deltas > 20, "{deltas} delta lists");
            }
        }
    }

    /// Targets of every size (empty ones, one window, long ones side by side with short ones):
    /// each window's global number goes back to its location, and a number past the last reads
    /// as unreadable.
    #[test]
    fn global_window_numbers_go_back_to_their_locations() {
        for sizes in [
            vec![],
            vec![1],
            vec![0, 3, 0, 0, 5],
            vec![47_457, 1_571, 961, 38, 31, 26_439, 0, 1, 9_575],
            (0..300).map(|t| t * 37 % 101).collect(),
        ] {
            let max = sizes.iter().copied().max().unwrap_or(1).max(1);
            let layout = LocationLayout::for_counts(sizes.len().max(1) as u64, max, sizes.iter().sum(), 64, 3);
            let g = GlobalWindows::new(sizes.iter().copied(), &layout);
            assert_eq!(g.total(), sizes.iter().sum::<u64>());
            assert!(bits_for(g.total()) <= layout.stored_bits);
            let mut n = 0;
            for (t, &size) in sizes.iter().enumerate() {
                for w in 0..size {
                    let loc = layout.pack(t as u32, w as u32);
                    assert_eq!(g.global(loc), n);
                    assert_eq!(g.location(n), loc, "sizes {sizes:?}, target {t}, window {w}");
                    n += 1;
                }
            }
            assert_eq!(g.location(n), UNREADABLE);
            assert_eq!(g.location(u64::MAX), UNREADABLE);
        }
        // refs' 101 targets in 878,225 windows: 20 bits, not 7 + 16.
        let l = LocationLayout::for_counts(101, 47_625, 878_225, 64, 207);
        assert_eq!((l.bits(), l.stored_bits), (23, 20));
    }

    /// Stored lists of targets of unequal sizes read back through the numbering: fixed and delta
    /// lists, singles and clades.
    #[test]
    fn stored_lists_of_unequal_targets_read_back() {
        let sizes: Vec<u64> = (0..200u64).map(|t| if t % 9 == 0 { 3000 } else { t % 40 + 1 }).collect();
        let total = sizes.iter().sum();
        let layout = LocationLayout::for_counts(200, 3000, total, 64, 30);
        let numbering = GlobalWindows::new(sizes.iter().copied(), &layout);
        let hash = crate::index::bcht::KeyHash::new(3);
        let lists: Vec<(u32, Vec<u64>)> = (0..2000u32)
            .map(|f| {
                let n = [1, 1, 2, 5, 30, 0][f as usize % 6];
                let mut l: Vec<u64> = (0..n)
                    .map(|i| {
                        let t = (f * 13 + i * (1 + f % 3)) % 200;
                        layout.pack(t, (f + i) % sizes[t as usize] as u32)
                    })
                    .collect();
                l.sort_unstable();
                l.dedup();
                ((f + 1) << 3 | 2, l)
            })
            .collect();
        let built = crate::index::stored_shard::built(&layout, hash, &lists);
        let stored = crate::index::stored_shard::store(&built, &layout, &numbering, hash).unwrap();
        let packed = stored.packed_keys(2);
        for (key, l) in &lists {
            let got = LocationList::at(packed.lookup(*key).unwrap(), stored.words(), &layout, &numbering);
            match l.is_empty() {
                true => assert!(got.clade().is_some()),
                false => {
                    assert_eq!(&got.iter().collect::<Vec<_>>(), l, "key {key}");
                    let mut appended = Vec::new();
                    got.append_to(&mut appended);
                    assert_eq!(&appended, l);
                }
            }
        }
    }

    #[test]
    fn a_32_bit_layout_stores_single_locations_in_the_list() {
        let layout = LocationLayout { target_bits: 16, window_bits: 16, entry_bits: 32, stored_bits: 32 };
        assert!(!layout.inline_single());
        let mut w = ListWriter::new(layout);
        let loc = layout.pack(0xffff, 0xffff);
        let v = w.add(&[loc]).unwrap();
        let words = w.finish();
        assert_eq!(words, vec![2, u32::MAX, 0, 0]);
        assert_eq!(LocationList::decode(v, &words, &layout).iter().next(), Some(loc));
    }
}
