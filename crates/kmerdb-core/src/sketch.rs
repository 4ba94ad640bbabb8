//! K-mers and minhash sketches of windows: the one definition that the CPU build, the classifier and
//! the GPU kernels (`cuda/sketch.cuh`) all follow, bit for bit.
//!
//! The method is MetaCache's (REFERENCE.md §2):
//! - bases are 2-bit codes (A=0 C=1 G=2 T/U=3, case-insensitive); a k-mer containing any other
//!   character is skipped;
//! - the canonical k-mer is the smaller of the k-mer and its reverse complement, as a `u64`;
//! - each sequence is cut into windows of `window` bases starting every `stride` bases; window `i`
//!   holds the k-mers starting at positions `i * stride ..= i * stride + window - k` (clipped to the
//!   sequence). With the default stride `window - k + 1` every k-mer lies in exactly one window;
//! - a window's sketch is its `sketch_size` smallest *distinct* k-mer hashes, ascending.
//!
//! The hash (`hash_kmer`) is part of the index format: it can never change for an existing
//! [`HASH_FUNCTION_ID`]. It is murmur3's 64-bit finalizer of `canonical ^ seed`, keeping the upper
//! 32 bits, with `u32::MAX` folded onto `u32::MAX - 1` so that `u32::MAX` is free to mark "no k-mer"
//! here and an empty slot in the index's key table.

use thiserror::Error;

/// Identifies `hash_kmer` in index headers. A new hash function gets a new id; this one never changes.
pub const HASH_FUNCTION_ID: u32 = 1;
/// The hash seed of indexes built by default.
pub const DEFAULT_HASH_SEED: u64 = 0;
/// The largest k a 64-bit k-mer holds.
pub(crate) const MAX_K: u32 = 32;
/// The largest sketch size: sketches are kept in a fixed-size array on the GPU.
pub const MAX_SKETCH_SIZE: u32 = 64;
/// Marks a position without a valid k-mer; never a feature (see `hash_kmer`).
pub const NO_FEATURE: u32 = u32::MAX;

/// A feature: the 32-bit hash value of a canonical k-mer, the key stored in the index.
pub type Feature = u32;

/// Invalid sketching parameters, found before any work starts.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParamError {
    #[error("k must be between 1 and {MAX_K}, got {0}")]
    K(u32),
    #[error("the window ({window}) must be at least k ({k})")]
    WindowShorterThanK { window: u32, k: u32 },
    #[error(
        "the stride must be between 1 and window - k + 1 = {max} so that no k-mer falls between windows, got {stride}"
    )]
    Stride { stride: u32, max: u32 },
    #[error("the sketch size must be between 1 and {MAX_SKETCH_SIZE}, got {0}")]
    SketchSize(u32),
}

/// Checked parameters that shape k-mers, windows and sketches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SketchParams {
    pub k: u32,
    pub window: u32,
    pub stride: u32,
    pub sketch_size: u32,
    pub hash_seed: u64,
}

impl std::fmt::Display for SketchParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "k={} window={} stride={} sketch-size={} seed={}",
            self.k, self.window, self.stride, self.sketch_size, self.hash_seed
        )
    }
}

impl SketchParams {
    /// Validates the parameters; `stride` defaults to `window - k + 1`.
    ///
    /// ```
    /// let p = kmerdb_core::sketch::SketchParams::new(16, 127, None, 16, 0).unwrap();
    /// assert_eq!(p.stride, 112);
    /// assert_eq!(p.window_count(1000), 9);
    /// ```
    pub fn new(k: u32, window: u32, stride: Option<u32>, sketch_size: u32, hash_seed: u64) -> Result<Self, ParamError> {
        if k == 0 || k > MAX_K {
            return Err(ParamError::K(k));
        }
        if window < k {
            return Err(ParamError::WindowShorterThanK { window, k });
        }
        let max = window - k + 1;
        let stride = stride.unwrap_or(max);
        if stride == 0 || stride > max {
            return Err(ParamError::Stride { stride, max });
        }
        if sketch_size == 0 || sketch_size > MAX_SKETCH_SIZE {
            return Err(ParamError::SketchSize(sketch_size));
        }
        Ok(Self { k, window, stride, sketch_size, hash_seed })
    }

