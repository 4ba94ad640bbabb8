//! `kmerdb update`: an index with genomes added and targets removed, equal in every section to a
//! fresh build of the old inputs plus the added ones minus the removed ones, with the same
//! settings (only the provenance differs: it records the update).
//!
//! Only the added genomes are read. The old index holds everything a build keeps after
//! sketching: every location of every feature (the kept features' in its shards, the
//! clade features' in its clade lists section) and every target's name, taxid and size. So:
//! 1. the added genomes are sketched as a build sketches them;
//! 2. the old targets that stay and the added ones are numbered together in name order
//!    (`targets::number`), as a build of them all would number them;
//! 3. per shard, the old locations (renumbered, removed targets left out), the clade
//!    features' locations and the added pairs are condensed as a build condenses
//!    (`condense::condense_all`): a feature a removal brings under the cap gets its list back,
//!    one an addition takes over it becomes a clade feature, and a clade moves with its targets
//!    (the LCA of those that stay). With a GPU (`--gpus`), the GPU build's condense does
//!    this stage in passes (`update_on_gpu.rs`), with the same bytes;
//! 4. the shards are written in order, beside the output, which is renamed into place at the end
//!    (the output may be the old index: a failure leaves it as it was).

use crate::index::clade_lists::{CladeLists, target_window};
use crate::index::condensed::{Clades, Condensed, ShardStats};
use crate::index::format::{Counts, Header, Provenance, TaxonomySource};
use crate::index::{GlobalWindows, Index, IndexFile, IndexWriter, LocationLayout, TargetInfo, Verify, bcht};
use crate::indexing::condense::{self, WindowMap};
use crate::indexing::error::BuildError;
use crate::indexing::sketching::{self, RawTarget};
use crate::indexing::targets::{self, SYNTHETIC_TAXID_BASE, Unnumbered};
use crate::input::Source;
use crate::sketch::Feature;
use crate::taxonomy::{NcbiTaxonomy, SeqIdMap, TaxId, Taxon};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "update_devices.rs"]
mod devices;
#[cfg(feature = "gpu")]
#[path = "update_on_gpu.rs"]
mod on_gpu;

/// What to update, validated.
#[derive(Debug, Clone)]
pub struct UpdateConfig {
    /// The index to update.
    pub old: PathBuf,
    /// Where the updated index goes (may be `old`).
    pub db: PathBuf,
    /// Genome files to add.
    pub add: Vec<Source>,
    /// Names of targets to remove.
    pub remove_targets: Vec<String>,
    /// Taxa whose targets (the taxon's and its descendants') to remove.
    pub remove_taxa: Vec<TaxId>,
    /// Skip the targets and taxa to remove that the index does not hold instead of failing (a
    /// partitioned index's parts each hold only some of them).
    pub skip_absent: bool,
    /// The NCBI taxonomy for the added genomes' taxa (needed to add to an index built with one).
    pub taxonomy: Option<PathBuf>,
    pub seqid_maps: Vec<PathBuf>,
    pub threads: usize,
    /// The GPU to condense on (the first of those asked for), else the CPU.
    pub gpus: crate::compute::GpuRequest,
    /// At most this many locations in one GPU pass (testing; default: from GPU memory).
    pub gpu_pass_values: Option<u64>,
    pub strict: bool,
    /// Stored as the new index's provenance.
    pub command_line: Vec<String>,
}

impl UpdateConfig {
    /// The settings' ranges, as `BuildConfig::validate`: at least one thread, and a GPU pass of
    /// at least one location (zero read as "no GPU memory" and ended in an error about the GPU's).
    /// `update` calls it first.
    pub fn validate(&self) -> Result<(), BuildError> {
        if self.threads == 0 {
            return Err(BuildError::Setting("--threads must be at least 1".into()));
        }
        if self.gpu_pass_values == Some(0) {
            return Err(BuildError::Setting("gpu_pass_values (a GPU pass's locations) must be at least 1".into()));
        }
        Ok(())
    }
}

/// What an update did.
#[derive(Debug, Clone)]
pub struct UpdateSummary {
    pub db: PathBuf,
    pub counts: Counts,
    pub added: usize,
    pub removed: usize,
    pub without_taxid: Vec<String>,
    pub index_bytes: u64,
    pub elapsed: Duration,
    /// Where stage 3 ran: "CPU (N threads)" or the GPU's name.
    pub backend: String,
}

