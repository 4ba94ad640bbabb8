//! The evidence rule for weak calls: a call whose best candidate scored little stands only if the
//! read's features in its lineage are too many, and span too long a match, to be chance.
//!
//! With k = 16 a read finds index features by chance: a random 150-base read shares a 19-mer with
//! a 100 Mbp index about one time in ten, and the sketch often picks three or four of that
//! match's overlapping k-mers, all at one location of one target: three hits, a call. Those hits
//! are one piece of evidence, not three. So a weak call's features in its lineage are grouped into
//! *stretches* (features of one mate whose k-mers overlap: one exact match, where the clade is
//! small), and the call is scored by how often chance would give such stretches in the clade's
//! sequence (`chance_log10`): a chance match shows only where the sketch picked one of its
//! k-mers, so in a small clade a stretch spanning `L` bases matches somewhere in `G` bases (either
//! strand) by chance about `n * 2G / 4^L` times for a read of `n` features, and `s` stretches start
//! at any `s` of them (`C(n, s)` ways), each counted as if it could lie anywhere in the clade (a
//! lineage's features may be in different targets, and the candidates' window ranges are not at
//! hand here: this errs towards leaving reads unclassified). A call stands when that expectation
//! (an e-value, as alignment tools report) is at most `10^MAX_CHANCE_LOG10`.
//!
//! `G` is the bases of the targets in the call's clade: chance matches of a large clade are
//! frequent, those of a virus of 10 kbp are not, so a read of a divergent virus with one
//! 20-base match keeps its call, and a shuffled read with one in *E. coli* loses it. A feature
//! whose taxon is an ancestor of the call (found in several of the ancestor's members) matched
//! somewhere in the ancestor's clade, so its stretch counts that clade's bases: against 2 Gbp of
//! random genomes, reads of unindexed random genomes were called from one strain's two features
//! and four such features found across the whole collection.
//!
//! Only weak calls (best score below `WEAK_CALL_HITMINS` x `hitmin`) are checked, so only their
//! reads need each feature's taxon and position (the GPU's path sketches them again and takes
//! the taxa from its hit lists).

use crate::sketch::Sketcher;
use crate::taxonomy::{TaxId, TaxonTree};

/// A call is weak when its best entry scored less than this many times `hitmin`: its evidence is
/// then checked feature by feature ([`with_evidence`]).
pub(crate) const WEAK_CALL_HITMINS: u32 = 3;

/// The largest log10 of the chance expectation a weak call may have (see the module
/// documentation). Measured on the held-out sets and negative controls (bench/results/HISTORY.md, "Chance
/// matches counted by the read's features"): at 1e-4, 1e-6, 1e-7 and 1e-8 the reads of left-out
/// families were called 0.10-0.15%, 0.06-0.12%, 0.05-0.10% and 0.05-0.07% of the time (Kraken 2:
/// 0.11-0.15%), the shuffled mock 7, 0, 0 and 0 times in 39,504 pairs; species F1 on the held-out
/// and validation sets is within 0.003 across them, highest at 1e-4.
pub(crate) const MAX_CHANCE_LOG10: f64 = -7.0;

/// Whether a call (`taxid`, best score `top`) is weak and so needs [`with_evidence`].
pub(crate) fn is_weak(taxid: TaxId, top: u32, hitmin: u32) -> bool {
    taxid != 0 && top < WEAK_CALL_HITMINS * hitmin
}

/// A feature of a read that the index holds: its mate, where its k-mer starts in the mate, and
/// the taxon of its locations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Spot {
    pub mate: u8,
    pub pos: u32,
    pub taxon: TaxId,
}

/// The bases of the targets under each taxon of a tree: the sequence a weak call's chance
/// matches could have come from.
#[derive(Debug, Clone)]
pub(crate) struct CladeBases(Vec<u64>);

impl CladeBases {
    /// From each target's (taxon, length); a taxon the tree lacks adds nothing.
    pub(crate) fn new(tree: &TaxonTree, targets: impl IntoIterator<Item = (TaxId, u64)>) -> Self {
        let mut bases = vec![0u64; tree.len()];
        let parents = tree.parents();
        for (taxon, length) in targets {
            let Some(mut node) = tree.node(taxon) else { continue };
            loop {
                bases[node as usize] += length;
                let parent = parents[node as usize];
                if parent == node {
                    break;
                }
                node = parent;
            }
        }
        Self(bases)
    }