    /// Windows of a sequence of `len` bases: one per stride whose first k-mer fits.
    pub fn window_count(&self, len: usize) -> u64 {
        let k = self.k as usize;
        if len < k { 0 } else { ((len - k) / self.stride as usize + 1) as u64 }
    }

    /// The k-mer start positions of window `w`, clipped to a sequence of `len` bases.
    pub(crate) fn window_kmer_range(&self, w: u64, len: usize) -> std::ops::Range<usize> {
        let k = self.k as usize;
        let first = w as usize * self.stride as usize;
        let last = (first + (self.window - self.k) as usize).min(len - k);
        first..last + 1
    }
}

/// 2-bit code of a base, or 4 for anything that is not A, C, G, T or U (either case).
#[inline]
pub(crate) fn encode_base(b: u8) -> u8 {
    BASE_CODES[b as usize]
}

const BASE_CODES: [u8; 256] = {
    let mut t = [4u8; 256];
    t[b'A' as usize] = 0;
    t[b'a' as usize] = 0;
    t[b'C' as usize] = 1;
    t[b'c' as usize] = 1;
    t[b'G' as usize] = 2;
    t[b'g' as usize] = 2;
    t[b'T' as usize] = 3;
    t[b't' as usize] = 3;
    t[b'U' as usize] = 3;
    t[b'u' as usize] = 3;
    t
};

/// Whether `seq` holds a k-mer: `k` valid bases (A, C, G, T or U) in a row. A sequence without
/// one (shorter than k, blank, or N at least every k bases) gives no feature at all.
pub fn has_kmer(seq: &[u8], k: usize) -> bool {
    let mut run = 0;
    seq.iter().any(|&b| {
        run = if encode_base(b) < 4 { run + 1 } else { 0 };
        run >= k
    })
}

/// murmur3's 64-bit finalizer.
#[inline]
pub fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// The feature of a canonical k-mer ([`HASH_FUNCTION_ID`] 1). Never returns [`NO_FEATURE`].
#[inline]
pub(crate) fn hash_kmer(canonical: u64, seed: u64) -> Feature {
    let h = (fmix64(canonical ^ seed) >> 32) as u32;
    if h == NO_FEATURE { NO_FEATURE - 1 } else { h }
}

/// Fills `out[i]` with the feature of the k-mer starting at `seq[i]`, or [`NO_FEATURE`] where that
/// k-mer holds a non-ACGT character; `out` gets `seq.len() - k + 1` entries (none if shorter).
pub fn kmer_features(seq: &[u8], params: &SketchParams, out: &mut Vec<Feature>) {
    out.clear();
    let k = params.k as usize;
    if seq.len() < k {
        return;
    }
    out.reserve(seq.len() - k + 1);
    let mask: u64 = if k == 32 { u64::MAX } else { (1u64 << (2 * k)) - 1 };
    let rc_shift = 2 * (k as u32 - 1);
    let (mut fwd, mut rev, mut valid) = (0u64, 0u64, 0usize);
    for (i, &b) in seq.iter().enumerate() {
        let c = encode_base(b);
        if c > 3 {
            valid = 0;
        } else {
            fwd = ((fwd << 2) | c as u64) & mask;
            rev = (rev >> 2) | (((3 - c) as u64) << rc_shift);
            valid += 1;
        }
        if i + 1 >= k {
            out.push(if valid >= k { hash_kmer(fwd.min(rev), params.hash_seed) } else { NO_FEATURE });
        }
    }
}