/// The entries of a removal list: one per line, blank lines and `#` comments skipped, each
/// trimmed.
fn read_list(path: &std::path::Path) -> Result<Vec<(usize, String)>, BuildError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| crate::input::InputError::Io { path: path.to_path_buf(), source })?;
    let entries = text.lines().enumerate().map(|(i, line)| (i + 1, line.split('#').next().unwrap_or("").trim()));
    Ok(entries.filter(|(_, e)| !e.is_empty()).map(|(n, e)| (n, e.to_string())).collect())
}

/// `--remove-targets FILE`: sequence ids, one per line.
pub fn read_target_list(path: &std::path::Path) -> Result<Vec<String>, BuildError> {
    let entries = read_list(path)?;
    if let Some((line, id)) = entries.iter().find(|(_, e)| e.contains(char::is_whitespace)) {
        let reason = format!("'{id}' is not a sequence id (one id per line, without spaces)");
        return Err(BuildError::List { path: path.to_path_buf(), line: *line, reason });
    }
    Ok(entries.into_iter().map(|(_, id)| id).collect())
}

/// `--remove-taxa FILE`: taxids, one per line.
pub fn read_taxid_list(path: &std::path::Path) -> Result<Vec<TaxId>, BuildError> {
    read_list(path)?
        .into_iter()
        .map(|(line, e)| {
            e.parse().map_err(|_| BuildError::List {
                path: path.to_path_buf(),
                line,
                reason: format!("'{e}' is not a taxid"),
            })
        })
        .collect()
}

/// Runs an update (see the module's description).
pub fn update(config: &UpdateConfig) -> Result<UpdateSummary, BuildError> {
    config.validate()?;
    let start = Instant::now();
    // Over its own index: locked before it is read, so that a second update of it waits for this
    // one and then reads its result, and a file rewritten meanwhile is not replaced.
    let in_place = crate::replacing::same_file(&config.old, &config.db);
    let held = if in_place {
        let taken = crate::replacing::Lock::take(&config.db)
            .map_err(|source| crate::index::format::IndexError::Io { path: config.db.clone(), source })?;
        if let crate::replacing::Taken::Unlockable(why) = &taken {
            log::warn!(
                "cannot lock {}: {why}; another update of it at the same time would not wait for this one",
                config.db.display()
            );
        }
        taken.lock()
    } else {
        None
    };
    // In place, the index is read through the path that was locked: when -d and -o are two hard
    // links, a waiting update finds the newer file at -o only.
    let old = Index::open(if in_place { &config.db } else { &config.old }, Verify::All)?;
    let clade_lists = old.clade_lists()?;
    let removed = removed_targets(config, &old)?;
    check_taxonomy_use(config, old.header())?;
    crate::indexing::check_output(&config.db)?;
    let out = IndexFile::create(&config.db)?.holding(held);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.threads)
        .build()
        .map_err(|e| BuildError::Threads { threads: config.threads, reason: e.to_string() })?;
    pool.install(|| {
        let header = old.header();
        let progress = sketching::Progress::default();
        let sketching::Sketched { bins, targets: raw } =
            sketching::sketch_sources(&config.add, &header.sketch, header.shard_bits, &progress)?;
        let taxonomy = config.taxonomy.as_deref().map(NcbiTaxonomy::load_dir_without_names).transpose()?;
        let taxonomy_checksum = taxonomy.as_ref().map(NcbiTaxonomy::checksum);
        let seqid_map = SeqIdMap::load(&config.seqid_maps)?;
        let new = Renumbered::new(config, &old, &removed, &raw, taxonomy.as_ref(), &seqid_map)?;
        targets::warn_featureless(&raw, &new.final_id, &config.add, header.sketch.k);
        let taxa = new.taxa(&old, taxonomy)?;
        let clades = Clades::new(&new.targets, &taxa)?;
        let layout = new.layout(header.max_locations_per_feature, &clades);
        let numbering = GlobalWindows::new(new.targets.iter().map(|t| t.windows), &layout);
        let shards = Shards {
            old: &old,
            clade_lists: by_shard(&clade_lists, header.shard_bits),
            new: &new,
            raw: &raw,
            clades: &clades,
            layout,
            numbering,
        };
        let mut template = header.clone();
        template.layout = layout;
        // The part stays the part it was (it still merges with the others); the taxonomy's
        // checksum is the one given, as a fresh build with it would record.
        if let Some(t) = &taxonomy_checksum {
            template.collection.taxonomy_checksum = *t;
        }
        template.counts = Counts { targets: new.targets.len() as u64, ..Counts::default() };
        template.provenance = Provenance {
            kmerdb_version: env!("CARGO_PKG_VERSION").into(),
            created_unix: crate::indexing::creation_time(),
            command_line: config.command_line.clone(),
        };
        let writer = IndexWriter::new(out, &template)?;
        let (mut writer, stats, backend) = shards.lay_out_on(config, bins, writer, &pool)?;
        targets::check_not_empty(&stats, header.sketch.k, header.max_locations_per_feature)?;
        if let Some(table) = old.protein() {
            let added = crate::indexing::protein_table::update(&table, &new.old_to_new, &config.add, &new.targets)?;
            writer.set_protein(added);
        }
        let counts = crate::indexing::counts_of(&new.targets, &taxa, &stats, writer.buckets_written());
        let header = Header { counts: counts.clone(), ..template };
        let index_bytes = writer.finish(header, &new.targets, &taxa)?;
        Ok(UpdateSummary {
            db: config.db.clone(),
            counts,
            added: new.added,
            removed: removed.iter().filter(|&&r| r).count(),
            without_taxid: new.without_taxid,
            index_bytes,
            elapsed: start.elapsed(),
            backend,
        })
    })
}

