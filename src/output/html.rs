//! `--html FILE`: one self-contained page per run, for a person to read at a glance: the run's
//! settings, a table of every sample's reads and classified fraction, one table comparing the
//! samples' most abundant species side by side, and per sample its most abundant taxa at a few
//! ranks (domain down to species) as bar charts, each with the unclassified reads as a bar of its
//! own. Inline SVG and CSS only: no script, no network, so it opens anywhere and can be mailed
//! around.

use crate::output::kreport::clade_counts;
use crate::taxonomy::{TaxId, TaxonTree};
use std::collections::HashMap;
use std::io::{self, Write};

/// Levels shown, top down: (heading, the ranks that make it). NCBI called the top rank
/// "superkingdom" until 2025 and "domain" since; either is the domain level.
const LEVELS: [(&str, &[&str]); 4] = [
    ("domain", &["domain", "superkingdom"]),
    ("phylum", &["phylum"]),
    ("genus", &["genus"]),
    ("species", &["species"]),
];
/// Taxa drawn per chart and per sample in the comparison (the rest summed as "other").
const TOP: usize = 10;

/// What the page shows of one sample.
#[derive(Debug, Clone)]
pub struct SampleView {
    pub name: String,
    pub reads: u64,
    pub classified: u64,
    /// Per level: (level, every taxon of it with reads in its clade, most first).
    pub ranks: Vec<(String, Vec<(String, u64)>)>,
}

/// The run's settings, shown at the top of the page.
#[derive(Debug, Clone, Default)]
pub struct RunSettings {
    /// The index classified against (or the candidates files merged).
    pub index: String,
    /// How the index was made: its kmerdb version and command line.
    pub index_made: String,
    /// This run's command line.
    pub command: String,
}

impl RunSettings {
    /// The settings of this process's run against the index at `path`.
    pub(crate) fn of_run(path: &std::path::Path, index: &crate::index::Index) -> Self {
        let p = &index.header().provenance;
        Self {
            index: path.display().to_string(),
            index_made: format!("kmerdb {}: {}", p.kmerdb_version, p.command_line.join(" ")),
            command: this_command(),
        }
    }

    /// The settings of this process's merge of the candidates files `inputs`.
    pub(crate) fn of_merge(inputs: &[std::path::PathBuf]) -> Self {
        let names: Vec<String> = inputs.iter().map(|i| i.display().to_string()).collect();
        Self {
            index: format!("candidates of {} parts: {}", names.len(), names.join(", ")),
            index_made: String::new(),
            command: this_command(),
        }
    }
}

/// This process's command line, as the run's settings show it.
fn this_command() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

impl SampleView {
    /// The view of a sample's direct counts.
    pub fn new(name: &str, tree: &TaxonTree, direct: &HashMap<TaxId, u64>, unclassified: u64) -> io::Result<Self> {
        let clades = clade_counts(tree, direct)?;
        let classified: u64 = direct.values().sum();
        let mut ranks = Vec::new();
        for (level, names) in LEVELS {
            let mut taxa: Vec<(String, u64)> = clades
                .iter()
                .filter(|&(&t, _)| tree.get(t).is_some_and(|x| names.contains(&x.rank.as_str())))
                .map(|(&t, &n)| (tree.get(t).map_or_else(String::new, |x| x.name.clone()), n))
                .collect();
            if taxa.is_empty() {
                continue;
            }
            taxa.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            ranks.push((level.to_string(), taxa));
        }
        Ok(Self { name: name.into(), reads: classified + unclassified, classified, ranks })
    }

    fn unclassified(&self) -> u64 {
        self.reads - self.classified
    }