    pub(crate) fn of(&self, tree: &TaxonTree, taxon: TaxId) -> u64 {
        tree.node(taxon).map_or(0, |n| self.0[n as usize])
    }
}

/// What the rule needs besides the read: the tree, its clades' bases, `hitmin` and k.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Evidence<'a> {
    pub tree: &'a TaxonTree,
    pub bases: &'a CladeBases,
    pub hitmin: u32,
    pub k: u32,
}

impl Evidence<'_> {
    /// The evidence rule for a weak `call` of a read of `features` sketched features whose found
    /// ones are `spots`: it stands if at least `hitmin` of them lie in its lineage (its clade or its path
    /// to the root) and their stretches are unlikely by chance ([`chance_log10`] at most
    /// [`MAX_CHANCE_LOG10`]); else the read is unclassified. `spots` is sorted here.
    ///
    /// The lineage count alone (the rule before the stretches) took calls outside the true family
    /// on the held-out sets from 114 to 65; the stretches take the shuffled mock's calls from 51
    /// to 3 and the left-out families' from 0.32-0.41% to 0.06-0.10% (bench/results/HISTORY.md, "Chance matches").
    pub(crate) fn check(&self, call: TaxId, spots: &mut [Spot], features: u64) -> TaxId {
        if call == 0 {
            return 0;
        }
        spots.sort_unstable();
        // One LCA a spot (it was three: each looks the spot's taxid up in the tree, and a weak
        // call of a random read against a large index has a spot at most of its features): in the
        // lineage when it is the call or the spot's taxon. A feature of the call's clade matched
        // by chance in the clade's bases; one of an ancestor (found across that ancestor's clade)
        // in the ancestor's.
        let lineage: Vec<(u8, u32, u64)> = spots
            .iter()
            .filter_map(|s| self.lineage_bases(call, s.taxon).map(|bases| (s.mate, s.pos, bases)))
            .collect();
        if (lineage.len() as u64) < u64::from(self.hitmin) {
            return 0;
        }
        match chance_log10(lineage.into_iter(), self.k, features) <= MAX_CHANCE_LOG10 {
            true => call,
            false => 0,
        }
    }

    /// Whether a weak `call` could pass [`check`](Self::check) wherever its features lie, from
    /// the taxa of the read's features alone (`taxa`: runs of (taxon, features), 0 for those not
    /// found, in any order) and its `features`. False means `check` gives 0 for every placing of
    /// them, so a read whose features' positions are not at hand (the GPU's hit lists; the CPU's
    /// features, which carry no position) need not be sketched again for them: against a 50 Gbp
    /// index chance gives 3% of reads a weak call of a few features, and sketching them again
    /// was most of the rule's time (bench/results/HISTORY.md, "Twenty-fourth session").
    ///
    /// The bound: whatever the positions, each spot adds at least `log10 q` of its clade to
    /// [`chance_log10`] (a stretch's first spot adds that and its share of the ways, a later one
    /// `log10 min(1, 4^-d + q)`, which is no less), and the ways of `s` stretches multiply to
    /// `C(features, s)` for some `s` from 1 to the spots.
    pub(crate) fn may_stand(&self, call: TaxId, taxa: impl Iterator<Item = (TaxId, u32)>, features: u64) -> bool {
        if call == 0 {
            return false;
        }
        let (mut spots, mut least) = (0u64, 0f64);
        for (taxon, n) in taxa {
            if let Some(bases) = self.lineage_bases(call, taxon) {
                spots += u64::from(n);
                least += f64::from(n) * stretch_start_log10(bases, self.k);
            }
        }
        if spots < u64::from(self.hitmin) {
            return false;
        }
        // The fewest ways: C(features, s) at its smallest for s in 1..=spots, as `chance_log10`
        // counts them.
        let (mut ways, mut fewest) = (0f64, f64::INFINITY);
        for s in 0..spots {
            ways += stretch_ways(features, s).log10();
            fewest = fewest.min(ways);
        }
        // A margin for the sums' rounding, which differ from `chance_log10`'s order.
        least + fewest <= MAX_CHANCE_LOG10 + 1e-9
    }

    /// The bases a spot of `taxon` matched in by chance where it is in `call`'s lineage (its
    /// clade or its path to the root): its LCA with the call's clade's; `None` outside it.
    fn lineage_bases(&self, call: TaxId, taxon: TaxId) -> Option<u64> {
        if taxon == 0 {
            return None;
        }
        let lca = self.tree.lca(call, taxon);
        (lca == call || lca == taxon).then(|| self.bases.of(self.tree, lca))
    }
}

