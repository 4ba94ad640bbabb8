//! The amino-acid stage (`kmerdb build --protein`): evidence for reads whose DNA shares too few
//! k-mers with anything indexed (another serotype, a species of an indexed genus), where protein
//! sequence is still conserved (issue 17; Metabuli's observation).
//!
//! - **Translation**: the six reading frames of a sequence, in the standard genetic code; a
//!   codon with anything but A, C, G, T is `X`, which, like a stop, ends a stretch.
//! - **Amino-acid k-mers**: every `k`-long stretch of amino acids without a stop or `X`, as a
//!   base-20 number (`k <= 7` fits a u32), kept when its hash falls in the `1 / sample` share
//!   ([`ProteinParams::keeps`]): the same k-mers are kept in references and reads, so sampling
//!   thins the index without losing matches' consistency.
//! - **References**: only stretches of at least `min_orf` amino acids between stops count (open
//!   reading frames: coding regions are long stop-free stretches, a non-coding frame has a stop
//!   every twenty to forty codons), so most of the six frames' noise stays out.
//! - **Reads**: only frames without a stop count (a read inside a gene has none in its frame).
//! - **The table** (the index's `protein` section): `index::protein_table`, with its layout.
//!
//! How a read uses it is in `classify::candidates::with_protein`; what chance gives it, in
//! [`chance`].

pub mod chance;

pub use crate::index::protein_table::encode_table;
pub use crate::index::protein_table::{ProteinParams, ProteinTable};
pub use chance::ProteinChance;

use crate::taxonomy::{TaxId, TaxonTree};

/// The standard genetic code, indexed by the codon's bases (T, C, A, G = 0..3) as a base-4 number.
const CODE: &[u8; 64] = b"FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG";
/// The amino acids in k-mer digit order; `*` and `X` are no digit.
const AMINO: &[u8; 20] = b"ACDEFGHIKLMNPQRSTVWY";

fn base_digit(b: u8) -> Option<usize> {
    match b {
        b'T' | b't' => Some(0),
        b'C' | b'c' => Some(1),
        b'A' | b'a' => Some(2),
        b'G' | b'g' => Some(3),
        _ => None,
    }
}

/// A base's complement (N for anything but A, C, G, T in either case).
pub(crate) fn complement(b: u8) -> u8 {
    match b {
        b'A' | b'a' => b'T',
        b'C' | b'c' => b'G',
        b'G' | b'g' => b'C',
        b'T' | b't' => b'A',
        _ => b'N',
    }
}

/// The amino acid of a codon, `X` if a base is not A, C, G or T.
fn translate_codon(c: &[u8]) -> u8 {
    match (base_digit(c[0]), base_digit(c[1]), base_digit(c[2])) {
        (Some(a), Some(b), Some(d)) => CODE[a * 16 + b * 4 + d],
        _ => b'X',
    }
}

/// The six frames of `seq`: forward from offsets 0, 1, 2, then the reverse complement's.
pub fn six_frames(seq: &[u8]) -> [Vec<u8>; 6] {
    let reverse: Vec<u8> = seq.iter().rev().map(|&b| complement(b)).collect();
    let frame =
        |s: &[u8], f: usize| -> Vec<u8> { s.get(f..).unwrap_or(&[]).chunks_exact(3).map(translate_codon).collect() };
    [frame(seq, 0), frame(seq, 1), frame(seq, 2), frame(&reverse, 0), frame(&reverse, 1), frame(&reverse, 2)]
}

/// Each byte's digit in [`AMINO`], 255 for anything else (a stop, `X`).
const DIGITS: [u8; 256] = {
    let mut t = [255u8; 256];
    let mut d = 0;
    while d < AMINO.len() {
        t[AMINO[d] as usize] = d as u8;
        d += 1;
    }
    t
};

pub(crate) fn amino_digit(a: u8) -> Option<u32> {
    let d = DIGITS[a as usize];
    (d != 255).then_some(u32::from(d))
}

