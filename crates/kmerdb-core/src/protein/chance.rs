//! How many amino-acid k-mers a read shares with a target by chance, and the e-value of a protein
//! call (issue 33, item 3).
//!
//! A fixed count of shared k-mers cannot tell homology from chance: a GC-rich read of any origin
//! translates into peptides rich in the amino acids of GC-rich codons (A, G, P, R), and those
//! peptides are common in GC-rich proteomes, so shuffled reads shared six or more k-mers with
//! *Mycobacterium* hundreds of times in a sample. The chance of a match depends on the read's
//! k-mers and on the target's size and composition, as protein search tools weigh a hit by the
//! database and the sequences' composition:
//!
//! - target `t` holds `S_t` of the table's looked-up k-mers, whose residues follow a Markov chain
//!   of its species' k-mers (the frequency of a k-mer's last residue, and of each residue given
//!   the one after it, add-one counts): independent residues were not enough, since GC-rich
//!   genomes' stop-free frames are rich in some dipeptides (with them, reads of *M. tuberculosis*
//!   were called *Klebsiella* 25 times in 8,108 pairs, 5 with the chain);
//! - taken as `S_t` draws from that chain among the sampled k-mers (one in `sample` of all), `t`
//!   holds a given sampled k-mer `x` with probability `min(1, sample * S_t * P(x))`;
//! - the number of the read's k-mers that `t` holds by chance is then about Poisson with mean
//!   `lambda_t`, the sum of those probabilities over the read's k-mers;
//! - the e-value of a best count `b` is the expected number of targets reaching `b` by chance,
//!   `sum_t P(Poisson(lambda_t) >= b)`, over the targets that share at least one k-mer with the
//!   read: a target sharing none has no share to be judged (and summing over every target would
//!   cost a pass over the whole target list for each read the stage looks at).
//!
//! The chains are kept per species (targets of one species, chromosomes and plasmids, share
//! one), so that their memory follows the species an index holds, not its sequences.

use super::ProteinTable;

/// A chain of residues, read from a k-mer's last residue back: natural logs of the last
/// residue's frequency and of each residue's given the one after it.
#[derive(Debug, Clone)]
struct ResidueChain {
    log_last: [f64; 20],
    log_before: [[f64; 20]; 20],
}

/// Add-one counts of a chain ([`ResidueChain`]): an amino acid never seen still has a small
/// frequency.
#[derive(Debug, Clone)]
struct ChainCounts {
    last: [u64; 20],
    before: [[u64; 20]; 20],
}

impl ChainCounts {
    const START: ChainCounts = ChainCounts { last: [1; 20], before: [[1; 20]; 20] };

    fn add(&mut self, other: &ChainCounts) {
        // Both start from the add-one counts: one of them is taken off.
        for (a, b) in self.last.iter_mut().zip(&other.last) {
            *a += b - 1;
        }
        for (row, other) in self.before.iter_mut().zip(&other.before) {
            for (a, b) in row.iter_mut().zip(other) {
                *a += b - 1;
            }
        }
    }

    fn chain(&self) -> ResidueChain {
        let logs = |row: &[u64; 20]| {
            let total = row.iter().sum::<u64>() as f64;
            row.map(|n| (n as f64 / total).ln())
        };
        ResidueChain { log_last: logs(&self.last), log_before: self.before.map(|row| logs(&row)) }
    }
}

/// Adds the k-mers `keys` of `table` to their targets' `sizes` and their groups' `counts`.
fn count_chains(
    table: &ProteinTable,
    groups: &[u32],
    keys: std::ops::Range<usize>,
    sizes: &mut [u64],
    counts: &mut [ChainCounts],
) {
    let k = table.params.k as usize;
    let mut residues = [0usize; 7];
    for i in keys {
        let (mut code, targets) = table.looked_up(i);
        for r in residues.iter_mut().take(k) {
            *r = (code % 20) as usize;
            code /= 20;
        }
        let mut add = |g: u32, n: u64| {
            let chain = &mut counts[g as usize];
            chain.last[residues[0]] += n;
            for w in residues[..k].windows(2) {
                chain.before[w[0]][w[1]] += n;
            }
        };
        // Strains of a species lie side by side in a list: a run of one group goes in at once.
        let mut run: Option<(u32, u64)> = None;
        for &t in targets {
            // Only a damaged table opened without verification names a target past the last.
            let Some(&g) = groups.get(t as usize) else { continue };
            sizes[t as usize] += 1;
            match &mut run {
                Some((r, n)) if *r == g => *n += 1,
                _ => {
                    if let Some((r, n)) = run.replace((g, 1)) {
                        add(r, n);
                    }
                }
            }
        }
        if let Some((r, n)) = run {
            add(r, n);
        }
    }
}