/// log10 of the chance `q` that a k-mer is somewhere in `bases` (either strand), as
/// [`chance_log10`] counts it: `min(1, 2G / 4^k)`.
fn stretch_start_log10(bases: u64, k: u32) -> f64 {
    (2.0 * bases.max(1) as f64 / 4f64.powi(k as i32)).min(1.0).log10()
}

/// The ways the `(s+1)`-th stretch of a read of `features` features can start, given `s` before
/// it: `C(f, s+1) = C(f, s) (f - s) / (s + 1)`.
fn stretch_ways(features: u64, s: u64) -> f64 {
    features.saturating_sub(s).max(1) as f64 / (s + 1) as f64
}

/// log10 of how often chance would match a read of `features` sketched features as `spots` do:
/// each spot its mate, its k-mer's position and the bases its match could lie in by chance (`G`);
/// sorted by mate and position.
///
/// A k-mer is somewhere in `G` bases (either strand) by chance with probability about
/// `q = min(1, 2G / 4^k)`. A chance match shows only where the sketch picked one of its k-mers, so
/// a stretch starts at one of the read's features, and `s` stretches at any `s` of them: `C(features,
/// s)` ways, each with probability `q` a stretch. Each next k-mer of a stretch, `d` bases on,
/// overlaps the one before: it matches either as the same match grown by `d` bases (`4^-d`) or as a
/// match of its own (`q`): `min(1, 4^-d + q)`. So in a small clade a stretch counts as one match of
/// its whole span, and in a large one (where most k-mers are somewhere) overlapping k-mers add
/// little.
///
/// The starts were once counted as the read's k-mers, once for each stretch (`k-mers^s`, not
/// `C(features, s)`): twelve single matches of a read of a new *E. coli* strain in the 25 Mbp of
/// the species' targets came to 10^6, chance, and such reads went unclassified; they are 10^-13.
pub(crate) fn chance_log10(spots: impl Iterator<Item = (u8, u32, u64)>, k: u32, features: u64) -> f64 {
    let kmers_of_k = 4f64.powi(k as i32);
    let q = |bases: u64| (2.0 * bases.max(1) as f64 / kmers_of_k).min(1.0);
    let (mut total, mut last, mut stretches): (f64, Option<(u8, u64)>, u64) = (0.0, None, 0);
    for (mate, pos, bases) in spots {
        let pos = u64::from(pos);
        total += match last {
            Some((m, before)) if m == mate && pos < before + u64::from(k) => {
                (4f64.powi(-((pos - before) as i32)) + q(bases)).min(1.0).log10()
            }
            _ => {
                let ways = stretch_ways(features, stretches);
                stretches += 1;
                (ways * q(bases)).log10()
            }
        };
        last = Some((mate, pos));
    }
    total
}

/// The positions in `seq` (one mate of a read) of its features that some index found: those whose
/// taxon in `runs` (the mate's hit runs, one taxon per feature in sketch order) is not 0. What a
/// candidates file keeps of each read for `kmerdb merge`'s evidence rule.
pub(crate) fn found_positions(sketcher: &mut Sketcher, seq: &[u8], runs: &[(TaxId, u32)]) -> Vec<u32> {
    let mut spots = Vec::new();
    sketched_spots(sketcher, (0, seq), runs, (&mut Vec::new(), &mut Vec::new()), &mut spots);
    spots.iter().map(|s| s.pos).collect()
}

