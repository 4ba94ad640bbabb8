//! Classifying one read or read pair: MetaCache's method (REFERENCE.md §2). This is the
//! specification the GPU classifier follows.
//!
//! 1. Sketch every mate: a short read is one window sketched at the reference density
//!    (`Sketcher::read_features`), a long one is cut into windows like the references.
//! 2. Look up each feature and gather all its locations (mates together).
//! 3. Sort the locations; per target, slide a range of `2 + max(read length, insert size) / stride`
//!    consecutive windows over them; the best hit count in a range makes that target's candidate.
//! 4. Keep the top `max_candidates` (by hits, then by target id: ties are broken the same way
//!    everywhere).
//! 5. Unclassified if there is no candidate or the best has fewer than `hitmin` hits; otherwise
//!    the lowest common ancestor of the candidates with at least `(1 - hitdiff) * top` hits,
//!    optionally lifted to `lowest_rank`. A weak call (best below `3 x hitmin`) also needs
//!    `hitmin` of the read's features in its lineage, in matches too long for chance
//!    (`evidence`), else it is unclassified.
//!
//! Clade features (over the location cap, stored as their targets' LCA: `index::locations`) have
//! no locations; a read counts them per clade, as Kraken 2 counts its minimizers, and [`decide`]
//! adds each clade's count to every candidate in it and ranks the clades beside the candidates. A
//! read of a new strain whose features are all in the species' core genome is then called at the
//! species, where MetaCache (which drops such features) leaves it unclassified.
//!
//! Where kmerdb departs from MetaCache's defaults, measured on the mock and on held-out strains
//! (bench/results/HISTORY.md): `hitdiff` is a relative tolerance, 0 by default (only candidates tied with the
//! best join the LCA; MetaCache joins every candidate within `hitmin` hits of the best, which sent
//! reads of genomes with near-identical regions, such as phage lambda and E. coli prophages, to the
//! root); `hitmin` defaults to s / 5 (3 for s = 16) instead of s / 3, which classifies more reads
//! of divergent strains at equal precision; and pairs are scanned over a window range that covers a
//! 600-base insert. Short reads are sketched as one window at the reference density rather than
//! cut into reference-sized windows (MetaCache), which gives the same accuracy with 40% fewer
//! lookups.

use super::evidence::{self, CladeBases, Evidence, Spot, is_weak};
pub use crate::hits::{Candidate, push_run};
use crate::index::bcht::HASH_FUNCTIONS;
use crate::index::packed_keys::Probe;
use crate::index::{Index, LocationLayout, LocationList};
use crate::protein::ProteinTable;
use crate::sketch::Sketcher;
use crate::taxonomy::{TaxId, TaxonTree};

/// Settings of the decision, checked by the caller.
#[derive(Debug, Clone)]
pub struct ClassifyParams {
    pub hitmin: u32,
    pub hitdiff: f64,
    pub max_candidates: usize,
    /// Largest expected insert size of pairs, widening the window range of a candidate.
    pub insert_size: usize,
    /// Report taxa no lower than this rank (e.g. `species`): lower calls are lifted to it.
    pub lowest_rank: Option<String>,
    /// The share of a read's features that must fall in the called taxon's clade (see
    /// `with_confidence`); 0 checks nothing.
    pub confidence: f64,
    /// A call below species stands only if every other candidate of the same species has fewer
    /// than `(1 - strain_margin)` x the best's hits; otherwise it moves up to their LCA (see
    /// [`decide`]). 0: strains are called as any taxon is.
    pub strain_margin: f64,
    /// With an index built with `--protein`: the amino-acid k-mers a target must share with a read
    /// for the protein stage to place it (`with_protein`); 0 turns the stage off.
    pub protein_hitmin: u32,
}

impl ClassifyParams {
    /// The defaults for a sketch of `sketch_size` features (see the module documentation).
    pub(crate) fn defaults(sketch_size: u32) -> Self {
        Self {
            hitmin: Self::default_hitmin(sketch_size),
            hitdiff: 0.0,
            max_candidates: 3,
            insert_size: 600,
            lowest_rank: None,
            confidence: 0.0,
            strain_margin: DEFAULT_STRAIN_MARGIN,
            protein_hitmin: DEFAULT_PROTEIN_HITMIN,
        }
    }

    /// `hitmin` when not given: a fifth of the sketch size, at least 1.
    pub(crate) fn default_hitmin(sketch_size: u32) -> u32 {
        (sketch_size / 5).max(1)
    }
}

/// The result for one read: its taxon (0 = unclassified) and, when asked for, per-mate runs of
/// (taxon of each feature's locations, count) for Kraken's hit-list column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Call {
    pub taxid: TaxId,
    pub hit_runs: [Vec<(TaxId, u32)>; 2],
    /// With `Classifier::keep_candidates`: the top candidates as (target, hits), best first.
    pub candidates: Vec<(u32, u32)>,
    /// With `Classifier::keep_candidates`: the clade features' hits as (clade, count), by taxid.
    pub clades: Vec<(TaxId, u32)>,
}

/// The index's targets as every classifier of a run reads them, made once per run: a classifier
/// is made per parallel task, and when each made its own node list and clades' bases (which walk
/// every target's lineage) that was 4-8% of a GPU classify's CPU time against a 20 Gbp index of
/// thousands of targets (pprof; bench/results/HISTORY.md, "GPU classify: streams in turn, a GiB
/// read ahead, and the host's CPU time").
pub struct TargetTables<'a> {
    /// The index they are made from, which the lazily made tables read.
    index: &'a Index,
    /// Target id → taxid.
    pub taxa: Vec<TaxId>,
    /// Target id → node index in the taxonomy tree, for the hit list's LCAs and the decision.
    nodes: Vec<u32>,
    /// The bases under each taxon, for the evidence rule: made at the first weak call (most
    /// runs' reads are not weak).
    clade_bases: std::sync::OnceLock<CladeBases>,
    /// The amino-acid table's per-target sizes and compositions, for the protein stage's
    /// e-values (see [`TargetTables::protein_chance`]).
    protein_chance: std::sync::OnceLock<crate::protein::ProteinChance>,
}