/// Calls `each` with the code of every sampled k-mer of `protein` that lies in a stop-free
/// stretch of at least `min_len` amino acids.
pub fn for_each_kmer(protein: &[u8], params: &ProteinParams, min_len: usize, mut each: impl FnMut(u32)) {
    let k = params.k as usize;
    let modulus = 20u32.pow(params.k - 1);
    for stretch in protein.split(|a| amino_digit(*a).is_none()) {
        if stretch.len() < min_len.max(k) {
            continue;
        }
        let mut code = 0u32;
        for (i, &a) in stretch.iter().enumerate() {
            let d = amino_digit(a).expect("split at every non-amino-acid");
            code = if i >= k { (code % modulus) * 20 + d } else { code * 20 + d };
            if i + 1 >= k && params.keeps(code) {
                each(code);
            }
        }
    }
}

/// The sampled k-mers of one mate, appended to `out` in order: frames 0, 1, 2 forward, then the
/// reverse complement's, each frame's k-mers in order. The CPU twin of the `protein_kmers` kernel
/// (`cuda/protein.cuh`), which lists them in the same order.
pub fn mate_kmers(seq: &[u8], params: &ProteinParams, out: &mut Vec<u32>) {
    // A read inside a gene reads it without a stop in the gene's frame; frames with a stop are
    // not coding here, and their peptides (of biased composition in GC-rich genomes) match other
    // genomes' non-coding frames by chance.
    for frame in six_frames(seq).iter().filter(|f| !f.contains(&b'*')) {
        for_each_kmer(frame, params, params.k as usize, |c| out.push(c));
    }
}

/// The most a protein call's e-value may be ([`ProteinChance::evalue`]: the expected number of
/// targets that share as many of the read's k-mers by chance). Chosen with
/// [`PROTEIN_LCA_DIVISOR`] on the held-out set with `--protein` and the left-out families, and
/// checked on the validation set (bench/results/HISTORY.md, "The protein stage's e-value"): no shuffled read
/// of the mock is called by the stage (143 of 39,504 pairs with the decoys before), and reads of a
/// species of an indexed genus share their genus's proteins far beyond it (a median of 1e-14).
/// From 1e-5 to 1e-8, genus F1 on the held-out set fell by 0.003 and the left-out families' calls
/// by a third.
pub(crate) const PROTEIN_MAX_EVALUE: f64 = 1e-7;

/// Targets sharing at least a third of the best target's count of k-mers join the call's LCA, as
/// MEGAN's LCA takes the hits within a share of the best score. A conserved protein (ribosomal
/// proteins, chaperones) is shared by genera of several families, and a count of 7-mers falls
/// steeply with identity (about identity^7: 48% of them at 90% identity, 21% at 80%), so genera a
/// little further from the read share a fraction of the best's count; their LCA, not the nearest
/// genus, is what the read supports. At a half, the left-out families' reads were called at family
/// or below 0.47% / 0.24% / 0.29% of the time, at a third 0.33% / 0.15% / 0.26%.
pub(crate) const PROTEIN_LCA_DIVISOR: u32 = 3;

/// The evidence of a read's amino-acid k-mers: per target, how many of them it holds. When the
/// best holds at least `hitmin` and that count's e-value (`ProteinChance::evalue`) is at most
/// `PROTEIN_MAX_EVALUE`, returns the LCA of the targets holding at least a
/// `PROTEIN_LCA_DIVISOR`th of the best's count, lifted to genus if below it, with the best
/// count; (0, 0) otherwise.
/// `codes` are the read's k-mers: its mates' [`mate_kmers`], each once, ascending. `shared` is
/// scratch space.
pub fn protein_call(
    table: &ProteinTable,
    chance: &ProteinChance,
    codes: &[u32],
    hitmin: u32,
    target_taxa: &[TaxId],
    tree: &TaxonTree,
    shared: &mut SharedCounts,
) -> (TaxId, u32) {
    let best = shared.count(table, codes, target_taxa);
    if best < hitmin || chance.evalue(shared.targets(), codes, best, PROTEIN_MAX_EVALUE) > PROTEIN_MAX_EVALUE {
        return (0, 0);
    }
    let taxon = shared
        .by_target
        .iter()
        .filter(|&&(_, n)| n * PROTEIN_LCA_DIVISOR >= best)
        .map(|&(t, _)| target_taxa[t as usize])
        .reduce(|a, b| tree.lca(a, b))
        .unwrap_or(0);
    (tree.ancestor_at_rank(taxon, "genus").unwrap_or(taxon), best)
}