    /// The level's taxa as drawn: the top [`TOP`], then "other" if any.
    fn top(taxa: &[(String, u64)]) -> Vec<(String, u64)> {
        let mut shown: Vec<(String, u64)> = taxa.iter().take(TOP).cloned().collect();
        let other: u64 = taxa.iter().skip(TOP).map(|t| t.1).sum();
        if other > 0 {
            shown.push(("other".into(), other));
        }
        shown
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

/// Writes the page for `samples`.
pub fn write_html<W: Write + ?Sized>(
    w: &mut W,
    title: &str,
    settings: &RunSettings,
    samples: &[SampleView],
) -> io::Result<()> {
    writeln!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>\n\
         body{{font-family:sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse;margin:1em 0}}\n\
         td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}} td:first-child,th:first-child{{text-align:left}}\n\
         #settings td{{text-align:left;font-family:monospace}} h2{{margin-top:2em}} .rank{{margin:1em 0}} svg text{{font-size:12px}}\n\
         </style></head><body>",
        escape(title)
    )?;
    writeln!(w, "<h1>{}</h1>", escape(title))?;
    write_settings(w, settings)?;
    writeln!(
        w,
        "<table id=\"samples\"><tr><th>Sample</th><th>Reads</th><th>Classified</th><th>Classified %</th></tr>"
    )?;
    for s in samples {
        writeln!(
            w,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}%</td></tr>",
            escape(&s.name),
            s.reads,
            s.classified,
            percent(s.classified, s.reads)
        )?;
    }
    writeln!(w, "</table>")?;
    write_comparison(w, samples)?;
    for s in samples {
        write_sample(w, s)?;
    }
    writeln!(w, "<footer><p>kmerdb {}</p></footer></body></html>", env!("CARGO_PKG_VERSION"))
}

fn write_settings<W: Write + ?Sized>(w: &mut W, settings: &RunSettings) -> io::Result<()> {
    writeln!(w, "<table id=\"settings\">")?;
    let rows = [
        ("Index", &settings.index),
        ("Index made by", &settings.index_made),
        ("Command", &settings.command),
        ("kmerdb", &env!("CARGO_PKG_VERSION").to_string()),
    ];
    for (key, value) in rows.into_iter().filter(|(_, v)| !v.is_empty()) {
        writeln!(w, "<tr><th>{key}</th><td>{}</td></tr>", escape(value))?;
    }
    writeln!(w, "</table>")
}

/// One table, a column per sample: the lowest level's taxa that are among the top [`TOP`] of any
/// sample (most abundant in any sample first), then each sample's other taxa and its
/// unclassified reads, as percentages of the sample's reads with the read counts.
fn write_comparison<W: Write + ?Sized>(w: &mut W, samples: &[SampleView]) -> io::Result<()> {
    let Some(level) = samples.iter().flat_map(|s| s.ranks.last().map(|r| r.0.clone())).last() else { return Ok(()) };
    // Each sample's taxa at the level, most first (as `SampleView::new` sorts them).
    let lists: Vec<&[(String, u64)]> =
        samples.iter().map(|s| s.ranks.iter().find(|r| r.0 == level).map_or(&[][..], |r| &r.1[..])).collect();
    let counts: Vec<HashMap<&str, u64>> =
        lists.iter().map(|l| l.iter().map(|(name, n)| (name.as_str(), *n)).collect()).collect();
    let mut rows: Vec<(&str, f64)> = Vec::new();
    for (s, list) in samples.iter().zip(&lists) {
        for (name, n) in list.iter().take(TOP) {
            let share = percent(*n, s.reads);
            match rows.iter_mut().find(|r| r.0 == name) {
                Some(r) => r.1 = r.1.max(share),
                None => rows.push((name, share)),
            }
        }
    }
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    writeln!(w, "<h2>By {level}, all samples (% of each sample's reads, and reads)</h2>")?;
    write!(w, "<table id=\"comparison\"><tr><th>{level}</th>")?;
    for s in samples {
        write!(w, "<th>{}</th>", escape(&s.name))?;
    }
    writeln!(w, "</tr>")?;
    // One row: its label, then per sample the reads `reads_of` gives and their share.
    let mut row = |label: &str, reads_of: &dyn Fn(&SampleView, &HashMap<&str, u64>) -> u64| -> io::Result<()> {
        write!(w, "<tr><td>{}</td>", escape(label))?;
        for (s, c) in samples.iter().zip(&counts) {
            let n = reads_of(s, c);
            write!(w, "<td>{:.2}% ({n})</td>", percent(n, s.reads))?;
        }
        writeln!(w, "</tr>")
    };
    for (name, _) in &rows {
        row(name, &|_, c| c.get(name).copied().unwrap_or(0))?;
    }
    let at_level = |c: &HashMap<&str, u64>| c.values().sum::<u64>();
    let shown = |c: &HashMap<&str, u64>| rows.iter().map(|r| c.get(r.0).copied().unwrap_or(0)).sum::<u64>();
    row(&format!("other {level}"), &|_, c| at_level(c) - shown(c))?;
    // Reads classified above the level: with these rows each column sums to the sample's reads.
    // (Unless the taxonomy nests a level in itself, a species under a species: then its reads are
    // counted in both clades, and none are left above.)
    row(&format!("classified above {level}"), &|s, c| s.classified.saturating_sub(at_level(c)))?;
    row("unclassified", &|s, _| s.unclassified())?;
    writeln!(w, "</table>")
}