impl<'a> TargetTables<'a> {
    /// Each target's tree node, as [`decide_scored`] takes them.
    pub(crate) fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    pub fn new(index: &'a Index) -> Self {
        let tree = index.taxonomy();
        Self {
            index,
            taxa: index.targets().iter().map(|t| t.taxid).collect(),
            nodes: index
                .targets()
                .iter()
                .map(|t| tree.node(t.taxid).expect("every target's taxon is in the index's tree"))
                .collect(),
            clade_bases: std::sync::OnceLock::new(),
            protein_chance: std::sync::OnceLock::new(),
        }
    }

    /// The index the tables are of.
    pub fn index(&self) -> &'a Index {
        self.index
    }

    /// The clades' bases, made by the first caller (a plain loop, on the caller's thread).
    fn clade_bases(&self) -> &CladeBases {
        let index = self.index;
        self.clade_bases
            .get_or_init(|| CladeBases::new(index.taxonomy(), index.targets().iter().map(|t| (t.taxid, t.length))))
    }

    /// What chance gives a read in the index's amino-acid table (`None` without one): made once, on
    /// first use, in one pass over the table (`classify` makes it before the reads start). Kept
    /// here, with the run's other tables, not in the index: it is the protein stage's.
    ///
    /// It is made outside the cell's lock: the pass runs on the rayon pool, whose thread may meanwhile
    /// take another read's job that asks for it too, and waiting on the lock from inside it would
    /// deadlock. Two first callers may both make it; the first one kept is the value (they are equal).
    pub(crate) fn protein_chance(&self) -> Option<&crate::protein::ProteinChance> {
        let index = self.index;
        let table = index.protein()?;
        if let Some(made) = self.protein_chance.get() {
            return Some(made);
        }
        let made = {
            // Targets grouped by species (their own taxon where it has none), numbered in
            // target order.
            let tree = index.taxonomy();
            let mut species = std::collections::HashMap::new();
            let groups: Vec<u32> = index
                .targets()
                .iter()
                .map(|t| {
                    let s = tree.ancestor_at_rank(t.taxid, "species").unwrap_or(t.taxid);
                    let next = species.len() as u32;
                    *species.entry(s).or_insert(next)
                })
                .collect();
            crate::protein::ProteinChance::new(&table, &groups)
        };
        Some(self.protein_chance.get_or_init(|| made))
    }
}

/// Per-thread classifier with reusable buffers.
pub struct Classifier<'a> {
    index: &'a Index,
    params: &'a ClassifyParams,
    sketcher: Sketcher,
    features: Vec<crate::sketch::Feature>,
    /// End of each mate's features in `features` (mates of all reads of a group, in order).
    mate_ends: Vec<usize>,
    /// Each feature's (shard, list), if the index holds it.
    found: Vec<Option<(usize, crate::index::ListRef)>>,
    /// Features whose next candidate bucket is still to be probed, and those of the round after.
    pending: Vec<usize>,
    next: Vec<usize>,
    locations: Vec<u64>,
    candidates: Vec<Candidate>,
    /// The read's clade features' clades (tree nodes), then counted by taxid.
    clade_nodes: Vec<u32>,
    clades: Vec<(TaxId, u32)>,
    /// The decision's entries (`decide_scored`).
    entries: Vec<Entry>,
    /// Target id → taxid and tree node, and the clades' bases.
    targets: &'a TargetTables<'a>,
    /// Whether calls carry their candidates (for `--candidates-out`).
    pub keep_candidates: bool,
    /// The index's amino-acid table, when it has one and the protein stage is on.
    protein: Option<ProteinTable<'a>>,
    protein_scratch: ProteinScratch,
    /// The current read's features' taxa, positions and spots, for the evidence rule of weak
    /// calls.
    feature_taxa: Vec<TaxId>,
    positions: Vec<u32>,
    spots: Vec<Spot>,
    /// One mate's features sketched again for a weak call's evidence from its hit runs.
    mate_features: Vec<crate::sketch::Feature>,
}

impl<'a> Classifier<'a> {
    /// A classifier of `targets`' index.
    pub fn new(params: &'a ClassifyParams, targets: &'a TargetTables<'a>) -> Self {
        let index = targets.index();
        Self {
            index,
            params,
            sketcher: Sketcher::new(index.header().sketch),
            features: Vec::new(),
            mate_ends: Vec::new(),
            found: Vec::new(),
            pending: Vec::new(),
            next: Vec::new(),
            locations: Vec::new(),
            candidates: Vec::new(),
            clade_nodes: Vec::new(),
            clades: Vec::new(),
            entries: Vec::new(),
            targets,
            keep_candidates: false,
            protein: index.protein().filter(|_| params.protein_hitmin > 0),
            protein_scratch: ProteinScratch::default(),
            feature_taxa: Vec::new(),
            positions: Vec::new(),
            spots: Vec::new(),
            mate_features: Vec::new(),
        }
    }

    /// `call` after the protein stage ([`with_protein`]), for a read of `mates`; as it is when the
    /// index has no amino-acid table or the stage is off.
    pub(crate) fn with_protein(&mut self, call: TaxId, mates: &[&[u8]]) -> TaxId {
        self.protein_stage(call, |table, out| {
            for m in mates {
                crate::protein::mate_kmers(m, &table.params, out);
            }
        })
    }