/// Per target, how many of a read's k-mers it holds, in target order (so that sums over them are
/// the same on every run).
#[derive(Debug, Default)]
pub struct SharedCounts {
    counts: std::collections::HashMap<u32, u32>,
    /// (target, count), ascending by target.
    by_target: Vec<(u32, u32)>,
}

impl SharedCounts {
    /// Counts, per target, how many of `codes` (each once) it holds; returns the most.
    pub(crate) fn count(&mut self, table: &ProteinTable, codes: &[u32], target_taxa: &[TaxId]) -> u32 {
        self.counts.clear();
        for &c in codes {
            // Only a damaged table opened without verification names a target past the last.
            for &t in table.targets_of(c).iter().filter(|&&t| (t as usize) < target_taxa.len()) {
                *self.counts.entry(t).or_default() += 1;
            }
        }
        self.by_target.clear();
        self.by_target.extend(self.counts.iter().map(|(&t, &n)| (t, n)));
        self.by_target.sort_unstable();
        self.by_target.iter().map(|&(_, n)| n).max().unwrap_or(0)
    }

    /// The targets counted, ascending.
    pub(crate) fn targets(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_target.iter().map(|&(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU's table (`cuda/protein.cuh`, `CODON_DIGIT`) is the genetic code of [`CODE`] with
    /// amino acids as [`AMINO`] digits and 20 for a stop; GPU tests check the kernel as a whole.
    #[test]
    fn the_kernels_codon_table_is_the_genetic_code() {
        let source = include_str!("../../../../cuda/protein.cuh");
        let table = source.split("CODON_DIGIT[64] = {").nth(1).and_then(|t| t.split("};").next()).unwrap();
        let digits: Vec<u8> = table
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .flat_map(|l| l.split(','))
            .filter_map(|d| d.trim().parse().ok())
            .collect();
        let want: Vec<u8> = CODE.iter().map(|&a| if a == b'*' { 20 } else { amino_digit(a).unwrap() as u8 }).collect();
        assert_eq!(digits, want);
    }

    #[test]
    fn six_frames_translate_both_strands() {
        // ATG GCC TGA: M A *; its reverse complement TCA GGC CAT: S G H.
        let frames = six_frames(b"ATGGCCTGA");
        assert_eq!(frames[0], b"MA*");
        assert_eq!(frames[1], b"WP");
        assert_eq!(frames[3], b"SGH");
        assert_eq!(six_frames(b"ATGNCC")[0], b"MX");
        assert_eq!(six_frames(b"at")[0], b"");
    }

    #[test]
    fn kmers_are_base_20_in_stop_free_stretches() {
        let p = ProteinParams { k: 2, sample: 1, min_orf: 0, cap: 8, keys: 0, over_cap: 0 };
        let mut got = Vec::new();
        for_each_kmer(b"ACD*C", &p, 2, |c| got.push(c));
        // A=0 C=1 D=2: AC = 1, CD = 22; the lone C after the stop is too short.
        assert_eq!(got, [1, 22]);
        got.clear();
        for_each_kmer(b"ACD*CDEF", &p, 4, |c| got.push(c));
        assert_eq!(got.len(), 3, "only the stretch of at least 4 counts");
        // Sampling keeps the same k-mers wherever they occur.
        let half = ProteinParams { sample: 2, ..p };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for_each_kmer(b"MKVLAAGIVGLLLA", &half, 2, |c| a.push(c));
        for_each_kmer(b"WWMKVLAAGIVGLLLAWW", &half, 2, |c| b.push(c));
        assert!(a.iter().all(|c| b.contains(c)) && a.len() < 13);
    }
}