/// Appends the spots of one mate (its number and bases) whose hit runs are `runs`: its features
/// sketched again for their positions (`scratch`: buffers for the features and positions), those
/// with a taxon kept. What the evidence rule needs of a read whose hit lists are known but whose
/// features were not kept (the GPU's path). Returns the mate's features, found or not.
pub(crate) fn sketched_spots(
    sketcher: &mut Sketcher,
    (mate, seq): (u8, &[u8]),
    runs: &[(TaxId, u32)],
    (features, positions): (&mut Vec<crate::sketch::Feature>, &mut Vec<u32>),
    out: &mut Vec<Spot>,
) -> u64 {
    sketcher.read_features_and_positions(seq, features, positions);
    let taxa = runs.iter().flat_map(|&(t, n)| std::iter::repeat_n(t, n as usize));
    let found = positions.iter().zip(taxa).filter(|&(_, t)| t != 0);
    out.extend(found.map(|(&pos, taxon)| Spot { mate, pos, taxon }));
    features.len() as u64
}

/// Appends a part's found features of one mate as (feature index, position): `runs` its hit runs,
/// `positions` those of its features with a taxon (as [`found_positions`] gave them; the caller
/// checked there are as many). Runs of features not found are skipped, not walked.
pub(crate) fn found_features(runs: &[(TaxId, u32)], positions: &[u32], out: &mut Vec<(u64, u32)>) {
    let (mut at, mut next) = (0u64, positions.iter());
    for &(taxon, n) in runs {
        if taxon != 0 {
            out.extend((at..at + u64::from(n)).zip(next.by_ref().copied()));
        }
        at += u64::from(n);
    }
}