    /// [`Classifier::with_protein`] for a read whose mates' amino-acid k-mers were listed already
    /// (by the GPU: each mate's `protein::mate_kmers`).
    pub(crate) fn with_protein_kmers<'k>(&mut self, call: TaxId, kmers: impl IntoIterator<Item = &'k [u32]>) -> TaxId {
        self.protein_stage(call, |_, out| {
            for m in kmers {
                out.extend_from_slice(m);
            }
        })
    }

    fn protein_stage(&mut self, call: TaxId, kmers: impl FnOnce(&ProteinTable, &mut Vec<u32>)) -> TaxId {
        let Some(table) = &self.protein else { return call };
        let chance = self.targets.protein_chance().expect("the index has the amino-acid table");
        with_protein(
            call,
            |out: &mut Vec<u32>| kmers(table, out),
            (table, chance),
            self.params,
            &self.targets.taxa,
            self.index.taxonomy(),
            &mut self.protein_scratch,
        )
    }

    /// Classifies a read given as its mates' sequences. With `hit_list`, also fills the hit runs.
    pub fn classify(&mut self, mates: &[&[u8]], hit_list: bool) -> Call {
        self.classify_group(&[mates], hit_list).pop().expect("one call per read")
    }

    /// Classifies several reads. The lookups are memory-bound, so each stage runs over the whole
    /// group before the next: all features, then all their buckets prefetched, then all slots read
    /// (prefetching the lists they point to), then the lists decoded read by read. The cache
    /// misses of one read then overlap those of the others instead of coming one after another.
    pub(crate) fn classify_group(&mut self, reads: &[&[&[u8]]], hit_list: bool) -> Vec<Call> {
        let index = self.index;
        let tree = index.taxonomy();
        self.features.clear();
        self.mate_ends.clear();
        for mates in reads {
            for seq in *mates {
                self.sketcher.read_features(seq, &mut self.features);
                self.mate_ends.push(self.features.len());
            }
        }
        for &f in &self.features {
            index.prefetch(f);
        }
        // Bucket by bucket: a feature not in its full first bucket has its second prefetched
        // and read after the others' first ones, and so on, so that the misses of features found
        // in no bucket (most of a read's, for reads of taxa the index lacks) overlap too. Probing
        // a feature's buckets one after another is `Index::lookup_value`.
        self.found.clear();
        self.pending.clear();
        self.found.resize(self.features.len(), None);
        self.pending.extend(0..self.features.len());
        for j in 0..HASH_FUNCTIONS {
            self.next.clear();
            for &i in &self.pending {
                let f = self.features[i];
                match index.probe(f, j) {
                    Probe::Found(list) => {
                        let shard = index.shard_of(f);
                        index.prefetch_list(shard, list);
                        self.found[i] = Some((shard, list));
                    }
                    Probe::Absent => {}
                    Probe::Full if j + 1 < HASH_FUNCTIONS => {
                        index.prefetch_bucket(f, j + 1);
                        self.next.push(i);
                    }
                    Probe::Full => {}
                }
            }
            std::mem::swap(&mut self.pending, &mut self.next);
        }
        let (layout, n_targets) = (*index.layout(), self.targets.taxa.len() as u32);
        let stride = index.header().sketch.stride as usize;
        let mut calls = Vec::with_capacity(reads.len());
        // Weak calls of reads classified without their hit runs: classified again with them.
        let mut recheck = Vec::new();
        let (mut mate_index, mut start) = (0, 0);
        for mates in reads {
            let mut call = Call::default();
            let (read_start, first_mate) = (start, mate_index);
            self.feature_taxa.clear();
            self.locations.clear();
            self.clade_nodes.clear();
            for m in 0..mates.len() {
                let end = self.mate_ends[mate_index];
                mate_index += 1;
                for found in &self.found[start..end] {
                    let list = found.map(|(shard, at)| index.list(shard, at));
                    let before = self.locations.len();
                    if let Some(list) = &list {
                        list.append_to(&mut self.locations);
                        // A node past the tree comes only from a damaged index opened unverified.
                        if let Some(node) = list.clade().filter(|&n| (n as usize) < tree.taxa().len()) {
                            self.clade_nodes.push(node);
                        }
                    }
                    if hit_list {
                        let appended = &self.locations[before..];
                        let taxon =
                            list.map_or(0, |list| feature_taxon(&list, appended, &layout, &self.targets.nodes, tree));
                        push_run(&mut call.hit_runs[m.min(1)], taxon);
                        self.feature_taxa.push(taxon);
                    }
                }
                start = end;
            }
            // Only a damaged index opened without verification can point past the last target.
            self.locations.retain(|&l| layout.unpack(l).0 < n_targets);
            let total_len: usize = mates.iter().map(|m| m.len()).sum();
            let range = 2 + total_len.max(self.params.insert_size) / stride;
            top_candidates(
                &mut self.locations,
                index.layout(),
                range as u32,
                self.params.max_candidates,
                &mut self.candidates,
            );
            count_clades(&mut self.clade_nodes, tree, &mut self.clades);
            let (taxid, top) = decide_scored(
                &self.candidates,
                &self.clades,
                self.params,
                self.targets.nodes(),
                tree,
                &mut self.entries,
            );
            call.taxid = taxid;
            if is_weak(taxid, top, self.params.hitmin) {
                if hit_list {
                    call.taxid = self.with_evidence(taxid, mates, read_start, first_mate);
                } else {
                    recheck.push(calls.len());
                }
            }
            call.taxid = self.with_protein(call.taxid, mates);
            if self.keep_candidates {
                call.candidates = self.candidates.iter().map(|c| (c.target, c.hits)).collect();
                call.clades = self.clades.clone();
            }
            calls.push(call);
        }
        if !recheck.is_empty() {
            let again: Vec<&[&[u8]]> = recheck.iter().map(|&i| reads[i]).collect();
            for (&i, call) in recheck.iter().zip(self.classify_group(&again, true)) {
                calls[i].taxid = call.taxid;
            }
        }
        calls
    }

    /// [`Evidence::check`] of a weak `call` of the read of `mates`, whose features start at
    /// `self.features[read_start]` and whose first mate is `self.mate_ends[first_mate]`'s, with
    /// their taxa in `self.feature_taxa`.
    fn with_evidence(&mut self, call: TaxId, mates: &[&[u8]], read_start: usize, first_mate: usize) -> TaxId {
        let end = self.mate_ends[first_mate + mates.len() - 1];
        let taxa = self.feature_taxa[..end - read_start].iter().map(|&t| (t, 1));
        if !self.evidence().may_stand(call, taxa, (end - read_start) as u64) {
            return 0;
        }
        self.spots.clear();
        let mut start = read_start;
        for (m, seq) in mates.iter().enumerate() {
            let end = self.mate_ends[first_mate + m];
            self.sketcher.feature_positions(seq, &self.features[start..end], &mut self.positions);
            let taxa = &self.feature_taxa[start - read_start..end - read_start];
            let found = self.positions.iter().zip(taxa).filter(|&(_, &t)| t != 0);
            self.spots.extend(found.map(|(&pos, &taxon)| Spot { mate: m as u8, pos, taxon }));
            start = end;
        }
        self.check_spots(call, (start - read_start) as u64)
    }

    /// [`Evidence::check`] of a weak `call` of the read of `mates` from its hit runs (one taxon a
    /// feature, in sketch order, a mate's runs each), as the GPU's hit lists give them: the read is
    /// sketched again for its features' positions, not looked up again (a weak call went back
    /// to the CPU's whole classification before: a tenth of the reads' host time against a 50
    /// Gbp index, where chance gives most random reads a few hits).
    pub(crate) fn with_evidence_of_runs(&mut self, call: TaxId, mates: &[&[u8]], runs: [&[(TaxId, u32)]; 2]) -> TaxId {
        let runs = &runs[..mates.len()];
        let listed: u64 = runs.iter().flat_map(|r| r.iter()).map(|&(_, n)| u64::from(n)).sum();
        if !self.evidence().may_stand(call, runs.iter().flat_map(|r| r.iter().copied()), listed) {
            return 0;
        }
        self.spots.clear();
        let mut features = 0;
        for (m, (seq, runs)) in mates.iter().zip(runs).enumerate() {
            let scratch = (&mut self.mate_features, &mut self.positions);
            features += evidence::sketched_spots(&mut self.sketcher, (m as u8, seq), runs, scratch, &mut self.spots);
        }
        debug_assert_eq!(features, listed, "a hit list of another sketch than the read's");
        self.check_spots(call, features)
    }

    /// What the evidence rule reads of the index and the settings.
    fn evidence(&self) -> Evidence<'a> {
        let k = self.index.header().sketch.k;
        Evidence { tree: self.index.taxonomy(), bases: self.targets.clade_bases(), hitmin: self.params.hitmin, k }
    }

    /// [`Evidence::check`] of `call` with the spots in `self.spots`, of a read of `features`.
    fn check_spots(&mut self, call: TaxId, features: u64) -> TaxId {
        let evidence = self.evidence();
        crate::cpu_time::charge(crate::cpu_time::Work::Evidence, || evidence.check(call, &mut self.spots, features))
    }

    /// The candidates of the last classified read, best first.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }
}

