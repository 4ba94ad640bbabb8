//! `kmerdb download`: the command around `kmerdb::download`, with its progress bar and summary.

use crate::args::{DownloadCommon, DownloadGenomesArgs, DownloadWhat, GenomeSource};
use anyhow::{Context, Result, bail};
use kmerdb::download::fetch::Fetcher;
use kmerdb::download::gtdb;
use kmerdb::download::ncbi::{self, Outcome, Selection};
use kmerdb::resources::human_bytes;
use rayon::prelude::*;

pub fn run(what: DownloadWhat, quiet: bool) -> Result<()> {
    match what {
        DownloadWhat::Taxonomy(args) => {
            let (fetcher, out) = start(&args.common)?;
            let (fetched, written) = ncbi::fetch_taxonomy(&fetcher, mirror(&args.common, ncbi::NCBI), out)?;
            log::info!(
                "taxonomy in {} ({}): {}",
                out.display(),
                written.join(", "),
                if fetched { "downloaded" } else { "taxdump.tar.gz was current" }
            );
            Ok(())
        }
        DownloadWhat::Genomes(args) => genomes(&args, quiet),
        DownloadWhat::GtdbTaxonomy(args) => {
            let (fetcher, out) = start(&args.common)?;
            let base = mirror(&args.common, gtdb::GTDB);
            kmerdb::temp_files::remove_stale_in(out);
            let mut taxonomy = gtdb::GtdbTaxonomy::default();
            for file in gtdb::FILES {
                let url = format!("{base}/{file}");
                let dest = out.join(file);
                fetcher.file(&url, &dest, None)?;
                taxonomy.add(&kmerdb::download::fetch::read_text(&dest)?, &url)?;
            }
            taxonomy.write(out)?;
            log::info!(
                "GTDB taxonomy in {}: {} taxa, {} genomes (nodes.dmp, names.dmp, accession2taxid.tsv)",
                out.display(),
                taxonomy.counts().0,
                taxonomy.counts().1
            );
            Ok(())
        }
    }
}

/// `--mirror`, or `default`, without a trailing slash.
fn mirror<'a>(common: &'a DownloadCommon, default: &'a str) -> &'a str {
    common.mirror.as_deref().unwrap_or(default).trim_end_matches('/')
}

/// The client, and the output folder, created.
fn start(common: &DownloadCommon) -> Result<(Fetcher, &std::path::Path)> {
    // Negative, not a number, or past what a duration holds (1e30).
    let wait = std::time::Duration::try_from_secs_f64(common.retry_wait)
        .map_err(|_| anyhow::anyhow!("--retry-wait must be a number of seconds, not {}", common.retry_wait))?;
    if common.out.exists() && !common.out.is_dir() {
        bail!("--out {}: not a folder", common.out.display());
    }
    std::fs::create_dir_all(&common.out).with_context(|| format!("creating {}", common.out.display()))?;
    Ok((Fetcher::new(common.attempts, wait), &common.out))
}