/// Each target's size in the amino-acid table and its species' chain of residues, computed once
/// per index from the looked-up k-mers (one pass over the table's lists).
#[derive(Debug, Clone)]
pub struct ProteinChance {
    k: u32,
    sample: f64,
    /// Per target: the looked-up k-mers it holds, and its group (species).
    sizes: Vec<f64>,
    groups: Vec<u32>,
    /// Per group.
    chains: Vec<ResidueChain>,
}

impl ProteinChance {
    /// The sizes and chains of `table`'s targets; `groups[t]` is target `t`'s group (its species,
    /// numbered from 0), one per target of the index.
    pub fn new(table: &ProteinTable, groups: &[u32]) -> Self {
        use rayon::prelude::*;
        let k = table.params.k;
        let group_count = groups.iter().map(|&g| g as usize + 1).max().unwrap_or(0);
        let start = || (vec![0u64; groups.len()], vec![ChainCounts::START; group_count]);
        // A few long chunks a thread, counted into one set of counts a rayon job (not one a chunk:
        // a set is 3.4 kB a species), then added up. The counts are integers: their sums are the
        // same in any order, on any thread count.
        let n = table.looked_up_len();
        let chunk = n.div_ceil(4 * rayon::current_num_threads()).max(1 << 16);
        let (sizes, counts) = (0..n.div_ceil(chunk))
            .into_par_iter()
            .fold(start, |(mut sizes, mut counts), c| {
                count_chains(table, groups, c * chunk..n.min((c + 1) * chunk), &mut sizes, &mut counts);
                (sizes, counts)
            })
            .reduce(start, |(mut sa, mut ca), (sb, cb)| {
                sa.iter_mut().zip(sb).for_each(|(a, b)| *a += b);
                ca.iter_mut().zip(cb).for_each(|(a, b)| a.add(&b));
                (sa, ca)
            });
        let chains = counts.iter().map(ChainCounts::chain).collect();
        Self {
            k,
            sample: f64::from(table.params.sample.max(1)),
            sizes: sizes.into_iter().map(|n| n as f64).collect(),
            groups: groups.to_vec(),
            chains,
        }
    }

    /// The expected number of `codes` (a read's k-mers, each once) that target `t` holds by
    /// chance, `lambda_t`.
    pub fn expected(&self, t: u32, codes: &[u32]) -> f64 {
        let (Some(&size), Some(&g)) = (self.sizes.get(t as usize), self.groups.get(t as usize)) else {
            return 0.0;
        };
        let chain = &self.chains[g as usize];
        let scale = (self.sample * size).ln();
        codes
            .iter()
            .map(|&code| {
                let mut c = code;
                let mut after = (c % 20) as usize;
                let mut log_p = scale + chain.log_last[after];
                for _ in 1..self.k {
                    c /= 20;
                    let a = (c % 20) as usize;
                    log_p += chain.log_before[after][a];
                    after = a;
                }
                log_p.exp().min(1.0)
            })
            .sum()
    }

    /// The e-value of `best`: the expected number of `targets` (ascending, so that the sum is the
    /// same on every run) that share at least `best` of `codes` by chance. Stops adding once the
    /// sum passes `stop`, as nothing past it changes a call.
    pub(crate) fn evalue(&self, targets: impl IntoIterator<Item = u32>, codes: &[u32], best: u32, stop: f64) -> f64 {
        let (mut e, ln_best_factorial) = (0.0, ln_factorial(best));
        for t in targets {
            e += poisson_tail_from(self.expected(t, codes), best, ln_best_factorial);
            if e > stop {
                break;
            }
        }
        e
    }
}

/// `P(X >= x)` for `X` Poisson with mean `lambda`: the terms from `x` up, summed until they no
/// longer change the sum (far in the tail, where calls are made, `1 - P(X < x)` would round to 0).
pub fn poisson_tail(lambda: f64, x: u32) -> f64 {
    poisson_tail_from(lambda, x, ln_factorial(x))
}

/// `ln(x!)`, as [`poisson_tail`] sums it.
fn ln_factorial(x: u32) -> f64 {
    (1..=x).map(|i| f64::from(i).ln()).sum()
}