/// A read's clade features' `nodes` (sorted here) counted per clade, as (taxid, count) in taxid
/// order (tree nodes are numbered in taxid order).
pub(crate) fn count_clades(nodes: &mut [u32], tree: &TaxonTree, out: &mut Vec<(TaxId, u32)>) {
    out.clear();
    nodes.sort_unstable();
    for run in nodes.chunk_by(|a, b| a == b) {
        out.push((tree.node_taxid(run[0]), run.len() as u32));
    }
}

/// The LCA of the taxa of a feature's targets, computed on tree node indices from its
/// `locations` (as the list decoded them for the candidates: decoding each list a second time,
/// with an LCA step at every location, made the per-read output a sixth of a strain-dense
/// classification's CPU time); a clade feature's clade. A list holds a target's windows side by
/// side, so a target is looked at once.
fn feature_taxon(
    list: &LocationList,
    locations: &[u64],
    layout: &LocationLayout,
    target_nodes: &[u32],
    tree: &TaxonTree,
) -> TaxId {
    if let Some(node) = list.clade() {
        return if (node as usize) < tree.taxa().len() { tree.node_taxid(node) } else { 0 };
    }
    let (mut node, mut last): (Option<u32>, Option<u32>) = (None, None);
    for &l in locations {
        let target = layout.unpack(l).0;
        if last == Some(target) {
            continue;
        }
        last = Some(target);
        if let Some(&n) = target_nodes.get(target as usize) {
            node = Some(node.map_or(n, |m| if m == n { m } else { tree.lca_node(m, n) }));
        }
    }
    node.map_or(0, |n| tree.node_taxid(n))
}

/// Fills `out` with the best `max` candidates of the gathered `locations` (sorted here).
pub(crate) fn top_candidates(
    locations: &mut [u64],
    layout: &LocationLayout,
    range: u32,
    max: usize,
    out: &mut Vec<Candidate>,
) {
    out.clear();
    locations.sort_unstable();
    for run in locations.chunk_by(|a, b| layout.unpack(*a).0 == layout.unpack(*b).0) {
        let target = layout.unpack(run[0]).0;
        let window = |i: usize| layout.unpack(run[i]).1;
        let (mut best, mut first, mut last) = (0u32, 0u32, 0u32);
        let mut lo = 0;
        for hi in 0..run.len() {
            while window(hi) - window(lo) >= range {
                lo += 1;
            }
            let hits = (hi - lo + 1) as u32;
            if hits > best {
                (best, first, last) = (hits, window(lo), window(hi));
            }
        }
        let c = Candidate { target, hits: best, first_window: first, last_window: last };
        // Insert into the sorted top list: more hits first, then lower target id (targets arrive
        // in ascending order, so an equal count goes after the ones already there).
        let pos = out.partition_point(|o| o.hits >= c.hits);
        if pos < max {
            out.insert(pos, c);
            out.truncate(max);
        }
    }
}

/// Kraken 2's `--confidence` rule on kmerdb's features: a call stands when at least
/// `ceil(confidence x features)` of the read's features (both mates', found in the index or not)
/// have a taxon in the called taxon's clade; otherwise the call moves to the parent until one
/// does, and the read is unclassified when even the root's clade has too few. `runs` are the
/// read's hit runs (each feature's taxon, 0 where it was not found). With confidence 0 the call
/// stands as it is.
pub(crate) fn with_confidence(call: TaxId, runs: [&[(TaxId, u32)]; 2], confidence: f64, tree: &TaxonTree) -> TaxId {
    if call == 0 || confidence <= 0.0 {
        return call;
    }
    let all = || runs.iter().flat_map(|r| r.iter()).copied();
    let total: u64 = all().map(|(_, n)| u64::from(n)).sum();
    let required = (confidence * total as f64).ceil() as u64;
    let mut taxon = Some(call);
    while let Some(t) = taxon {
        let clade: u64 = all().filter(|&(f, _)| f != 0 && tree.lca(t, f) == t).map(|(_, n)| u64::from(n)).sum();
        if clade >= required {
            return t;
        }
        taxon = tree.parent(t);
    }
    0
}

/// The default [`ClassifyParams::protein_hitmin`], chosen on the held-out sets (bench/results/HISTORY.md,
/// "The amino-acid stage").
pub const DEFAULT_PROTEIN_HITMIN: u32 = 6;

/// Buffers of the protein stage, one per thread.
#[derive(Debug, Default)]
pub(crate) struct ProteinScratch {
    codes: Vec<u32>,
    shared: crate::protein::SharedCounts,
}