/// Which of the old index's targets the update removes; a target or taxon to remove that the
/// index does not hold is an error, or with `skip_absent` skipped and counted in an info line.
fn removed_targets(config: &UpdateConfig, old: &Index) -> Result<Vec<bool>, BuildError> {
    let not_in = |what: String| BuildError::NotInIndex { index: config.old.clone(), what };
    let targets = old.targets();
    let mut removed = vec![false; targets.len()];
    let mut absent_targets = 0;
    for name in &config.remove_targets {
        match TargetInfo::find(targets, name) {
            Some(at) => removed[at] = true,
            None if config.skip_absent => absent_targets += 1,
            None => return Err(not_in(format!("target '{name}'"))),
        }
    }
    let tree = old.taxonomy();
    let (taxa, absent_taxa): (Vec<TaxId>, Vec<TaxId>) =
        config.remove_taxa.iter().copied().partition(|&t| tree.contains(t));
    if let Some(taxid) = absent_taxa.first().filter(|_| !config.skip_absent) {
        return Err(not_in(format!("taxon {taxid}")));
    }
    let skipped = |absent: usize, of: usize, what: &str, place: &str| {
        if absent > 0 {
            let verb = if absent == 1 { "is" } else { "are" };
            let index = config.old.display();
            log::info!("{absent} of {of} {what} to remove {verb} not in {place}{index}: skipped (--skip-absent)");
        }
    };
    skipped(absent_targets, config.remove_targets.len(), "targets", "");
    skipped(absent_taxa.len(), config.remove_taxa.len(), "taxa", "the taxonomy of ");
    for (t, gone) in targets.iter().zip(&mut removed) {
        if !*gone && !taxa.is_empty() {
            *gone = tree.lineage(t.taxid).iter().any(|a| taxa.contains(a));
        }
    }
    Ok(removed)
}

/// An index built with an NCBI taxonomy takes added genomes only with one (their taxa must be
/// placed in it); an index built without takes none.
fn check_taxonomy_use(config: &UpdateConfig, header: &Header) -> Result<(), BuildError> {
    let reason = match (header.taxonomy, config.taxonomy.is_some()) {
        (TaxonomySource::Ncbi, false) if !config.add.is_empty() => {
            "the index was built with an NCBI taxonomy: give it (--taxonomy) to add genomes"
        }
        (TaxonomySource::PerSequence, true) => {
            "the index was built without a taxonomy (every sequence its own taxon): --taxonomy cannot be given"
        }
        _ => return Ok(()),
    };
    Err(BuildError::CannotUpdate { index: config.old.clone(), reason: reason.into() })
}

/// The targets after the update, numbered, and where each old and added one went.
struct Renumbered {
    targets: Vec<TargetInfo>,
    /// New id of each old target (`None`: removed).
    old_to_new: Vec<Option<u32>>,
    /// Final id of each added sequence (`None`: left out, no taxid), by provisional id.
    final_id: Vec<Option<u32>>,
    added: usize,
    without_taxid: Vec<String>,
}

/// Where a target to number comes from.
#[derive(Clone, Copy)]
enum Origin {
    Old(usize),
    Added(usize),
}