/// [`poisson_tail`] given `ln(x!)` (the e-value's targets share their `x`).
fn poisson_tail_from(lambda: f64, x: u32, ln_x_factorial: f64) -> f64 {
    if x == 0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    if f64::from(x) <= lambda {
        // Near the mean the tail is large: one minus the terms below x.
        let mut term = (-lambda).exp();
        let mut below = 0.0;
        for i in 0..x {
            below += term;
            term *= lambda / f64::from(i + 1);
        }
        return (1.0 - below).clamp(0.0, 1.0);
    }
    let log_first = -lambda + f64::from(x) * lambda.ln() - ln_x_factorial;
    let mut term = log_first.exp();
    let mut sum = 0.0;
    let mut i = x;
    while term > sum * 1e-17 && term > 0.0 {
        sum += term;
        i += 1;
        term *= lambda / f64::from(i);
    }
    sum.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protein::{ProteinParams, ProteinTable, encode_table};

    #[test]
    fn the_poisson_tail_matches_its_sum_and_reaches_far() {
        // P(X >= 2) for mean 1: 1 - e^-1 - e^-1.
        let want = 1.0 - 2.0 * (-1f64).exp();
        assert!((poisson_tail(1.0, 2) - want).abs() < 1e-12);
        // Below the mean, through the other branch.
        let want = 1.0 - (-3f64).exp() * (1.0 + 3.0);
        assert!((poisson_tail(3.0, 2) - want).abs() < 1e-12);
        // Far in the tail: e^-0.01 0.01^20 / 20! (the next terms are 1e-3 of it, and so on).
        let first = (-0.01f64).exp() * 0.01f64.powi(20) / (1..=20).map(f64::from).product::<f64>();
        let tail = poisson_tail(0.01, 20);
        assert!(tail > first && tail < first * 1.001, "{tail} against {first}");
        assert_eq!(poisson_tail(0.5, 0), 1.0);
        assert_eq!(poisson_tail(0.0, 3), 0.0);
    }

    fn code(s: &[u8]) -> u32 {
        s.iter().fold(0u32, |c, &a| c * 20 + crate::protein::amino_digit(a).unwrap())
    }

    /// Every 7-mer whose residue `i` is one of `choices(i)`.
    fn kmers(choices: impl Fn(usize) -> &'static [u8]) -> Vec<Vec<u8>> {
        (0..7).fold(vec![Vec::new()], |all, i| {
            all.iter().flat_map(|p| choices(i).iter().map(move |&a| [p.clone(), vec![a]].concat())).collect()
        })
    }

    fn chance_of(tables: &[Vec<Vec<u8>>], groups: &[u32]) -> ProteinChance {
        let params = ProteinParams { sample: 1, ..ProteinParams::DEFAULT };
        let pairs = tables.iter().enumerate().flat_map(|(t, ks)| ks.iter().map(move |s| (code(s), t as u32))).collect();
        let bytes = encode_table(pairs, params);
        ProteinChance::new(&ProteinTable::parse(&bytes).unwrap(), groups)
    }

    #[test]
    fn chance_follows_the_targets_size_and_composition() {
        // Target 0: the 128 7-mers of A and G (a GC-rich proteome's composition, at its
        // extreme); target 1: the 729 of C, D and E that start with C.
        let ag = kmers(|_| b"AG");
        let cde = kmers(|i| if i == 0 { b"C" } else { b"CDE" });
        let chance = chance_of(&[ag, cde.clone()], &[0, 1]);
        let rich = [code(b"GAGGAAG"), code(b"AGGAGAA")];
        let plain = [code(b"DEDCCDE"), code(b"EECDCDD")];
        // A read of A and G is far likelier to match target 0 by chance than target 1, and a
        // read of C, D and E the other way round.
        assert!(chance.expected(0, &rich) > 20.0 * chance.expected(1, &rich));
        assert!(chance.expected(1, &plain) > 20.0 * chance.expected(0, &plain));
        // Each k-mer's probability is capped at 1, and an unknown target expects nothing.
        assert!(chance.expected(0, &rich) <= 2.0);
        assert_eq!(chance.expected(7, &rich), 0.0);
        // The e-value adds the targets' tails, and stops once past `stop`.
        let both = chance.evalue([0, 1], &rich, 1, f64::INFINITY);
        let want = poisson_tail(chance.expected(0, &rich), 1) + poisson_tail(chance.expected(1, &rich), 1);
        assert!((both - want).abs() < 1e-15);
        assert_eq!(chance.evalue([0, 1], &rich, 1, 0.0), poisson_tail(chance.expected(0, &rich), 1));
        // Targets of one group share its chain; each keeps its own size.
        let one = chance_of(&[kmers(|i| if i == 0 { b"D" } else { b"CDE" }), cde[..100].to_vec()], &[0, 0]);
        let ratio = one.expected(0, &plain) / one.expected(1, &plain);
        assert!((ratio - 7.29).abs() < 1e-9, "{ratio}");
    }

    /// The chain sees the order of residues, not only their frequencies: in a table of 7-mers
    /// alternating between A, C, D and G, H, I, `ACDGHIA` is unlikely and `AGCHDIA` is not,
    /// though both have the same residues.
    #[test]
    fn the_chain_weighs_adjacent_residues() {
        let alternating = kmers(|i| if i % 2 == 0 { b"ACD" } else { b"GHI" });
        let chance = chance_of(&[alternating], &[0]);
        assert!(chance.expected(0, &[code(b"AGCHDIA")]) > 100.0 * chance.expected(0, &[code(b"ACDGHIA")]));
    }
}