fn genomes(args: &DownloadGenomesArgs, quiet: bool) -> Result<()> {
    let (fetcher, out) = start(&args.common)?;
    let mirror = mirror(&args.common, ncbi::NCBI);
    let source = match args.source {
        GenomeSource::Refseq => "refseq",
        GenomeSource::Genbank => "genbank",
    };
    let mut all = Vec::new();
    let mut groups = args.group.clone();
    groups.sort();
    groups.dedup();
    for group in &groups {
        let url = format!("{mirror}/genomes/{source}/{group}/assembly_summary.txt");
        all.extend(ncbi::parse_summary(&fetcher.text(&url)?, &url)?);
    }
    if let Some(dir) = &args.gtdb {
        let genomes = gtdb::read_genomes(dir)?;
        let before = all.len();
        all = ncbi::with_gtdb(all, &genomes);
        log::info!("{} of {before} assemblies are GTDB's ({} genomes in {})", all.len(), genomes.len(), dir.display());
    }
    let taxonomy = match &args.taxonomy {
        Some(dir) if !args.taxa.is_empty() => Some(
            kmerdb::taxonomy::NcbiTaxonomy::load_dir_without_names(dir)
                .with_context(|| format!("reading the taxonomy in {}", dir.display()))?,
        ),
        _ => None,
    };
    if let Some(t) = &taxonomy
        && let Some(unknown) = args.taxa.iter().find(|&&x| t.resolve(x).is_none())
    {
        bail!("--taxa: taxid {unknown} is not in the taxonomy in {}", args.taxonomy.as_ref().unwrap().display());
    }
    let selection = Selection {
        level: args.level,
        clades: taxonomy.as_ref().map(|t| (args.taxa.as_slice(), t)),
        per_species: args.per_species.map(|n| n as usize),
    };
    let chosen = ncbi::select(&all, &selection);
    if chosen.is_empty() {
        bail!("no assembly of {} ({} in the summaries) matches the choice", args.group.join(", "), all.len());
    }
    log::info!("{} assemblies chosen of {} current in {source} {}", chosen.len(), all.len(), args.group.join(", "));
    let dir = out.join("genomes");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    kmerdb::temp_files::remove_stale_in(&dir);

    let bar = progress(chosen.len() as u64, quiet);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(args.jobs as usize).build()?;
    let outcomes: Vec<Outcome> = pool.install(|| {
        chosen
            .par_iter()
            .map(|a| {
                let outcome = ncbi::fetch_assembly(&fetcher, mirror, a, &dir);
                if let Some(bar) = &bar {
                    bar.inc(1);
                }
                outcome
            })
            .collect()
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }

    let (mut fetched, mut bytes, mut present) = (0, 0, 0);
    let mut failed = Vec::new();
    let mut done = Vec::new();
    for (a, outcome) in chosen.iter().zip(outcomes) {
        match outcome {
            Outcome::Fetched(n) => (fetched, bytes) = (fetched + 1, bytes + n),
            Outcome::Present => present += 1,
            Outcome::Failed(e) => {
                log::error!("{} ({}): {}", a.accession, a.organism, kmerdb::errors::chain(&e));
                failed.push(a.accession.clone());
                continue;
            }
        }
        done.push(a);
    }
    let sequences = ncbi::write_maps(out, &done)?;
    let removed = ncbi::remove_unchosen(out, &chosen)?;
    log::info!(
        "{fetched} downloaded ({}), {present} already there, {} failed, {removed} no longer chosen removed; \
         {sequences} sequences of {} assemblies in {}",
        human_bytes(bytes),
        failed.len(),
        done.len(),
        out.join("seqid2taxid.map").display()
    );
    if !failed.is_empty() {
        bail!(
            "{} of {} assemblies could not be downloaded ({}{}); run the same command again to fetch what is missing",
            failed.len(),
            chosen.len(),
            failed.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            if failed.len() > 3 { ", ..." } else { "" }
        );
    }
    Ok(())
}

/// A bar over the assemblies, on a terminal and without `--quiet`.
fn progress(total: u64, quiet: bool) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {wide_bar} {pos}/{len} assemblies {eta}")
            .expect("the template is valid"),
    );
    Some(bar)
}

/// With `--taxonomy-gtdb`: GTDB's taxonomy files made into an NCBI-format dump in a temporary
/// folder, which `taxa.taxonomy` then names; the folder lives as long as the returned guard.
pub fn gtdb_taxonomy_dir(taxa: &mut crate::args::TaxaArgs) -> Result<Option<tempfile::TempDir>> {
    if taxa.taxonomy_gtdb.is_empty() {
        return Ok(None);
    }
    let mut taxonomy = gtdb::GtdbTaxonomy::default();
    for path in &taxa.taxonomy_gtdb {
        let text = kmerdb::download::fetch::read_text(path).context("--taxonomy-gtdb")?;
        taxonomy.add(&text, &path.display().to_string())?;
    }
    let dir = tempfile::Builder::new().prefix("kmerdb-gtdb-").tempdir().context("a folder for GTDB's taxonomy")?;
    taxonomy.write(dir.path())?;
    let (taxon_count, genome_count) = taxonomy.counts();
    log::info!("GTDB taxonomy: {taxon_count} taxa, {genome_count} genomes");
    taxa.taxonomy = Some(dir.path().to_path_buf());
    Ok(Some(dir))
}
