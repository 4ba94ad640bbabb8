//! The command line as clap parses it: the first of two stages (raw flags here, validated
//! configs in `configs`). Doc comments here are the `--help` text and the man pages.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "kmerdb", version, about = "GPU-accelerated metagenomic k-mer index and read classifier")]
pub struct Cli {
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More detail on stderr (repeat for debug output).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Build an index from reference genomes (FASTA, plain or gz/bz2/xz/zst).
    Build(BuildArgs),
    // Boxed: its flags are most of the enum's size otherwise.
    /// Classify reads (FASTA/FASTQ, single, paired or interleaved) against an index.
    Classify(Box<ClassifyArgs>),
    /// Add genomes to an index and remove targets without a rebuild; the result equals a fresh
    /// build of the old inputs plus the added ones minus the removed ones.
    Update(UpdateArgs),
    /// Describe an index: parameters, targets, sizes; optionally verify its checksums.
    Info(InfoArgs),
    /// The index's taxa as a Kraken report of its features (as kraken2-inspect): per taxon the
    /// percent and number of features in its clade and at it, rank, taxid and name.
    Inspect(InspectArgs),
    /// Join the --candidates-out files of a partitioned index's parts into one run's outputs.
    Merge(MergeArgs),
    /// Write the read distribution file Bracken needs (databaseNmers.kmer_distrib), as
    /// bracken-build does, with kmerdb's classifier.
    BrackenPrep(BrackenPrepArgs),
    /// Download NCBI's taxonomy or RefSeq/GenBank genomes, md5 checked and resumable, into the
    /// folders and seqid-to-taxid map that `kmerdb build` takes.
    Download(DownloadArgs),
    /// Print a shell completion script (e.g. `kmerdb completions bash > ~/.local/share/bash-completion/completions/kmerdb`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (kmerdb.1 and one per subcommand) into a folder (`man/` in the
    /// repository holds them; a test checks that they are current).
    #[command(hide = true)]
    Manpages {
        /// Folder to write into (created if missing).
        dir: PathBuf,
    },
}