impl Renumbered {
    fn new(
        config: &UpdateConfig,
        old: &Index,
        removed: &[bool],
        raw: &[RawTarget],
        taxonomy: Option<&NcbiTaxonomy>,
        seqid_map: &SeqIdMap,
    ) -> Result<Self, BuildError> {
        let order = targets::name_order(raw, &config.add)?;
        let taxids = targets::given_taxids(raw, &order, &config.add, taxonomy, seqid_map)?;
        let without_taxid = targets::left_out(raw, &order, &taxids, taxonomy.is_some(), config.strict)?;
        let ncbi = old.header().taxonomy == TaxonomySource::Ncbi;
        let mut named: Vec<(Unnumbered<'_>, Origin)> = Vec::with_capacity(old.targets().len() + raw.len());
        for (i, t) in old.targets().iter().enumerate().filter(|(i, _)| !removed[*i]) {
            let taxid = old_taxid(config, t, ncbi, taxonomy)?;
            named.push((Unnumbered { name: &t.name, taxid, length: t.length, windows: t.windows }, Origin::Old(i)));
        }
        for (&i, &taxid) in order.iter().zip(&taxids) {
            let t = &raw[i];
            named.push((Unnumbered { name: &t.name, taxid, length: t.length, windows: t.windows }, Origin::Added(i)));
        }
        named.sort_by(|a, b| a.0.name.cmp(b.0.name));
        if let Some(pair) = named.windows(2).find(|p| p[0].0.name == p[1].0.name) {
            let Some(Origin::Added(i)) = [pair[0].1, pair[1].1].into_iter().find(|o| matches!(o, Origin::Added(_)))
            else {
                unreachable!("the old targets' names are distinct, and so are the added ones'");
            };
            return Err(BuildError::AlreadyInIndex {
                id: raw[i].name.clone(),
                file: config.add[raw[i].source].to_string(),
                record: raw[i].record,
                index: config.old.clone(),
            });
        }
        let origins: Vec<Origin> = named.iter().map(|n| n.1).collect();
        let (targets, ids) = targets::number(named.into_iter().map(|n| n.0), taxonomy.is_some() || ncbi)?;
        if targets.is_empty() {
            return Err(BuildError::NothingToIndex { reason: "the update removes every target and adds none".into() });
        }
        if let Some(t) = targets.iter().find(|t| t.windows > u32::MAX as u64) {
            return Err(BuildError::SequenceTooLong { id: t.name.clone(), windows: t.windows });
        }
        let (mut old_to_new, mut final_id) = (vec![None; old.targets().len()], vec![None; raw.len()]);
        for (origin, id) in origins.into_iter().zip(ids) {
            match origin {
                Origin::Old(i) => old_to_new[i] = id,
                Origin::Added(i) => final_id[i] = id,
            }
        }
        let added = final_id.iter().flatten().count();
        Ok(Self { targets, old_to_new, final_id, added, without_taxid })
    }

    /// The layout a build of these targets would choose, with `clades` for their taxa.
    fn layout(&self, cap: u32, clades: &Clades) -> LocationLayout {
        let max_windows = self.targets.iter().map(|t| t.windows).max().unwrap_or(1);
        let windows = self.targets.iter().map(|t| t.windows).sum();
        LocationLayout::for_counts(self.targets.len() as u64, max_windows, windows, cap, clades.nodes())
    }

    /// The new index's taxa, as a build of its targets would prune them: from the taxonomy given
    /// (with names), else from the old index's own taxa.
    fn taxa(&self, old: &Index, taxonomy: Option<NcbiTaxonomy>) -> Result<Vec<Taxon>, BuildError> {
        if old.header().taxonomy == TaxonomySource::PerSequence {
            return Ok(targets::taxa_of(&self.targets, None));
        }
        match taxonomy {
            Some(tax) => {
                let taxa = targets::taxa_of(&self.targets, Some(&tax));
                Ok(crate::indexing::name_taxa(Some(tax), &taxa)?)
            }
            None => {
                let tree = old.taxonomy();
                let mut keep = std::collections::HashSet::new();
                keep.insert(1);
                for t in &self.targets {
                    keep.extend(tree.lineage(t.taxid));
                }
                Ok(tree.taxa().iter().filter(|t| keep.contains(&t.taxid)).cloned().collect())
            }
        }
    }
}

/// An old target's taxid as a build would give it now: re-resolved through the taxonomy given
/// (merged taxids), or as stored; `None` for the taxa that numbering makes (each sequence its own
/// taxon, which depends on its new id).
fn old_taxid(
    config: &UpdateConfig,
    t: &TargetInfo,
    ncbi: bool,
    taxonomy: Option<&NcbiTaxonomy>,
) -> Result<Option<TaxId>, BuildError> {
    if !ncbi {
        return Ok((t.taxid < SYNTHETIC_TAXID_BASE).then_some(t.taxid));
    }
    match taxonomy {
        None => Ok(Some(t.taxid)),
        Some(tax) => tax.resolve(t.taxid).map(Some).ok_or_else(|| BuildError::CannotUpdate {
            index: config.old.clone(),
            reason: format!(
                "its target '{}' has taxid {}, which the taxonomy given does not hold (nor its merged.dmp)",
                t.name, t.taxid
            ),
        }),
    }
}

/// The clade features of each shard with their lists, in stored order (shard order, then feature).
fn by_shard(clade_lists: &CladeLists, shard_bits: u32) -> Vec<Vec<(Feature, &[u64])>> {
    let mut shards = vec![Vec::new(); 1 << shard_bits];
    for (feature, list) in clade_lists.iter() {
        shards[crate::index::format::shard_of(feature, shard_bits)].push((feature, list));
    }
    shards
}

/// Stage 3 of an update: each shard's locations gathered and condensed.
struct Shards<'a> {
    old: &'a Index,
    clade_lists: Vec<Vec<(Feature, &'a [u64])>>,
    new: &'a Renumbered,
    /// The added sequences as read (their provisional ids and first windows).
    raw: &'a [RawTarget],
    /// The updated index's tree, for the clade features' LCAs, and its layout.
    clades: &'a Clades,
    layout: LocationLayout,
    /// The updated index's global window numbers, which its stored lists hold.
    numbering: GlobalWindows,
}

impl Shards<'_> {
    /// Stage 3 on the first GPU `config.gpus` asks for, else on the CPU. Returns the writer, the
    /// shards' counts and where they were laid out.
    fn lay_out_on(
        &self,
        config: &UpdateConfig,
        bins: Vec<sketching::Bin>,
        writer: IndexWriter,
        pool: &rayon::ThreadPool,
    ) -> Result<(IndexWriter, ShardStats, String), BuildError> {
        if let Some(gpu) = devices::first(config)? {
            return devices::lay_out(self, config, bins, writer, &gpu);
        }
        let (writer, stats) = self.lay_out(bins, writer, pool)?;
        Ok((writer, stats, format!("CPU ({} threads)", pool.current_num_threads())))
    }