/// The spots of one mate (`mate`) from its joined hit runs (`runs`) and the found features of
/// every part ([`found_features`], sorted by feature index, one entry a feature).
pub(crate) fn spots_of(mate: u8, runs: &[(TaxId, u32)], found: &[(u64, u32)], out: &mut Vec<Spot>) {
    let (mut at, mut next) = (0u64, 0usize);
    for &(taxon, n) in runs {
        let end = at + u64::from(n);
        if taxon != 0 {
            while next < found.len() && found[next].0 < at {
                next += 1;
            }
            while next < found.len() && found[next].0 < end {
                out.push(Spot { mate, pos: found[next].1, taxon });
                next += 1;
            }
        }
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // root 1 - genus 10 - species 100 (strains 1000, 1001) and species 101.
    use crate::classify::candidates::tests::tree;

    fn spot(mate: u8, pos: u32, taxon: TaxId) -> Spot {
        Spot { mate, pos, taxon }
    }

    #[test]
    fn clade_bases_add_up_their_targets() {
        let tree = tree();
        let bases = CladeBases::new(&tree, [(1000, 5), (1001, 7), (101, 100), (999, 1000)]);
        assert_eq!([1000, 100, 101, 10, 1].map(|t| bases.of(&tree, t)), [5, 12, 100, 112, 112]);
        assert_eq!(bases.of(&tree, 999), 0, "a taxon the tree lacks");
    }

    /// In a small clade overlapping k-mers are one match of their span; separate stretches
    /// multiply, each starting at any of the features the ones before left (`C(features, s)`); in
    /// a large clade overlapping k-mers add little.
    #[test]
    fn chance_counts_stretches_by_their_span() {
        let f = 38.0;
        let one = |spots: &[(u8, u32)], g: u64| chance_log10(spots.iter().map(|&(m, p)| (m, p, g)), 16, 38);
        let q = |g: f64| (2.0 * g / 4f64.powi(16)).min(1.0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let first = |g: f64| (f * q(g)).log10();
        let second = |g: f64| ((f - 1.0) / 2.0 * q(g)).log10();
        let next = |d: i32, g: f64| (4f64.powi(-d) + q(g)).min(1.0).log10();
        let g = 5e6;
        assert!(close(one(&[(0, 108), (0, 109), (0, 111)], 5_000_000), first(g) + next(1, g) + next(2, g)));
        assert!(close(one(&[(0, 10), (0, 40)], 5_000_000), first(g) + second(g)), "two stretches");
        assert!(close(one(&[(0, 10), (1, 10)], 5_000_000), first(g) + second(g)), "mates apart");
        assert!(close(one(&[(0, 10), (0, 26)], 5_000_000), first(g) + second(g)), "adjacent, not overlapping");
        assert!(close(one(&[(0, 10), (0, 25)], 5_000_000), first(g) + next(15, g)), "one base of overlap");
        // In a small clade a 19-base stretch is about one match of 19 bases.
        let small = one(&[(0, 108), (0, 109), (0, 111)], 20_000);
        assert!((small - (f * 2.0 * 2e4 / 4f64.powi(19)).log10()).abs() < 0.01, "{small}");
        // Where most 16-mers are somewhere (2 Gbp), four overlapping k-mers are no evidence.
        assert!(one(&[(0, 92), (0, 93), (0, 94), (0, 106)], 2_000_000_000) > 0.0);
        // Many single matches are evidence even in a large clade: twelve of 38 features in 25 Mbp
        // (a read of a new E. coli strain), where one is chance (38 x 1.2e-2 = 0.44).
        let twelve: Vec<(u8, u32)> = (0..12).map(|i| (i % 2, 20 * (i / 2) as u32)).collect();
        assert!(one(&twelve[..1], 25_000_000) > -1.0);
        assert!(one(&twelve, 25_000_000) < -10.0, "{}", one(&twelve, 25_000_000));
    }

    /// The rule: `hitmin` features in the lineage (clade or path to the root; a sibling's do not
    /// count), and stretches chance would rarely give in the clade's bases (at most 1e-7).
    #[test]
    fn weak_calls_need_features_in_their_lineage_that_chance_would_not_give() {
        assert_eq!(MAX_CHANCE_LOG10, -7.0, "the cases below are set around it");
        let tree = tree();
        let bases = CladeBases::new(&tree, [(1000, 10_000), (1001, 10_000), (101, 50_000_000)]);
        let ev = Evidence { tree: &tree, bases: &bases, hitmin: 3, k: 16 };
        let check = |call, spots: &[Spot]| ev.check(call, &mut spots.to_vec(), 38);
        // Three spread features of species 100 (20 kbp: 3.5e-4, 1.7e-4, 1.1e-4): far beyond chance.
        let spread = [spot(0, 0, 100), spot(0, 40, 1000), spot(1, 70, 1001)];
        assert_eq!(check(100, &spread), 100);
        assert_eq!(check(100, &spread[..2]), 0, "two features are too few");
        assert_eq!(check(100, &[spread[0], spread[1], spot(1, 70, 101)]), 0, "a sibling is not in the lineage");
        assert_eq!(check(0, &spread), 0);
        // One 24-base stretch: rare in 20 kbp (38 x 40,000 / 4^24 = 5e-9)...
        let stretch = [spot(0, 108, 100), spot(0, 112, 100), spot(0, 116, 100)];
        assert_eq!(check(100, &stretch), 100);
        // ... but not in 50 Mbp (6e-4): a chance match of the kind shuffled reads make.
        let stretch_101 = stretch.map(|s| spot(s.mate, s.pos, 101));
        assert_eq!(check(101, &stretch_101), 0);
        // A feature of an ancestor (the genus) matched somewhere in the genus's bases (50 Mbp:
        // 0.4 to 0.2 each here): one of species 100's among three of the genus's is chance
        // (1e-5), three of them with one of the genus's are not.
        let via_genus = [spot(0, 10, 100), spot(0, 60, 10), spot(1, 50, 10), spot(1, 90, 10)];
        assert_eq!(check(100, &via_genus), 0);
        let own = [spot(0, 10, 100), spot(0, 60, 1000), spot(1, 50, 100), spot(1, 90, 10)];
        assert_eq!(check(100, &own), 100);
        // Stretches multiply as if each could lie anywhere in the clade (they do not need to be
        // near each other: the lineage's features may be in different targets): three single
        // 16-mers in 50 Mbp are chance, three stretches of three k-mers 3 bases apart are not
        // (5e-5, 2.5e-5 and 1.6e-5 each).
        let singles = spread.map(|s| spot(s.mate, s.pos, 101));
        assert_eq!(check(101, &singles), 0);
        let stretches: Vec<Spot> =
            spread.iter().flat_map(|s| [0, 3, 6].map(|d| spot(s.mate, s.pos + d, 101))).collect();
        assert_eq!(check(101, &stretches), 101);
        assert!(is_weak(100, 8, 3) && !is_weak(100, 9, 3) && !is_weak(0, 0, 3));
    }

    /// The bound from taxa alone never leaves out a call that the check keeps, however the
    /// features lie, and it leaves out most of those it can: random spots of random taxa of the
    /// test tree (missing ones too), in clades from 10 kbp to 50 Mbp.
    #[test]
    fn a_call_left_out_from_its_taxa_alone_never_passes_the_check() {
        use rand::{Rng, SeedableRng};
        let tree = tree();
        let taxa = [0, 1, 10, 100, 101, 1000, 1001, 999];
        let mut rng = rand::rngs::StdRng::seed_from_u64(24);
        let (mut kept, mut left_out, mut could) = (0, 0, 0);
        for round in 0..20_000 {
            let sizes = [10_000u64, 1_000_000, 50_000_000];
            let size = |rng: &mut rand::rngs::StdRng| sizes[rng.random_range(0..3)];
            let bases = CladeBases::new(&tree, [(1000, size(&mut rng)), (1001, size(&mut rng)), (101, size(&mut rng))]);
            let ev = Evidence { tree: &tree, bases: &bases, hitmin: 1 + round % 3, k: 16 };
            let call = taxa[rng.random_range(0..taxa.len())];
            let features: u64 = rng.random_range(1..60);
            let n = rng.random_range(0..=features.min(20));
            // Clustered positions, so that stretches of every length come up.
            let mut spots: Vec<Spot> = (0..n)
                .map(|_| spot(rng.random_range(0..2), rng.random_range(0..40), taxa[rng.random_range(0..taxa.len())]))
                .collect();
            let runs: Vec<(TaxId, u32)> = spots.iter().map(|s| (s.taxon, 1)).collect();
            let may = ev.may_stand(call, runs.into_iter(), features);
            let passed = ev.check(call, &mut spots, features) != 0;
            assert!(may || !passed, "left out a call that passes: {call} {features} {spots:?}");
            kept += passed as u32;
            left_out += !may as u32;
            could += (may && !passed) as u32;
        }
        assert!(kept > 1000 && left_out > 5000, "kept {kept}, left out {left_out}");
        // Those it lets through to be sketched but the check drops: the price of not knowing
        // where the features lie.
        assert!(could < left_out, "{could} through, {left_out} left out");
    }

    /// What a candidates file keeps (positions of found features) gives back the spots that the
    /// read's classification had, after the parts' runs are joined.
    #[test]
    fn spots_come_back_from_the_parts_found_features() {
        // Part A found features 1 and 4 of six; part B features 4 and 5 (joined: 1, 4, 5).
        let (a, pos_a) = (vec![(0, 1), (100, 1), (0, 2), (1000, 1), (0, 1)], vec![7, 40]);
        let (b, pos_b) = (vec![(0, 4), (10, 1), (101, 1)], vec![40, 55]);
        let mut found = Vec::new();
        found_features(&a, &pos_a, &mut found);
        found_features(&b, &pos_b, &mut found);
        found.sort_unstable();
        found.dedup_by_key(|f| f.0);
        assert_eq!(found, [(1, 7), (4, 40), (5, 55)]);
        let joined = [(0, 1), (100, 1), (0, 2), (1000, 1), (101, 1)];
        let mut spots = Vec::new();
        spots_of(1, &joined, &found, &mut spots);
        assert_eq!(spots, [spot(1, 7, 100), spot(1, 40, 1000), spot(1, 55, 101)]);
    }

    /// Positions are those of each feature's first k-mer in the mate.
    #[test]
    fn found_positions_are_where_the_features_first_occur() {
        let params = crate::sketch::SketchParams::new(8, 40, None, 4, 0).unwrap();
        let mut sketcher = Sketcher::new(params);
        let seq = b"ACGTTGCAAGGCTTACGATCGGATCCATGCAAGTCAGTCAGGATTACA";
        let mut features = Vec::new();
        sketcher.read_features(seq, &mut features);
        let mut kmers = Vec::new();
        crate::sketch::kmer_features(seq, &params, &mut kmers);
        let runs: Vec<(TaxId, u32)> = (0..features.len()).map(|i| ((i % 2) as TaxId * 7, 1)).collect();
        let expect: Vec<u32> = features
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, f)| kmers.iter().position(|k| k == f).unwrap() as u32)
            .collect();
        assert!(!expect.is_empty());
        assert_eq!(found_positions(&mut sketcher, seq, &runs), expect);
    }
}