/// The `s` smallest distinct values of `features` (ignoring [`NO_FEATURE`]), ascending, into `sketch`.
///
/// Hashes are uniform, so the `s`-th smallest of `n` lies near `s / n` of the range: values below
/// a threshold that admits about `1.5s + 8` of them are gathered, sorted and deduplicated, and only
/// when fewer than `s` distinct values get through (about one window in a thousand for s = 16)
/// is everything taken (`2s + 8` sorted a third more values: 1-2% of a CPU classification). The
/// result is exactly the bounded insertion the GPU kernel does (`cuda/sketch.cuh`); this is faster
/// on the CPU because the filter's branch is predictable.
pub(crate) fn smallest_distinct(features: &[Feature], s: usize, sketch: &mut Vec<Feature>) {
    sketch.clear();
    if s == 0 {
        return;
    }
    let n = features.len().max(1) as u64;
    let mut threshold = ((3 * s as u64 / 2 + 8) << 32) / n;
    loop {
        let limit = threshold.min(NO_FEATURE as u64) as Feature;
        sketch.clear();
        sketch.extend(features.iter().copied().filter(|&f| f < limit));
        sketch.sort_unstable();
        sketch.dedup();
        if sketch.len() >= s || limit == NO_FEATURE {
            sketch.truncate(s);
            return;
        }
        threshold = NO_FEATURE as u64;
    }
}

/// A reference record waiting to be sketched by a build (on the CPU or a GPU): its target and the
/// global number of its first window.
pub struct Pending {
    pub target: u32,
    /// Global number of its first window.
    pub first_window: u64,
    pub seq: Vec<u8>,
}

/// Sketches windows of sequences, reusing its buffers between calls.
pub struct Sketcher {
    params: SketchParams,
    features: Vec<Feature>,
    sketch: Vec<Feature>,
    /// `feature_positions`' features with their indices, sorted (kept: a weak call's check took
    /// two allocations a read).
    by_value: Vec<(Feature, u32)>,
}

impl Sketcher {
    pub fn new(params: SketchParams) -> Self {
        let sketch = Vec::with_capacity(params.sketch_size as usize);
        Self { params, features: Vec::new(), sketch, by_value: Vec::new() }
    }

    pub fn params(&self) -> &SketchParams {
        &self.params
    }

    /// Calls `f(window_id, sketch)` for windows `windows` of `seq`, in order. Windows without a
    /// valid k-mer are skipped. Only the bases these windows need are read, so a long sequence can
    /// be sketched in independent chunks of windows.
    pub fn sketch_windows(&mut self, seq: &[u8], windows: std::ops::Range<u64>, mut f: impl FnMut(u64, &[Feature])) {
        let p = self.params;
        let n = p.window_count(seq.len());
        let windows = windows.start.min(n)..windows.end.min(n);
        if windows.is_empty() {
            return;
        }
        let k = p.k as usize;
        let first_kmer = p.window_kmer_range(windows.start, seq.len()).start;
        let end_kmer = p.window_kmer_range(windows.end - 1, seq.len()).end;
        kmer_features(&seq[first_kmer..end_kmer + k - 1], &p, &mut self.features);
        for w in windows {
            let r = p.window_kmer_range(w, seq.len());
            let local = r.start - first_kmer..r.end - first_kmer;
            smallest_distinct(&self.features[local], p.sketch_size as usize, &mut self.sketch);
            if !self.sketch.is_empty() {
                f(w, &self.sketch);
            }
        }
    }

    /// The features of a read. A read of up to two windows' worth of k-mers is one window whose
    /// sketch keeps the reference sketches' density (`sketch_size` per `window - k + 1` k-mers):
    /// its smallest hashes are the ones most likely to be in the reference sketches, so this finds
    /// about as many of them as cutting the read into reference-sized windows, with fewer
    /// lookups. Longer reads are cut into windows like references.
    pub fn read_features(&mut self, seq: &[u8], out: &mut Vec<Feature>) {
        self.sketch_read(seq, out);
    }