/// A sample's section: a bar chart per level, its unclassified reads last in grey.
fn write_sample<W: Write + ?Sized>(w: &mut W, s: &SampleView) -> io::Result<()> {
    writeln!(w, "<section class=\"sample\"><h2>{}</h2>", escape(&s.name))?;
    writeln!(w, "<p>{} reads, {} classified ({:.2}%)</p>", s.reads, s.classified, percent(s.classified, s.reads))?;
    for (rank, taxa) in &s.ranks {
        let mut bars: Vec<(String, u64, &str)> =
            SampleView::top(taxa).into_iter().map(|(name, n)| (name, n, "#4a7fb5")).collect();
        bars.push(("unclassified".into(), s.unclassified(), "#aaaaaa"));
        let height = 22 * bars.len() + 4;
        writeln!(w, "<div class=\"rank\"><h3>By {rank} (% of all reads, and reads)</h3>")?;
        writeln!(
            w,
            "<svg width=\"760\" height=\"{height}\" role=\"img\" aria-label=\"{} by {rank}\">",
            escape(&s.name)
        )?;
        for (i, (name, reads, colour)) in bars.iter().enumerate() {
            let share = percent(*reads, s.reads);
            let y = 22 * i + 2;
            let width = (share * 4.0).max(1.0);
            writeln!(
                w,
                "<text x=\"0\" y=\"{}\">{}</text><rect x=\"240\" y=\"{y}\" width=\"{width:.1}\" height=\"18\" fill=\"{colour}\"/>\
                 <text x=\"{:.1}\" y=\"{}\">{share:.2}% ({reads})</text>",
                y + 14,
                escape(name),
                246.0 + width,
                y + 14
            )?;
        }
        writeln!(w, "</svg></div>")?;
    }
    writeln!(w, "</section>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::Taxon;

    #[test]
    fn page_holds_samples_and_escaped_names() {
        let t = |taxid, parent, rank: &str, name: &str| Taxon { taxid, parent, rank: rank.into(), name: name.into() };
        let tree = TaxonTree::new(vec![
            t(1, 1, "no rank", "root"),
            t(10, 1, "genus", "Gen<us>"),
            t(11, 10, "species", "Gen sp. A&B"),
        ])
        .unwrap();
        let view = SampleView::new("s<1>", &tree, &HashMap::from([(11, 3), (10, 1)]), 4).unwrap();
        assert_eq!((view.reads, view.classified), (8, 4));
        let settings =
            RunSettings { index: "a<b>.db".into(), index_made: String::new(), command: "kmerdb classify".into() };
        let mut out = Vec::new();
        write_html(&mut out, "run", &settings, &[view]).unwrap();
        let html = String::from_utf8(out).unwrap();
        assert!(html.contains("<td>s&lt;1&gt;</td><td>8</td><td>4</td><td>50.00%</td>"), "{html}");
        assert!(html.contains(">Gen&lt;us&gt;</text>") && html.contains(">Gen sp. A&amp;B</text>"), "{html}");
        assert!(html.contains(">37.50% (3)</text>") && !html.contains("<script"), "{html}");
        // The unclassified bar, and the settings (an empty one left out).
        assert!(html.contains(">unclassified</text>") && html.contains(">50.00% (4)</text>"), "{html}");
        assert!(html.contains("<tr><th>Index</th><td>a&lt;b&gt;.db</td></tr>") && !html.contains("Index made by"));
    }

    /// Fuzzing (merge_candidates_fixed): a taxonomy with a species under a species counts the
    /// inner one's reads in both clades, more than the sample's classified reads, and "classified
    /// above species" was their difference: an overflow.
    #[test]
    fn regression_a_level_nested_in_itself_does_not_overflow() {
        let t = |taxid, parent, rank: &str, name: &str| Taxon { taxid, parent, rank: rank.into(), name: name.into() };
        let tree = TaxonTree::new(vec![
            t(1, 1, "no rank", "root"),
            t(10, 1, "species", "Outer"),
            t(11, 10, "species", "Inner"),
        ])
        .unwrap();
        let a = SampleView::new("a", &tree, &HashMap::from([(11, 4)]), 1).unwrap();
        let mut out = Vec::new();
        write_html(&mut out, "run", &RunSettings::default(), &[a]).unwrap();
        let html = String::from_utf8(out).unwrap();
        assert!(html.contains("<tr><td>classified above species</td><td>0.00% (0)</td></tr>"), "{html}");
    }

    /// The comparison table: a row per taxon in any sample's top, a column per sample, then other
    /// and unclassified; the domain level from a "superkingdom" or a "domain" rank.
    #[test]
    fn samples_are_compared_side_by_side() {
        let t = |taxid, parent, rank: &str, name: &str| Taxon { taxid, parent, rank: rank.into(), name: name.into() };
        let tree = TaxonTree::new(vec![
            t(1, 1, "no rank", "root"),
            t(2, 1, "superkingdom", "Bacteria"),
            t(3, 1, "domain", "Archaea"),
            t(10, 2, "species", "Sp one"),
            t(11, 2, "species", "Sp two"),
            t(12, 3, "species", "Sp three"),
        ])
        .unwrap();
        let a = SampleView::new("a", &tree, &HashMap::from([(10, 6), (12, 2)]), 2).unwrap();
        let b = SampleView::new("b", &tree, &HashMap::from([(11, 5)]), 5).unwrap();
        assert_eq!(a.ranks[0].0, "domain");
        assert_eq!(a.ranks[0].1, [("Bacteria".to_string(), 6), ("Archaea".to_string(), 2)]);
        let mut out = Vec::new();
        write_html(&mut out, "run", &RunSettings::default(), &[a, b]).unwrap();
        let html = String::from_utf8(out).unwrap();
        let table = &html[html.find("<table id=\"comparison\">").unwrap()..];
        let table = &table[..table.find("</table>").unwrap()];
        assert!(table.contains("<tr><th>species</th><th>a</th><th>b</th></tr>"), "{table}");
        assert!(table.contains("<tr><td>Sp one</td><td>60.00% (6)</td><td>0.00% (0)</td></tr>"), "{table}");
        assert!(table.contains("<tr><td>Sp two</td><td>0.00% (0)</td><td>50.00% (5)</td></tr>"), "{table}");
        assert!(table.contains("<tr><td>unclassified</td><td>20.00% (2)</td><td>50.00% (5)</td></tr>"), "{table}");
        assert!(table.contains("<tr><td>classified above species</td><td>0.00% (0)</td><td>0.00% (0)</td></tr>"));
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("<tr><td>")).collect();
        assert!(rows[0].contains("Sp one") && rows[1].contains("Sp two") && rows[2].contains("Sp three"), "{table}");
    }
}