/// The protein stage: a read that the DNA stage left unclassified, or placed above genus, is
/// translated in six frames and its amino-acid k-mers (`kmers` appends them; asked for only when
/// the stage looks at the read) looked up in `table`; where a target shares at least
/// `protein_hitmin` of them, more than chance gives ([`crate::protein::protein_call`]: an e-value
/// by the targets' sizes and compositions), the read goes to the genus (or the LCA above it) of
/// the targets that share about the most, if that lies within the DNA call's clade. DNA evidence
/// at genus or below stands as it is: it is the more specific.
pub(crate) fn with_protein(
    call: TaxId,
    kmers: impl FnOnce(&mut Vec<u32>),
    (table, chance): (&ProteinTable, &crate::protein::ProteinChance),
    params: &ClassifyParams,
    target_taxa: &[TaxId],
    tree: &TaxonTree,
    scratch: &mut ProteinScratch,
) -> TaxId {
    if params.protein_hitmin == 0 || (call != 0 && tree.ancestor_at_rank(call, "genus").is_some()) {
        return call;
    }
    // The read's k-mers each once, ascending, as `protein_call` takes them.
    scratch.codes.clear();
    kmers(&mut scratch.codes);
    scratch.codes.sort_unstable();
    scratch.codes.dedup();
    let (found, _) = crate::protein::protein_call(
        table,
        chance,
        &scratch.codes,
        params.protein_hitmin,
        target_taxa,
        tree,
        &mut scratch.shared,
    );
    match found {
        0 => call,
        p if call == 0 || tree.lca(call, p) == call => p,
        _ => call,
    }
}

/// The default [`ClassifyParams::strain_margin`]: a strain is called when its runner-up in the
/// same species has fewer than 90% of its hits. Chosen on the mock (bench/results/HISTORY.md, "Strain calls"):
/// reads put on a wrong sibling strain fell from 20.3% to 1.0% (Kraken 2: 1.0%), species F1 within
/// 0.0001.
pub const DEFAULT_STRAIN_MARGIN: f64 = 0.1;

/// The taxon of a read from its candidates and its clade features' hits (0 = unclassified): the
/// LCA of the best and of those tied with it (within `hitdiff`); a call below species then also
/// takes in the candidates of its species within `strain_margin` of the best, so that a strain is
/// named only when the hits separate it from its siblings (strains of one species share most of
/// their sequence, and a read's few hits rarely tell them apart).
///
/// `clades` ((clade, count), one per clade) weigh in as Kraken 2 weighs a root-to-leaf path: a
/// candidate scores its hits plus the counts of the clades that hold its taxon, and each clade is
/// an entry of its own scoring its count plus those of the clades above it. The best entry is the
/// first of the highest score among those that stand on their own: a candidate with at least
/// `hitmin` hits of its own, a clade whose score reaches `hitmin`. So clade features never carry a
/// call below their clade by themselves: a read of a species the index lacks, with a few hits on a
/// sibling and more on their genus's clade features, is called at the genus, not as the sibling.
/// Every entry within `hitdiff` of the best then joins the LCA, as candidates do.
pub fn decide(
    candidates: &[Candidate],
    clades: &[(TaxId, u32)],
    params: &ClassifyParams,
    target_taxa: &[TaxId],
    tree: &TaxonTree,
) -> TaxId {
    let nodes = target_nodes(target_taxa, tree);
    decide_scored(candidates, clades, params, &nodes, tree, &mut Vec::new()).0
}

/// Each of `taxa`'s tree node, as [`decide_scored`] takes targets'; a taxon outside the tree
/// stands as the root, where its LCA with anything lies.
pub(crate) fn target_nodes(taxa: &[TaxId], tree: &TaxonTree) -> Vec<u32> {
    let root = tree.node(crate::taxonomy::ROOT).expect("a tree holds its root");
    taxa.iter().map(|&t| tree.node(t).unwrap_or(root)).collect()
}

/// One entry of [`decide_scored`]: a candidate's or a clade's tree node, its score, and what it
/// has on its own (a candidate's hits, a clade's score).
pub(crate) type Entry = (u32, u32, u32);

/// [`decide`]'s call and the best entry's score (0 when unclassified), which tells whether the
/// call is weak ([`is_weak`]). `target_nodes` are each target's tree node ([`target_nodes`]);
/// `entries` is the caller's buffer, so that nothing is allocated per read.
///
/// Worked out on tree nodes: a target's node is known, a clade's is looked up once, and whether
/// one entry lies under another is then a comparison (`TaxonTree::is_ancestor_node`). By taxid,
/// each test looked both taxa up (a hash map's lookups where taxids are sparse, as in a pruned
/// or synthetic taxonomy) and walked up: the decision was 14% of the host's CPU time of a GPU
/// run against the 50 Gbp index. A clade outside the tree (never, from an index's features)
/// stands as the root, as its LCAs put it, but holds no entry: only clades of the tree add
/// their counts to what lies under them.
pub(crate) fn decide_scored(
    candidates: &[Candidate],
    clades: &[(TaxId, u32)],
    params: &ClassifyParams,
    target_nodes: &[u32],
    tree: &TaxonTree,
    entries: &mut Vec<Entry>,
) -> (TaxId, u32) {
    // The clades first, as (node, count, whether it is in the tree): what every entry's support
    // is summed from.
    let root = tree.node(crate::taxonomy::ROOT).expect("a tree holds its root");
    entries.clear();
    entries.extend(clades.iter().map(|&(clade, count)| match tree.node(clade) {
        Some(node) => (node, count, 1),
        None => (root, count, 0),
    }));
    let k = entries.len();
    // An entry's support: the counts of the clades that hold it, each entry's once.
    let support = |entries: &[Entry], node: u32| -> u32 {
        entries[..k].iter().filter(|c| c.2 == 1 && tree.is_ancestor_node(c.0, node)).map(|c| c.1).sum()
    };
    for c in candidates {
        let node = target_nodes[c.target as usize];
        let score = c.hits + support(entries, node);
        entries.push((node, score, c.hits));
    }
    for i in 0..k {
        let score = support(entries, entries[i].0);
        entries.push((entries[i].0, score, score));
    }
    let scored = &entries[k..];
    // Entries that may be the best: candidates by their own hits, clades by their score.
    let standing = scored.iter().filter(|e| e.2 >= params.hitmin);
    let Some(&(top_node, top, _)) = standing.reduce(|best, e| if e.1 > best.1 { e } else { best }) else {
        return (0, 0);
    };
    (widen((top_node, top), scored, params, tree), top)
}