    /// [`Sketcher::read_features`]; true when the read was one window, so that `self.features`
    /// holds all its k-mers afterwards.
    fn sketch_read(&mut self, seq: &[u8], out: &mut Vec<Feature>) -> bool {
        let p = self.params;
        let per_window = (p.window - p.k + 1) as usize;
        let kmers = (seq.len() + 1).saturating_sub(p.k as usize);
        if kmers > 2 * per_window {
            self.sketch_all(seq, |_, sketch| out.extend_from_slice(sketch));
            return false;
        }
        let s = ((p.sketch_size as usize * kmers + per_window / 2) / per_window).max(1);
        kmer_features(seq, &p, &mut self.features);
        smallest_distinct(&self.features, s, &mut self.sketch);
        out.extend_from_slice(&self.sketch);
        true
    }

    /// Where each of `features` (some of `seq`'s, as [`Sketcher::read_features`] gave them) first
    /// occurs in `seq`: the start of its first k-mer, into `out`; `u32::MAX` for one `seq` lacks.
    /// For the evidence rule of weak calls, which groups a read's found features by position.
    /// One pass over the k-mers with a binary search in the sorted features, not a scan of the
    /// k-mers per feature: a long read has thousands of each.
    pub fn feature_positions(&mut self, seq: &[u8], features: &[Feature], out: &mut Vec<u32>) {
        kmer_features(seq, &self.params, &mut self.features);
        self.positions_in_kmers(features, out);
    }

    /// [`Sketcher::read_features`] and [`Sketcher::feature_positions`] of `seq` at once: its
    /// features into `features` (cleared first), each one's position into `positions`. A read
    /// of one window's sketch lists its k-mers once for both (the GPU's weak calls are sketched
    /// again on the host, and listing the k-mers twice was half of that).
    pub fn read_features_and_positions(&mut self, seq: &[u8], features: &mut Vec<Feature>, positions: &mut Vec<u32>) {
        features.clear();
        match self.sketch_read(seq, features) {
            true => self.positions_in_kmers(features, positions),
            // Cut into windows: its k-mers are listed again, whole.
            false => self.feature_positions(seq, features, positions),
        }
    }

    /// Where each of `features` first occurs among the k-mers in `self.features`.
    fn positions_in_kmers(&mut self, features: &[Feature], out: &mut Vec<u32>) {
        // (feature, its index in `features`): a long read's windows may share a feature.
        let sorted = &mut self.by_value;
        sorted.clear();
        sorted.extend(features.iter().copied().zip(0..));
        sorted.sort_unstable();
        let largest = sorted.last().map_or(0, |s| s.0);
        out.clear();
        out.resize(features.len(), u32::MAX);
        for (pos, &h) in self.features.iter().enumerate().filter(|&(_, &h)| h <= largest) {
            let from = sorted.partition_point(|s| s.0 < h);
            for &(_, i) in sorted[from..].iter().take_while(|s| s.0 == h) {
                out[i as usize] = out[i as usize].min(pos as u32);
            }
        }
    }