/// The profile outputs that classify and merge both write.
#[derive(Args)]
pub struct ProfileArgs {
    /// CAMI bioboxes taxonomic profile (percent of reads per taxon at each standard rank).
    #[arg(long, value_name = "FILE")]
    pub cami: Option<PathBuf>,
    /// Krona text input (`ktImportText FILE`): reads per taxon with its lineage.
    #[arg(long, value_name = "FILE")]
    pub krona: Option<PathBuf>,
    /// MPA-style table, as Kraken 2's --use-mpa-style writes it: reads per clade at standard
    /// ranks, as d__|p__|… paths.
    #[arg(long, value_name = "FILE")]
    pub mpa: Option<PathBuf>,
    /// A self-contained HTML page of the run: each sample's classified fraction and its most
    /// abundant taxa by rank.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

#[derive(Args)]
pub struct MergeArgs {
    /// Candidates files, one per part (from `kmerdb classify --candidates-out`).
    #[arg(value_name = "CANDIDATES", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Kraken-format per-read output (`-` for stdout). Default: stdout (as Kraken 2 writes it),
    /// unless another output goes to stdout; give /dev/null for none.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Kraken report (kreport) for MultiQC, Pavian, Bracken, Krona.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Reads per taxon (TSV).
    #[arg(long, value_name = "FILE")]
    pub abundance: Option<PathBuf>,
    /// Sum the abundance profile to this rank (e.g. species).
    #[arg(long, value_name = "RANK")]
    pub abundance_rank: Option<String>,
    #[command(flatten)]
    pub profiles: ProfileArgs,
    /// The sample's name in the CAMI profile [default: the first file's name].
    #[arg(long)]
    pub sample: Option<String>,
    /// Taxon names instead of bare taxids in the per-read output.
    #[arg(long)]
    pub use_names: bool,
    /// List every taxon of the index in the report, also those without reads (Kraken 2's
    /// --report-zero-counts).
    #[arg(long)]
    pub report_zero_counts: bool,
    /// As classify's --confidence, on the merged hit lists (give the parts' runs none).
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub confidence: f64,
}

#[derive(Args)]
pub struct ClassifyArgs {
    /// Single-end read files (FASTA or FASTQ, plain or compressed), or - for stdin; all one sample.
    #[arg(value_name = "READS")]
    pub reads: Vec<PathBuf>,
    /// Index to classify against.
    #[arg(short, long, env = "KMERDB_DB", default_value = "kmerdb.db")]
    pub db: PathBuf,
    /// First mates of paired reads (repeatable, matched in order with -2).
    #[arg(short = '1', value_name = "R1")]
    pub r1: Vec<PathBuf>,
    /// Second mates of paired reads.
    #[arg(short = '2', value_name = "R2")]
    pub r2: Vec<PathBuf>,
    /// READS hold mate pairs one after the other.
    #[arg(long)]
    pub interleaved: bool,
    /// READS are two files, R1 then R2, of one paired sample (Kraken 2's --paired; the same as
    /// -1 R1 -2 R2).
    #[arg(long)]
    pub paired: bool,
    /// Accepted for Kraken 2's habits and ignored: the index is always memory-mapped.
    #[arg(long, hide = true)]
    pub memory_mapping: bool,
    /// Accepted for Kraken 2's habits and ignored: compression is detected from the content.
    #[arg(long, hide = true)]
    pub gzip_compressed: bool,
    /// Kraken 2's --use-mpa-style: --report writes the MPA-style table (as --mpa) instead of the
    /// kreport.
    #[arg(long)]
    pub use_mpa_style: bool,
    /// Several samples with one index load: a TSV of `name<TAB>R1[<TAB>R2]` (paths relative to the
    /// sheet). Output names must then contain `{sample}`.
    #[arg(long, value_name = "FILE")]
    pub samples: Option<PathBuf>,
    /// Kraken-format per-read output (`-` for stdout). Default: stdout (as Kraken 2 writes it),
    /// unless another output goes to stdout; give /dev/null for none.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Kraken report (kreport) for MultiQC, Pavian, Bracken, Krona.
    #[arg(short, long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Reads and fraction per taxon (TSV).
    #[arg(long, value_name = "FILE")]
    pub abundance: Option<PathBuf>,
    /// Sum --abundance at this rank (e.g. species, genus).
    #[arg(long, value_name = "RANK")]
    pub abundance_rank: Option<String>,
    /// Classified reads, in their input format; `#` in the name stands for the mate number.
    #[arg(long, value_name = "FILE")]
    pub classified_out: Option<PathBuf>,
    /// Unclassified reads, like --classified-out.
    #[arg(long, value_name = "FILE")]
    pub unclassified_out: Option<PathBuf>,
    /// Each read's candidates against this index, in the binary form `kmerdb merge` joins across
    /// the partitions of a partitioned index.
    #[arg(long, value_name = "FILE")]
    pub candidates_out: Option<PathBuf>,
    #[command(flatten)]
    pub profiles: ProfileArgs,
    /// Print taxon names beside taxids in the per-read output.
    #[arg(long)]
    pub use_names: bool,
    /// List every taxon of the index in the report, also those without reads (Kraken 2's
    /// --report-zero-counts).
    #[arg(long)]
    pub report_zero_counts: bool,
    /// Hits the best candidate needs [default: sketch size / 5, at least 1].
    #[arg(long, value_name = "N")]
    pub hitmin: Option<u32>,
    /// Candidates with at least (1 - hitdiff) x the best candidate's hits join the LCA
    /// (0: only ties with the best).
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub hitdiff: f64,
    /// The share of a read's features that must fall in the called taxon's clade, else the call
    /// moves up the tree until enough do (Kraken 2's --confidence, on kmerdb's features).
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub confidence: f64,
    /// A call below species needs its best target's hits to exceed every other target of the
    /// species' by this share, else it is their LCA (0: strains are called as any taxon).
    #[arg(long, default_value_t = kmerdb::classify::candidates::DEFAULT_STRAIN_MARGIN, value_name = "F")]
    pub strain_margin: f64,
    /// With an index built with --protein: reads left unclassified or above genus by their DNA
    /// go to the genus of the targets sharing the most amino-acid k-mers with them, when at least
    /// N are shared (0: no protein stage).
    #[arg(long, default_value_t = kmerdb::classify::candidates::DEFAULT_PROTEIN_HITMIN, value_name = "N")]
    pub protein_hitmin: u32,
    /// Candidates (targets) kept per read.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_candidates: usize,
    /// Largest insert size of read pairs (widens the window range scanned per target).
    #[arg(long, default_value_t = 600, value_name = "BASES")]
    pub insert_size: usize,
    /// Report no taxon below this rank (e.g. species): lower calls are lifted to it.
    #[arg(long, value_name = "RANK")]
    pub lowest_rank: Option<String>,
    /// Skip checking the large index sections against their checksums when loading
    /// (the check reads the whole index once).
    #[arg(long)]
    pub no_verify: bool,
    /// Samples of --samples classified at once (testing; default: a quarter of the threads on
    /// GPUs, one on the CPU).
    #[arg(long, hide = true, value_name = "N")]
    pub samples_at_once: Option<usize>,
    #[command(flatten)]
    pub compute: ComputeArgs,
}

#[derive(Args)]
pub struct BuildArgs {
    /// FASTA files, directories (searched recursively for .fa .fasta .fna .ffn .fas, optionally
    /// compressed), or - for stdin.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Index file to write.
    #[arg(short, long, env = "KMERDB_DB", default_value = "kmerdb.db")]
    pub db: PathBuf,
    #[command(flatten)]
    pub taxa: TaxaArgs,
    #[command(flatten)]
    pub sketch: SketchArgs,
    /// A feature seen in more locations is kept as its targets' lowest common ancestor (a clade
    /// feature) instead of its list of locations. 64, not MetaCache's 254: on a species in 300
    /// strains, lists of up to 254 strains made classify 2x slower and the index 18% larger, with
    /// the same calls, and on the mock the species F1 is 0.9980 at 64 against 0.9979
    /// (bench/results/HISTORY.md, "Strain-dense collections").
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub max_locations_per_feature: u32,
    /// Also index the references' amino-acid k-mers (six-frame translations of their open
    /// reading frames), so that classify can place reads of divergent relatives (another
    /// serotype, a species of an indexed genus) at genus level (bench/results/HISTORY.md: its cost and gain).
    #[arg(long)]
    pub protein: bool,
    /// With --protein: index one amino-acid k-mer in N (by hash; reads use the same ones).
    #[arg(long, value_name = "N", default_value_t = kmerdb::protein::ProteinParams::DEFAULT.sample, requires = "protein")]
    pub protein_sample: u32,
    /// Index only part I of N of the genome files (sorted by path, cut into N contiguous runs),
    /// for partitioned indexes joined per read by `kmerdb merge`.
    #[arg(long, value_name = "I/N")]
    pub partition: Option<kmerdb::indexing::partition::Partition>,
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// Folder for a GPU build's spill files, when the pairs of a large input fit neither the GPUs'
    /// nor the host's memory [default: the index's folder].
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// At most this many values per GPU in one pass (testing; default: from GPU memory).
    #[arg(long, hide = true)]
    pub gpu_pass_values: Option<u64>,
    /// Bytes of pairs each GPU keeps while reading (testing; default: from GPU memory).
    #[arg(long, hide = true)]
    pub gpu_device_pairs: Option<u64>,
    /// Bytes of pairs host memory keeps before spill files (testing; default: from host memory).
    #[arg(long, hide = true)]
    pub gpu_host_pairs: Option<u64>,
    /// Threads probing the GPU table together: 1, 2, 4, 8, 16 or 32 (default 4).
    #[arg(long, hide = true)]
    pub gpu_group: Option<kmerdb::compute::ProbeGroup>,
}

#[derive(Args)]
pub struct UpdateArgs {
    /// Index to update.
    #[arg(short, long, env = "KMERDB_DB", default_value = "kmerdb.db")]
    pub db: PathBuf,
    /// Where the updated index goes [default: replaces the index updated, once it is written].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// FASTA files or directories to add, as `build` takes them (repeatable). Only these are
    /// read: the old genomes are not needed.
    #[arg(long, value_name = "INPUT", num_args = 1..)]
    pub add: Vec<PathBuf>,
    /// Remove the targets named in FILE (one sequence id per line; # starts a comment).
    #[arg(long, value_name = "FILE")]
    pub remove_targets: Option<PathBuf>,
    /// Remove the targets of the taxa in FILE, descendants included (one taxid per line; #
    /// starts a comment).
    #[arg(long, value_name = "FILE")]
    pub remove_taxa: Option<PathBuf>,
    /// Names in --remove-targets FILE that this index does not hold are skipped instead of being
    /// an error (for the parts of a partitioned index, each of which holds only some targets);
    /// so are taxa in --remove-taxa FILE that the index's taxonomy lacks.
    #[arg(long)]
    pub skip_absent: bool,
    #[command(flatten)]
    pub taxa: TaxaArgs,
    /// Worker threads, and the GPU that condenses the shards (the first of those given; with
    /// `all`, GPU 0 if there is one, else the CPU).
    #[command(flatten)]
    pub compute: ComputeArgs,
}

/// Where the genomes' taxa come from, for `build` and for the genomes `update` adds.
#[derive(Args)]
pub struct TaxaArgs {
    /// NCBI taxonomy directory (nodes.dmp, names.dmp, optional merged.dmp; plain or .gz). Without
    /// it, every sequence is its own taxon under one root. `update` needs one to add to an index
    /// built with one; it may be a newer dump (the old targets' taxids follow its merged.dmp).
    #[arg(long, value_name = "DIR")]
    pub taxonomy: Option<PathBuf>,
    /// GTDB taxonomy files instead of --taxonomy (a release's bac120_taxonomy.tsv and
    /// ar53_taxonomy.tsv, plain or .gz; repeatable): GTDB's names and ranks, with the taxids that
    /// `kmerdb download gtdb-taxonomy` makes from the names, so the seqid2taxid.map of
    /// `download genomes --gtdb` fits it.
    #[arg(long, value_name = "FILE", conflicts_with = "taxonomy")]
    pub taxonomy_gtdb: Vec<PathBuf>,
    /// Sequence id to taxid map: `seqid<TAB>taxid` or NCBI *.accession2taxid (plain or .gz).
    /// Repeatable. Header tags (kraken:taxid|N) take precedence.
    #[arg(long = "seqid2taxid", value_name = "FILE")]
    pub seqid_maps: Vec<PathBuf>,
    /// Make sequences without a taxid an error (default: leave them out with a warning).
    #[arg(long)]
    pub strict: bool,
}

#[derive(Args)]
pub struct SketchArgs {
    /// k-mer length (1 to 32).
    #[arg(short, default_value_t = 16)]
    pub k: u32,
    /// Window length in bases.
    #[arg(short, long, default_value_t = 127)]
    pub window: u32,
    /// Distance between window starts [default: window - k + 1].
    #[arg(long)]
    pub stride: Option<u32>,
    /// Features kept per window.
    #[arg(short, long, default_value_t = 16)]
    pub sketch_size: u32,
}

#[derive(Args)]
pub struct ComputeArgs {
    /// Worker threads [default: all cores].
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// GPUs to use: `all` (every visible GPU, else the CPU), `none`, or a list such as `0,1`.
    #[arg(long, default_value = "all", value_name = "all|none|LIST")]
    pub gpus: kmerdb::compute::GpuRequest,
}

#[derive(Args)]
pub struct BrackenPrepArgs {
    /// The genomes the index was built from (FASTA files or directories, as build takes them).
    #[arg(value_name = "GENOMES", required = true)]
    pub genomes: Vec<PathBuf>,
    /// Index.
    #[arg(short, long, env = "KMERDB_DB", default_value = "kmerdb.db")]
    pub db: PathBuf,
    /// Read length of the samples Bracken will re-estimate (Bracken's -r).
    #[arg(short = 'r', long, value_name = "N")]
    pub read_length: usize,
    /// Classify a stretch every N bases of each reference (1: every position, as bracken-build;
    /// larger is faster and coarser).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub step: usize,
    /// Output file [default: databaseNmers.kmer_distrib beside the index, where `bracken -d
    /// FOLDER -r N` looks for it].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Worker threads [default: all cores].
    #[arg(short, long)]
    pub threads: Option<usize>,
}

#[derive(Args)]
pub struct InspectArgs {
    /// Index file.
    #[arg(env = "KMERDB_DB", default_value = "kmerdb.db")]
    pub db: PathBuf,
    /// Only the taxonomy tree, every taxon with zero counts (as kraken2-inspect --skip-counts):
    /// quick, without reading the features.
    #[arg(long)]
    pub skip_counts: bool,
    /// Print JSON (an array of taxa with their counts) instead of the report.
    #[arg(long, conflicts_with = "skip_counts")]
    pub json: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    /// Index file.
    #[arg(env = "KMERDB_DB", default_value = "kmerdb.db")]
    pub db: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Check every section against its checksum (reads the whole file).
    #[arg(long)]
    pub verify: bool,
}

#[derive(Args)]
pub struct DownloadArgs {
    #[command(subcommand)]
    pub what: DownloadWhat,
}

#[derive(Subcommand)]
pub enum DownloadWhat {
    /// NCBI's taxonomy dump (pub/taxonomy/taxdump.tar.gz, checked against its .md5): writes
    /// nodes.dmp, names.dmp, merged.dmp and delnodes.dmp into --out, for `build --taxonomy`.
    Taxonomy(DownloadTaxonomyArgs),
    /// Assemblies chosen from NCBI's assembly_summary.txt by group, level, taxa and a cap per
    /// species: each genomic FASTA checked against its folder's md5checksums.txt, several at a
    /// time, retried on failure; a rerun fetches only what is missing or damaged. Writes
    /// --out/genomes/, --out/seqid2taxid.map and --out/assemblies.tsv; then
    /// `kmerdb build OUT/genomes --taxonomy TAXDIR --seqid2taxid OUT/seqid2taxid.map`.
    Genomes(DownloadGenomesArgs),
    /// GTDB's taxonomy (ar53_taxonomy.tsv.gz, bac120_taxonomy.tsv.gz of a release) as an
    /// NCBI-format dump in --out (nodes.dmp, names.dmp: ranks domain to species, GTDB's names,
    /// taxids made from the names) with accession2taxid.tsv (each genome's species); give the
    /// folder to `download genomes --gtdb` and `build --taxonomy`.
    GtdbTaxonomy(DownloadTaxonomyArgs),
}

/// Where to download from and how hard to try.
#[derive(Args)]
pub struct DownloadCommon {
    /// Folder to write into (created if missing).
    #[arg(short, long)]
    pub out: PathBuf,
    /// Server with NCBI's layout, or GTDB's release for gtdb-taxonomy (a mirror, or a local copy
    /// served over HTTP) [default: https://ftp.ncbi.nlm.nih.gov; for gtdb-taxonomy
    /// https://data.gtdb.ecogenomic.org/releases/latest].
    #[arg(long)]
    pub mirror: Option<String>,
    /// Tries per file before giving up on it (a dropped connection, a server error, a damaged
    /// file are tried again; a missing file is not).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts: u32,
    /// Seconds to wait before the first retry; each next wait doubles.
    #[arg(long, default_value_t = 2.0)]
    pub retry_wait: f64,
}

#[derive(Args)]
pub struct DownloadTaxonomyArgs {
    #[command(flatten)]
    pub common: DownloadCommon,
}

#[derive(Args)]
pub struct DownloadGenomesArgs {
    #[command(flatten)]
    pub common: DownloadCommon,
    /// NCBI's genome collection.
    #[arg(long, value_enum, default_value_t = GenomeSource::Refseq)]
    pub source: GenomeSource,
    /// Organism groups, comma-separated (NCBI's folder names: archaea, bacteria, fungi,
    /// invertebrate, plant, protozoa, vertebrate_mammalian, vertebrate_other, viral).
    #[arg(long, value_delimiter = ',', required = true)]
    pub group: Vec<String>,
    /// Least complete assembly level taken (complete: "Complete Genome" only).
    #[arg(long, value_enum, default_value_t = kmerdb::download::ncbi::Level::Complete)]
    pub level: kmerdb::download::ncbi::Level,
    /// Only assemblies in these clades (taxids, comma-separated); needs --taxonomy.
    #[arg(long, value_delimiter = ',', requires = "taxonomy")]
    pub taxa: Vec<u32>,
    /// NCBI taxonomy folder (nodes.dmp), for --taxa.
    #[arg(long)]
    pub taxonomy: Option<PathBuf>,
    /// At most this many assemblies a species (reference genomes first, then representative
    /// ones, then the more complete, then by accession).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub per_species: Option<u64>,
    /// A GTDB taxonomy folder (`download gtdb-taxonomy`): only genomes GTDB holds, each mapped
    /// to its GTDB species (--taxa and --per-species then count GTDB's taxa; give the same
    /// folder to --taxonomy and to `build --taxonomy`).
    #[arg(long)]
    pub gtdb: Option<PathBuf>,
    /// Files downloaded at a time.
    #[arg(short, long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum GenomeSource {
    Refseq,
    Genbank,
}
