//! What the command prints about a run: the build's progress bar and summary, each sample's line
//! and the device it ran on, the merge's line. All through `log`: `--quiet` keeps only errors.

use kmerdb::classify::{ClassifySummary, SampleSummary};
use kmerdb::indexing::{BuildConfig, BuildSummary};
use kmerdb::resources::{human_bytes, peak_rss_bytes};

/// A bar over the input files' on-disk bytes (known up front even when compressed), with the bases
/// read as its message.
pub fn progress_bar(config: &BuildConfig) -> Option<indicatif::ProgressBar> {
    if !config.progress {
        return None;
    }
    let total: u64 = config
        .sources
        .iter()
        .filter_map(|s| match s {
            kmerdb::input::Source::File(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            kmerdb::input::Source::Stdin => None,
        })
        .sum();
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    // The bar takes what the terminal's width leaves (the rest is about 50 columns), so the line
    // fits an 80-column terminal.
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {elapsed_precise} {wide_bar} {bytes}/{total_bytes} {eta} {msg}",
        )
        .expect("the template is valid"),
    );
    Some(bar)
}

/// A line with the reads classified so far and their rate, on a terminal, for runs that last:
/// it appears after two seconds, so a short run prints nothing more. Dropping it clears the line.
pub struct ClassifyProgress {
    /// Reads (pairs) classified so far, counted by the classifier.
    pub reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub bar: indicatif::ProgressBar,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl ClassifyProgress {
    /// `None` when stderr is not a terminal.
    pub fn start() -> Option<Self> {
        use std::io::IsTerminal;
        use std::sync::atomic::Ordering::Relaxed;
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let reads = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {human_pos} reads classified {msg}")
                .expect("the template is valid"),
        );
        let ticker = {
            let (bar, reads, done) = (bar.clone(), reads.clone(), done.clone());
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                let mut shown = false;
                while !done.load(Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    if !shown && start.elapsed() > std::time::Duration::from_secs(2) {
                        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                        shown = true;
                    }
                    let n = reads.load(Relaxed);
                    bar.set_position(n);
                    bar.set_message(format!("({}/s)", human_count((n as f64 / start.elapsed().as_secs_f64()) as u64)));
                }
            })
        };
        Some(Self { reads, bar, done, ticker: Some(ticker) })
    }
}

impl Drop for ClassifyProgress {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }
}

pub fn update(s: &kmerdb::indexing::update::UpdateSummary) {
    warn_without_taxid(&s.without_taxid, "added sequences have no taxid and were left out");
    log::info!(
        "updated into {} on the {}: {} targets added, {} removed; now {}, {}, {:.2} s",
        s.db.display(),
        s.backend,
        s.added,
        s.removed,
        describe_counts(&s.counts),
        human_bytes(s.index_bytes),
        s.elapsed.as_secs_f64(),
    );
}

pub fn build(s: &BuildSummary) {
    warn_without_taxid(&s.without_taxid, "sequences have no taxid and were left out of the index");
    if let Some(t) = s.taxonomy_load {
        log::debug!("taxonomy loaded in {:.2} s", t.as_secs_f64());
    }
    let phases: Vec<String> = s.phases.iter().map(|(n, d)| format!("{n} {:.2} s", d.as_secs_f64())).collect();
    log::debug!("phases: {}", phases.join(", "));
    log::info!(
        "built {} on the {}: {}, {} ({:.3} bytes per base), {:.2} s, peak memory {}",
        s.db.display(),
        s.backend,
        describe_counts(&s.counts),
        human_bytes(s.index_bytes),
        s.index_bytes as f64 / s.counts.bases.max(1) as f64,
        s.elapsed.as_secs_f64(),
        peak_rss_bytes().map(human_bytes).unwrap_or_else(|| "unknown".into()),
    );
}

/// What an index holds, as the build and the update summaries say it.
fn describe_counts(c: &kmerdb::index::format::Counts) -> String {
    format!(
        "{} targets, {} bases, {} features, {} locations, {} clade features over the location cap ({} locations)",
        c.targets, c.bases, c.features, c.locations, c.clade_features, c.clade_locations
    )
}

/// The warning for sequences left out for want of a taxid: how many (`what` says of what), and a
/// few of their names.
fn warn_without_taxid(names: &[String], what: &str) {
    if !names.is_empty() {
        log::warn!(
            "{} {what}: {} (give --seqid2taxid, or --strict to make this an error)",
            names.len(),
            kmerdb::indexing::targets::examples(names)
        );
    }
}

pub fn human_count(n: u64) -> String {
    match n {
        0..1_000_000 => n.to_string(),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} G", n as f64 / 1e9),
    }
}

/// A sample's line, as it finishes.
pub fn sample(s: &SampleSummary) {
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    log::info!(
        "{}: {} reads, {} classified ({:.2}%), {:.0} reads/s",
        s.name,
        s.reads,
        s.classified,
        100.0 * s.classified as f64 / s.reads.max(1) as f64,
        s.reads as f64 / secs
    );
}

/// Where the run classified and how long the index took to load; with `-v`, the GPU's stages.
pub fn classify(summary: &ClassifySummary) {
    match &summary.device {
        Some((device, copy)) => log::info!(
            "classified on {device}; index loaded in {:.2} s ({:.2} s of it copying to the GPU)",
            summary.index_load.as_secs_f64(),
            copy.as_secs_f64()
        ),
        None => log::info!("classified on the CPU; index loaded in {:.2} s", summary.index_load.as_secs_f64()),
    }
    #[cfg(feature = "gpu")]
    if let Some(t) = &summary.gpu_times {
        log::debug!(
            "GPU stages (summed over GPUs and batches): {} batches of {} reads; packing and upload {:.2} s, kernels {:.2} s, download {:.2} s",
            t.batches,
            t.reads,
            t.upload.as_secs_f64(),
            t.kernels.as_secs_f64(),
            t.download.as_secs_f64()
        );
        // What follows is the process's exit: freeing GPU and pinned memory.
        log::debug!("classify finished");
    }
}

/// The merge's line.
pub fn merge(parts: usize, s: &kmerdb::merge::MergeSummary) {
    log::info!(
        "merged {parts} parts: {} reads, {} classified ({:.2}%)",
        s.reads,
        s.classified,
        100.0 * s.classified as f64 / s.reads.max(1) as f64
    );
}

pub fn bracken_prep(config: &kmerdb::bracken::BrackenConfig, s: &kmerdb::bracken::BrackenSummary) {
    log::info!(
        "{}: {} stretches of {} bases from {} sequences of {} genome taxa, {:.2}% put on their own taxon",
        config.output.display(),
        s.stretches,
        config.read_length,
        s.sequences,
        s.genome_taxa,
        100.0 * s.own_taxon as f64 / s.stretches.max(1) as f64
    );
}