    /// Sketches every window of `seq`.
    pub fn sketch_all(&mut self, seq: &[u8], f: impl FnMut(u64, &[Feature])) {
        self.sketch_windows(seq, 0..u64::MAX, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// Positions are each feature's first k-mer, for a long read too (cut into windows, which
    /// may share features), as the obvious scan finds them.
    #[test]
    fn feature_positions_are_first_occurrences() {
        let p = SketchParams::new(12, 40, None, 8, 3).unwrap();
        let mut rng = StdRng::seed_from_u64(5);
        // A repeat, so that windows share features.
        let unit: Vec<u8> = (0..60).map(|_| b"ACGT"[rng.random_range(0..4)]).collect();
        let seq: Vec<u8> = unit.iter().chain(&unit).chain(&unit).copied().collect();
        let mut sketcher = Sketcher::new(p);
        let (mut features, mut positions, mut kmers) = (Vec::new(), Vec::new(), Vec::new());
        sketcher.read_features(&seq, &mut features);
        assert!(features.len() > features.iter().collect::<std::collections::HashSet<_>>().len(), "shared features");
        sketcher.feature_positions(&seq, &features, &mut positions);
        kmer_features(&seq, &p, &mut kmers);
        let want: Vec<u32> = features.iter().map(|f| kmers.iter().position(|k| k == f).unwrap() as u32).collect();
        assert_eq!(positions, want);
    }

    /// Both at once give what each gives alone, for reads of one window's sketch and longer ones
    /// cut into windows, with an N, and shorter than k; one after another (the k-mers of the one
    /// before must not leak into the next).
    #[test]
    fn features_and_positions_at_once_equal_each_alone() {
        let p = SketchParams::new(12, 40, None, 8, 3).unwrap();
        let mut rng = StdRng::seed_from_u64(9);
        let mut sketcher = Sketcher::new(p);
        let mut alone = Sketcher::new(p);
        for len in [0, 5, 11, 12, 30, 57, 58, 80, 150, 400] {
            let mut seq: Vec<u8> = (0..len).map(|_| b"ACGT"[rng.random_range(0..4)]).collect();
            if len > 20 {
                seq[len / 2] = b'N';
            }
            let (mut features, mut positions) = (vec![7], Vec::new());
            sketcher.read_features_and_positions(&seq, &mut features, &mut positions);
            let (mut want_features, mut want_positions) = (Vec::new(), Vec::new());
            alone.read_features(&seq, &mut want_features);
            alone.feature_positions(&seq, &want_features, &mut want_positions);
            assert_eq!((&features, &positions), (&want_features, &want_positions), "{len} bases");
            assert!(len < 40 || !features.is_empty(), "{len} bases: some features");
        }
    }

    /// The specification, written the slow and obvious way: string k-mers, explicit reverse
    /// complement, sort and dedup.
    fn brute_force(seq: &[u8], p: &SketchParams) -> Vec<(u64, Vec<Feature>)> {
        let k = p.k as usize;
        let mut out = Vec::new();
        let mut w = 0u64;
        loop {
            let start = w as usize * p.stride as usize;
            if seq.len() < k || start > seq.len() - k {
                break;
            }
            let end = (start + p.window as usize).min(seq.len());
            let mut hashes = Vec::new();
            for i in start..=end - k {
                let kmer = &seq[i..i + k];
                let Some(code) = two_bit(kmer) else { continue };
                let rc: Vec<u8> = kmer
                    .iter()
                    .rev()
                    .map(|b| match b.to_ascii_uppercase() {
                        b'A' => b'T',
                        b'C' => b'G',
                        b'G' => b'C',
                        _ => b'A',
                    })
                    .collect();
                let rc_code = two_bit(&rc).unwrap();
                hashes.push(hash_kmer(code.min(rc_code), p.hash_seed));
            }
            hashes.sort_unstable();
            hashes.dedup();
            hashes.truncate(p.sketch_size as usize);
            if !hashes.is_empty() {
                out.push((w, hashes));
            }
            w += 1;
        }
        out
    }

    fn two_bit(kmer: &[u8]) -> Option<u64> {
        kmer.iter().try_fold(0u64, |acc, b| {
            let c = match b.to_ascii_uppercase() {
                b'A' => 0,
                b'C' => 1,
                b'G' => 2,
                b'T' | b'U' => 3,
                _ => return None,
            };
            Some((acc << 2) | c)
        })
    }

    fn fast(seq: &[u8], p: &SketchParams) -> Vec<(u64, Vec<Feature>)> {
        let mut out = Vec::new();
        Sketcher::new(*p).sketch_all(seq, |w, s| out.push((w, s.to_vec())));
        out
    }

    fn random_seq(rng: &mut StdRng, len: usize, alphabet: &[u8]) -> Vec<u8> {
        (0..len).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect()
    }

    #[test]
    fn matches_brute_force_on_random_sequences() {
        let mut rng = StdRng::seed_from_u64(7);
        let alphabets: [&[u8]; 4] = [b"ACGT", b"acgtACGT", b"ACGTNNRYKMacgu", b"ACGTACGTACGTACGTN"];
        for &(k, w, stride, s) in &[
            (16, 127, None, 16),
            (32, 127, None, 16),
            (1, 1, None, 1),
            (5, 20, Some(3), 4),
            (31, 40, None, 64),
            (20, 20, None, 8),
        ] {
            let p = SketchParams::new(k, w, stride, s, 0x5eed).unwrap();
            for len in [0, 1, 4, 15, 16, 17, 126, 127, 128, 239, 240, 1000, 5003] {
                for alphabet in alphabets {
                    let seq = random_seq(&mut rng, len, alphabet);
                    assert_eq!(fast(&seq, &p), brute_force(&seq, &p), "k={k} w={w} len={len}");
                }
            }
        }
    }

    #[test]
    fn n_runs_lowercase_and_uracil() {
        let p = SketchParams::new(16, 127, None, 16, 0).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let mut seq = random_seq(&mut rng, 2000, b"ACGT");
        seq[300..700].fill(b'N');
        let lower: Vec<u8> = seq.to_ascii_lowercase();
        let rna: Vec<u8> = seq.iter().map(|&b| if b == b'T' { b'U' } else { b }).collect();
        assert_eq!(fast(&seq, &p), brute_force(&seq, &p));
        assert_eq!(fast(&seq, &p), fast(&lower, &p));
        assert_eq!(fast(&seq, &p), fast(&rna, &p));
        // Windows wholly inside the N run have no sketch and are skipped, not emitted empty.
        let ids: Vec<u64> = fast(&seq, &p).iter().map(|(w, _)| *w).collect();
        assert!(!ids.contains(&4) && ids.contains(&2) && ids.contains(&7), "{ids:?}");
    }

    #[test]
    fn reverse_complement_gives_the_same_features() {
        let p = SketchParams::new(16, 127, None, 16, 0).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let seq = random_seq(&mut rng, 127, b"ACGT");
        let rc: Vec<u8> = seq
            .iter()
            .rev()
            .map(|b| match b {
                b'A' => b'T',
                b'C' => b'G',
                b'G' => b'C',
                _ => b'A',
            })
            .collect();
        assert_eq!(fast(&seq, &p), fast(&rc, &p));
    }

    #[test]
    fn chunks_of_windows_equal_the_whole() {
        let p = SketchParams::new(16, 127, None, 16, 0).unwrap();
        let mut rng = StdRng::seed_from_u64(5);
        let seq = random_seq(&mut rng, 10_000, b"ACGTN");
        let whole = fast(&seq, &p);
        let mut pieces = Vec::new();
        let mut sk = Sketcher::new(p);
        for start in (0..p.window_count(seq.len())).step_by(7) {
            sk.sketch_windows(&seq, start..start + 7, |w, s| pieces.push((w, s.to_vec())));
        }
        assert_eq!(whole, pieces);
    }

    #[test]
    fn a_kmer_needs_k_valid_bases_in_a_row() {
        assert!(has_kmer(b"ACGT", 4) && has_kmer(b"NNacgu", 4) && has_kmer(b"ACGTNACGTA", 5));
        assert!(!has_kmer(b"", 1) && !has_kmer(b"ACG", 4) && !has_kmer(b"ACGTNACGT", 5) && !has_kmer(b"NNNN", 1));
    }

    #[test]
    fn window_counts_and_last_partial_window() {
        let p = SketchParams::new(16, 127, None, 16, 0).unwrap();
        assert_eq!(p.window_count(15), 0);
        assert_eq!(p.window_count(16), 1);
        assert_eq!(p.window_count(127), 1);
        // A second window starts at base 112 as soon as one k-mer fits there.
        assert_eq!(p.window_count(128), 2);
        assert_eq!(p.window_count(239), 2);
        assert_eq!(p.window_count(240), 3);
        // The last window of a 200-base sequence starts at 112 and holds k-mers 112..=184.
        assert_eq!(p.window_kmer_range(1, 200), 112..185);
    }

    #[test]
    fn short_reads_are_one_window_at_the_reference_density() {
        let p = SketchParams::new(16, 127, None, 16, 0).unwrap();
        let mut rng = StdRng::seed_from_u64(11);
        let mut sk = Sketcher::new(p);
        for (len, expected) in [(150, 19), (100, 12), (16, 1), (239, 32)] {
            let seq = random_seq(&mut rng, len, b"ACGT");
            let mut out = Vec::new();
            sk.read_features(&seq, &mut out);
            // The brute-force sketch of one window spanning the whole read, with the scaled size.
            let whole = SketchParams::new(16, len as u32, None, expected, 0).unwrap();
            assert_eq!(brute_force(&seq, &whole), vec![(0, out.clone())], "len {len}");
        }
        // Longer reads are windowed like references.
        let seq = random_seq(&mut rng, 1000, b"ACGT");
        let mut out = Vec::new();
        sk.read_features(&seq, &mut out);
        let windowed: Vec<Feature> = fast(&seq, &p).into_iter().flat_map(|(_, s)| s).collect();
        assert_eq!(out, windowed);
    }

    /// `fmix64` undone: its xor-shifts by 33 undo themselves, its multiplications are undone by
    /// the constants' inverses mod 2^64 (Newton's iteration doubles the correct bits each step).
    fn inverse_fmix64(mut x: u64) -> u64 {
        let inverse = |a: u64| (0..6).fold(a, |y, _| y.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(y))));
        x ^= x >> 33;
        x = x.wrapping_mul(inverse(0xc4ce_b9fe_1a85_ec53));
        x ^= x >> 33;
        x = x.wrapping_mul(inverse(0xff51_afd7_ed55_8ccd));
        x ^ (x >> 33)
    }