/// The call from the best entry `(node, score)` and every entry (node, score, own): the LCA of
/// those within `hitdiff` of the best, widened below species to the species' entries within
/// `strain_margin`, then cut at `lowest_rank`.
fn widen((top_node, top): (u32, u32), entries: &[Entry], params: &ClassifyParams, tree: &TaxonTree) -> TaxId {
    let threshold = top as f64 * (1.0 - params.hitdiff) - 1e-9;
    let mut node = top_node;
    for &(n, score, _) in entries {
        if score as f64 >= threshold {
            node = tree.lca_node(node, n);
        }
    }
    if params.strain_margin > 0.0
        && let Some(species) = tree.species_node(node).filter(|&s| s != node)
    {
        let close = top as f64 * (1.0 - params.strain_margin) - 1e-9;
        for &(n, score, _) in entries {
            if score as f64 >= close && tree.species_node(n) == Some(species) {
                node = tree.lca_node(node, n);
            }
        }
    }
    let taxon = tree.node_taxid(node);
    match &params.lowest_rank {
        Some(rank) => tree.ancestor_at_rank(taxon, rank).unwrap_or(taxon),
        None => taxon,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::taxonomy::Taxon;

    /// `decide_scored` as it was before each entry's score was worked out once (with `lca`, in
    /// every pass): the reference its results are compared with.
    fn decide_reference(
        candidates: &[Candidate],
        clades: &[(TaxId, u32)],
        params: &ClassifyParams,
        target_taxa: &[TaxId],
        tree: &TaxonTree,
    ) -> (TaxId, u32) {
        let support =
            |taxon: TaxId| -> u32 { clades.iter().filter(|&&(c, _)| tree.lca(c, taxon) == c).map(|&(_, n)| n).sum() };
        let entries = || {
            let listed = candidates.iter().map(|c| {
                let taxon = target_taxa[c.target as usize];
                (taxon, c.hits + support(taxon))
            });
            listed.chain(clades.iter().map(|&(c, _)| (c, support(c))))
        };
        // Entries that may be the best: candidates by their own hits, clades by their score.
        let own = candidates.iter().map(|c| c.hits).chain(clades.iter().map(|&(c, _)| support(c)));
        let standing = entries().zip(own).filter(|&(_, own)| own >= params.hitmin).map(|(e, _)| e);
        let Some((top_taxon, top)) = standing.reduce(|best, e| if e.1 > best.1 { e } else { best }) else {
            return (0, 0);
        };
        (widen_reference((top_taxon, top), entries, params, tree), top)
    }

    /// The widening as it was worked out by taxid: the call from the best entry `(taxon, score)`
    /// and every entry's `(taxon, score)`: the LCA of
    /// those within `hitdiff` of the best, widened below species to the species' entries within
    /// `strain_margin`, then cut at `lowest_rank`.
    fn widen_reference<I: Iterator<Item = (TaxId, u32)>>(
        (top_taxon, top): (TaxId, u32),
        entries: impl Fn() -> I,
        params: &ClassifyParams,
        tree: &TaxonTree,
    ) -> TaxId {
        let threshold = top as f64 * (1.0 - params.hitdiff) - 1e-9;
        let mut taxon = top_taxon;
        for (t, score) in entries() {
            if score as f64 >= threshold {
                taxon = tree.lca(taxon, t);
            }
        }
        if params.strain_margin > 0.0
            && let Some(species) = tree.ancestor_at_rank(taxon, "species").filter(|&s| s != taxon)
        {
            let close = top as f64 * (1.0 - params.strain_margin) - 1e-9;
            for (t, score) in entries() {
                if score as f64 >= close && tree.ancestor_at_rank(t, "species") == Some(species) {
                    taxon = tree.lca(taxon, t);
                }
            }
        }
        match &params.lowest_rank {
            Some(rank) => tree.ancestor_at_rank(taxon, rank).unwrap_or(taxon),
            None => taxon,
        }
    }

    /// root 1 - genus 10 - species 100 (strains 1000 and 1001 below it) and species 101.
    pub(in crate::classify) fn tree() -> TaxonTree {
        let taxon = |taxid, parent, rank: &str| Taxon { taxid, parent, rank: rank.into(), name: format!("t{taxid}") };
        TaxonTree::new(vec![
            taxon(1, 1, "no rank"),
            taxon(10, 1, "genus"),
            taxon(100, 10, "species"),
            taxon(101, 10, "species"),
            taxon(1000, 100, "strain"),
            taxon(1001, 100, "strain"),
        ])
        .unwrap()
    }

    /// The evidence rule from a read's hit runs (what the GPU's path has) gives the whole
    /// classification's answer for every weak call: reads of *E. coli* 536 with a base changed
    /// every few bases, so that only a few of their k-mers are found, against an index of it (5
    /// Mbp: chance explains some of those calls, and the rule drops them).
    #[test]
    fn evidence_from_hit_runs_equals_the_whole_classification() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let fasta = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data/genomes/Ecoli_536.fna.gz"));
        let config = crate::indexing::BuildConfig {
            protein: None,
            part: None,
            sources: vec![crate::input::Source::File(fasta.clone())],
            db: dir.path().join("e.db"),
            taxonomy: None,
            taxonomy_gtdb: Vec::new(),
            seqid_maps: Vec::new(),
            sketch: crate::sketch::SketchParams::new(16, 127, None, 16, 0).unwrap(),
            max_locations_per_feature: 64,
            threads: 2,
            strict: false,
            progress: false,
            gpus: crate::compute::GpuRequest::None,
            gpu_options: Default::default(),
            tmp_dir: None,
        };
        crate::indexing::build(&config, &|_, _| {}).unwrap();
        let index = crate::index::Index::open(&config.db, crate::index::Verify::Metadata).unwrap();
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&fasta).unwrap()).read_to_string(&mut text).unwrap();
        let genome: Vec<u8> =
            text.lines().skip(1).take_while(|l| !l.starts_with('>')).flat_map(|l| l.bytes()).collect();
        let params = ClassifyParams::defaults(index.header().sketch.sketch_size);
        let targets = TargetTables::new(&index);
        let mut classifier = Classifier::new(&params, &targets);
        classifier.keep_candidates = true;
        let (mut weak, mut kept) = (0, 0);
        for every in [17, 18, 19, 20, 21, 22, 24, 26] {
            for start in (0..genome.len() - 300).step_by(genome.len() / 400) {
                let mutate = |seq: &[u8], shift: usize| -> Vec<u8> {
                    let flip = |b: u8| match b {
                        b'A' => b'C',
                        b'C' => b'G',
                        b'G' => b'T',
                        _ => b'A',
                    };
                    seq.iter()
                        .enumerate()
                        .map(|(i, &b)| if (i * 7 + shift) % every == 0 { flip(b) } else { b })
                        .collect()
                };
                let (a, b) = (mutate(&genome[start..start + 150], 0), mutate(&genome[start + 150..start + 300], 3));
                let mates: [&[u8]; 2] = [&a, &b];
                let call = classifier.classify(&mates, true);
                let cands = classifier.candidates().to_vec();
                let (taxid, top) =
                    decide_scored(&cands, &call.clades, &params, targets.nodes(), index.taxonomy(), &mut Vec::new());
                if !is_weak(taxid, top, params.hitmin) {
                    continue;
                }
                weak += 1;
                kept += (call.taxid != 0) as usize;
                let runs = [&call.hit_runs[0][..], &call.hit_runs[1][..]];
                assert_eq!(
                    classifier.with_evidence_of_runs(taxid, &mates, runs),
                    call.taxid,
                    "every {every}, at {start}"
                );
            }
        }
        assert!(weak >= 10 && kept > 0 && kept < weak, "{weak} weak calls, {kept} kept");
    }

    /// Targets 0, 1, 2 belong to strain 1000, species 101 and species 100.
    const TARGET_TAXA: [TaxId; 3] = [1000, 101, 100];

    fn params(hitmin: u32, hitdiff: f64, lowest_rank: Option<&str>) -> ClassifyParams {
        ClassifyParams {
            hitmin,
            hitdiff,
            max_candidates: 2,
            insert_size: 0,
            lowest_rank: lowest_rank.map(Into::into),
            confidence: 0.0,
            strain_margin: 0.0,
            protein_hitmin: 0,
        }
    }

    fn candidate(target: u32, hits: u32) -> Candidate {
        Candidate { target, hits, first_window: 0, last_window: 0 }
    }

    /// The decision gives the reference's call and score on random reads' candidates and clade
    /// counts (clades of every rank, taxa outside the tree), whatever the parameters.
    #[test]
    fn the_decision_equals_its_reference() {
        use rand::{Rng, SeedableRng};
        let tree = tree();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let clade_taxa = [1, 10, 100, 101, 1000, 1001, 999];
        let nodes = target_nodes(&TARGET_TAXA, &tree);
        let mut entries = Vec::new();
        for _ in 0..20_000 {
            let mut p = params(rng.random_range(1..5), [0.0, 0.1, 0.3][rng.random_range(0..3)], None);
            p.strain_margin = [0.0, 0.2][rng.random_range(0..2)];
            p.lowest_rank = [None, Some("species".into()), Some("genus".into())][rng.random_range(0..3)].clone();
            let cands: Vec<Candidate> = (0..rng.random_range(0..5))
                .map(|_| candidate(rng.random_range(0..3), rng.random_range(0..12)))
                .collect();
            let clades: Vec<(TaxId, u32)> = (0..rng.random_range(0..4))
                .map(|_| (clade_taxa[rng.random_range(0..clade_taxa.len())], rng.random_range(1..8)))
                .collect();
            assert_eq!(
                decide_scored(&cands, &clades, &p, &nodes, &tree, &mut entries),
                decide_reference(&cands, &clades, &p, &TARGET_TAXA, &tree),
                "{cands:?} {clades:?}"
            );
        }
    }

    #[test]
    fn no_candidate_or_too_few_hits_is_unclassified() {
        let (tree, p) = (tree(), params(3, 0.0, None));
        assert_eq!(decide(&[], &[], &p, &TARGET_TAXA, &tree), 0);
        assert_eq!(decide(&[candidate(0, 2)], &[], &p, &TARGET_TAXA, &tree), 0);
        assert_eq!(decide(&[candidate(0, 3)], &[], &p, &TARGET_TAXA, &tree), 1000);
    }

    #[test]
    fn only_candidates_tied_with_the_best_join_the_lca_by_default() {
        let (tree, p) = (tree(), params(3, 0.0, None));
        assert_eq!(decide(&[candidate(0, 9), candidate(1, 8)], &[], &p, &TARGET_TAXA, &tree), 1000);
        assert_eq!(decide(&[candidate(0, 9), candidate(1, 9)], &[], &p, &TARGET_TAXA, &tree), 10);
        assert_eq!(decide(&[candidate(0, 9), candidate(2, 9)], &[], &p, &TARGET_TAXA, &tree), 100);
    }

    /// `hitdiff` is a share of the best count: with 0.2, a candidate with 8 of the best's 10 hits
    /// joins (exactly at the threshold), one with 7 does not.
    #[test]
    fn hitdiff_admits_candidates_within_its_share_of_the_best() {
        let tree = tree();
        let p = params(3, 0.2, None);
        assert_eq!(decide(&[candidate(0, 10), candidate(1, 8)], &[], &p, &TARGET_TAXA, &tree), 10);
        assert_eq!(decide(&[candidate(0, 10), candidate(1, 7)], &[], &p, &TARGET_TAXA, &tree), 1000);
    }

    #[test]
    fn lowest_rank_lifts_calls_below_it_and_leaves_the_rest() {
        let (tree, p) = (tree(), params(3, 0.0, Some("species")));
        assert_eq!(decide(&[candidate(0, 5)], &[], &p, &TARGET_TAXA, &tree), 100);
        assert_eq!(decide(&[candidate(0, 5), candidate(1, 5)], &[], &p, &TARGET_TAXA, &tree), 10);
    }

    /// A call stands when enough of the read's features fall in its clade; otherwise it moves up
    /// until enough do, or the read is unclassified. Features not found count in the total.
    #[test]
    fn confidence_moves_calls_up_until_their_clade_holds_enough_features() {
        let tree = tree();
        // 10 features: 4 on strain 1000, 2 on species 100, 2 on species 101, 2 not found.
        let runs: &[(TaxId, u32)] = &[(1000, 4), (100, 2), (0, 1), (101, 2), (0, 1)];
        let call = |confidence| with_confidence(1000, [runs, &[]], confidence, &tree);
        assert_eq!(call(0.0), 1000);
        assert_eq!(call(0.4), 1000); // 4 of 10 in the strain's clade
        assert_eq!(call(0.5), 100); // 6 of 10 under species 100
        assert_eq!(call(0.7), 10); // 8 of 10 under the genus
        assert_eq!(call(0.9), 0); // 8 of 10 under the root too: unclassified
        // Both mates count; an unclassified read stays so.
        assert_eq!(with_confidence(1000, [&runs[..2], &runs[2..]], 0.5, &tree), 100);
        assert_eq!(with_confidence(0, [runs, &[]], 0.5, &tree), 0);
    }

    /// Per target, the most locations within `range` consecutive windows; the top list is ordered
    /// by hits, then by target id, and cut at `max`.
    #[test]
    fn top_candidates_take_each_targets_best_range_and_break_ties_by_target() {
        let layout = LocationLayout::uniform(4, 1000, 254, 6);
        let mut locations: Vec<u64> = [
            (3, 10),
            (3, 11),
            (3, 12), // target 3: 3 hits within 3 windows
            (1, 0),
            (1, 50),
            (1, 51),
            (1, 52),
            (1, 200), // target 1: 3 hits in 50..=52
            (0, 5),
            (0, 9), // target 0: 2 hits 4 windows apart, 1 within a range of 3
            (2, 7),
            (2, 7),
            (2, 8), // target 2: 3 hits
        ]
        .iter()
        .map(|&(t, w)| layout.pack(t, w))
        .collect();
        let mut out = Vec::new();
        top_candidates(&mut locations, &layout, 3, 2, &mut out);
        let want = [
            Candidate { target: 1, hits: 3, first_window: 50, last_window: 52 },
            Candidate { target: 2, hits: 3, first_window: 7, last_window: 8 },
        ];
        assert_eq!(out, want);
        top_candidates(&mut locations, &layout, 3, 4, &mut out);
        let ranked: Vec<(u32, u32)> = out.iter().map(|c| (c.target, c.hits)).collect();
        assert_eq!(ranked, [(1, 3), (2, 3), (3, 3), (0, 1)]);
        top_candidates(&mut locations, &layout, 5, 4, &mut out);
        assert_eq!(out[3], Candidate { target: 0, hits: 2, first_window: 5, last_window: 9 });
    }

    /// A strain is called only when the hits separate it from the other candidates of its
    /// species: within the margin, the call is their LCA; a close candidate of another species
    /// changes nothing; calls at species and above are left alone.
    #[test]
    fn strains_are_called_only_when_the_hits_separate_them() {
        let tree = tree();
        // Targets: strain 1000, strain 1001, species 101, species 100.
        let taxa = [1000, 1001, 101, 100];
        let mut p = params(1, 0.0, None);
        p.strain_margin = 0.1;
        let call = |c: &[Candidate]| decide(c, &[], &p, &taxa, &tree);
        assert_eq!(call(&[candidate(0, 10), candidate(1, 9)]), 100, "9 of 10 hits: within the margin");
        assert_eq!(call(&[candidate(0, 10), candidate(1, 8)]), 1000, "8 of 10: separated");
        assert_eq!(call(&[candidate(0, 10), candidate(2, 10)]), 10, "a tie across species: their LCA");
        assert_eq!(call(&[candidate(0, 10), candidate(2, 9), candidate(1, 3)]), 1000, "another species");
        assert_eq!(call(&[candidate(0, 10), candidate(2, 8), candidate(1, 9)]), 100, "the sibling third");
        assert_eq!(call(&[candidate(3, 10), candidate(0, 9)]), 100, "a species call stays");
        p.strain_margin = 0.0;
        assert_eq!(decide(&[candidate(0, 10), candidate(1, 9)], &[], &p, &taxa, &tree), 1000, "margin 0: as before");
    }

    /// Clade features: a clade alone is called when its count reaches `hitmin`; it adds to the
    /// candidates below it; a candidate needs `hitmin` hits of its own to carry the call below the
    /// clades; sibling clades are ranked as candidates are.
    #[test]
    fn clade_features_add_to_their_candidates_and_never_carry_a_call_alone() {
        let tree = tree();
        let taxa = [1000, 1001, 101, 100];
        let mut p = params(3, 0.0, None);
        let call = |c: &[Candidate], clades: &[(TaxId, u32)], p: &ClassifyParams| decide(c, clades, p, &taxa, &tree);
        assert_eq!(call(&[], &[(100, 5)], &p), 100, "a species' core features alone");
        assert_eq!(call(&[], &[(100, 2)], &p), 0, "too few");
        assert_eq!(call(&[], &[(10, 1), (100, 2)], &p), 100, "the genus's count adds to its species");
        assert_eq!(call(&[candidate(0, 4)], &[(100, 10)], &p), 1000, "4 + 10 for the strain");
        assert_eq!(call(&[candidate(2, 2)], &[(10, 6)], &p), 10, "2 hits of its own: the genus");
        assert_eq!(call(&[candidate(2, 3)], &[(10, 6)], &p), 101, "3 of its own: the species");
        assert_eq!(call(&[], &[(100, 5), (101, 4)], &p), 100, "sibling clades: the best");
        assert_eq!(call(&[], &[(100, 5), (101, 5)], &p), 10, "tied sibling clades: their LCA");
        // The strain margin counts the species' clade as a sibling of the strain.
        p.strain_margin = 0.1;
        assert_eq!(call(&[candidate(0, 1)], &[(100, 20)], &p), 100, "1 of its own is not a strain call");
        assert_eq!(call(&[candidate(0, 6), candidate(1, 1)], &[(100, 20)], &p), 1000, "26 against 21 and 20");
        assert_eq!(call(&[candidate(0, 3), candidate(1, 1)], &[(100, 20)], &p), 100, "23 against 21: within 10%");
        assert_eq!(call(&[candidate(0, 3), candidate(1, 3)], &[(100, 20)], &p), 100, "two strains tied");
        p.lowest_rank = Some("species".into());
        assert_eq!(call(&[candidate(0, 4)], &[(100, 10)], &p), 100, "lifted to the lowest rank");
    }
}