    /// Every shard condensed on the pool, a window at a time, and written in order by a thread
    /// of its own (as the CPU build does). Returns the writer and the shards' counts.
    fn lay_out(
        &self,
        bins: Vec<sketching::Bin>,
        mut writer: IndexWriter,
        pool: &rayon::ThreadPool,
    ) -> Result<(IndexWriter, ShardStats), BuildError> {
        let windows = WindowMap::new(self.raw, &self.new.final_id);
        let path = self.old.path().to_path_buf();
        let condense = |(shard, bin): (usize, sketching::Bin)| {
            let located = self.locations(shard, bin, &windows);
            let cap = self.old.header().max_locations_per_feature;
            condense::condense_all(
                located,
                (&self.layout, &self.numbering),
                bcht::KeyHash::new(self.old.header().shard_bits),
                cap,
                self.clades,
            )
            .map_err(|source| BuildError::from(crate::index::IndexError::ShardOverflow { path: path.clone(), source }))
        };
        let items: Vec<(usize, sketching::Bin)> = bins.into_iter().enumerate().collect();
        let mut condensed = crate::pipeline::in_order_windows(pool, items, condense);
        let mut stats = ShardStats::default();
        let mut write = |shard: Condensed| {
            writer.add_shard(&shard.data, None)?;
            writer.add_clade_lists(shard.clade_lists);
            stats += shard.stats;
            Ok(())
        };
        let width = pool.current_num_threads();
        let times = crate::pipeline::run_here(("condensing", &mut condensed), width, ("writing", &mut write))?;
        log::debug!("shards: {}", crate::pipeline::describe(&times));
        Ok((writer, stats))
    }

    /// Shard `shard`'s (feature, packed new location) pairs: the old index's, kept and dropped,
    /// of the targets that stay, and the added genomes' from `bin`.
    fn locations(&self, shard: usize, bin: sketching::Bin, windows: &WindowMap) -> Vec<(Feature, u64)> {
        let (old, new) = (self.old, self.new);
        let (old_layout, layout) = (old.layout(), &self.layout);
        let renumber = |target: u32, window: u32| new.old_to_new[target as usize].map(|t| layout.pack(t, window));
        let mut located = Vec::new();
        for slot in old.shard_keys(shard).slots() {
            for l in old.list(shard, slot.list).iter() {
                let (t, w) = old_layout.unpack(l);
                located.extend(renumber(t, w).map(|l| (slot.key, l)));
            }
        }
        for &(feature, list) in &self.clade_lists[shard] {
            let renumbered = list.iter().filter_map(|&l| {
                let (t, w) = target_window(l);
                renumber(t, w)
            });
            located.extend(renumbered.map(|l| (feature, l)));
        }
        for chunk in bin {
            located.extend(chunk.iter().filter_map(|p| windows.locate(p.window, layout).map(|l| (p.feature, l))));
        }
        located
    }
}