    /// The k-mer whose hash's upper half is the empty marker is folded onto the value below it,
    /// with and without a seed.
    #[test]
    fn hash_never_returns_the_empty_marker() {
        let x = inverse_fmix64(u64::from(NO_FEATURE) << 32);
        assert_eq!(fmix64(x) >> 32, u64::from(NO_FEATURE), "the inverse is fmix64's");
        assert_eq!(hash_kmer(x, 0), NO_FEATURE - 1);
        assert_eq!(hash_kmer(x ^ 0x5eed, 0x5eed), NO_FEATURE - 1);
    }

    /// Pins the hash function: an index built today must be readable by every later version.
    #[test]
    fn regression_hash_values_are_frozen() {
        assert_eq!(hash_kmer(0, 0), 0);
        assert_eq!(hash_kmer(1, 0), 0xb456_bcfc);
        assert_eq!(hash_kmer(0x1234_5678_9abc_def0, 0), 0x18b8_c062);
    }

    #[test]
    fn parameter_validation() {
        assert_eq!(SketchParams::new(33, 127, None, 16, 0), Err(ParamError::K(33)));
        assert_eq!(SketchParams::new(0, 127, None, 16, 0), Err(ParamError::K(0)));
        assert_eq!(SketchParams::new(16, 15, None, 16, 0), Err(ParamError::WindowShorterThanK { window: 15, k: 16 }));
        assert_eq!(SketchParams::new(16, 127, Some(113), 16, 0), Err(ParamError::Stride { stride: 113, max: 112 }));
        assert_eq!(SketchParams::new(16, 127, None, 0, 0), Err(ParamError::SketchSize(0)));
    }
}
