//! `--html FILE`: one self-contained page per run, for a person to read at a glance: each sample's
//! reads and classified fraction, and its most abundant taxa at a few ranks as bar charts. Inline
//! SVG and CSS only: no script, no network, so it opens anywhere and can be mailed around.

use crate::output::kreport::clade_counts;
use crate::taxonomy::{TaxId, TaxonTree};
use std::collections::HashMap;
use std::io::{self, Write};

/// Ranks shown, top down, and how many taxa each shows (the rest summed as "other").
const RANKS: [&str; 3] = ["phylum", "genus", "species"];
const TOP: usize = 10;

/// What the page shows of one sample.
#[derive(Debug, Clone)]
pub struct SampleView {
    pub name: String,
    pub reads: u64,
    pub classified: u64,
    /// Per rank: (taxon name, reads in its clade), most first, then "other" if any.
    pub ranks: Vec<(String, Vec<(String, u64)>)>,
}

impl SampleView {
    /// The view of a sample's direct counts.
    pub fn new(name: &str, tree: &TaxonTree, direct: &HashMap<TaxId, u64>, unclassified: u64) -> io::Result<Self> {
        let clades = clade_counts(tree, direct)?;
        let classified: u64 = direct.values().sum();
        let mut ranks = Vec::new();
        for rank in RANKS {
            let mut taxa: Vec<(String, u64)> = clades
                .iter()
                .filter(|&(&t, _)| tree.get(t).is_some_and(|x| x.rank == rank))
                .map(|(&t, &n)| (tree.get(t).map_or_else(String::new, |x| x.name.clone()), n))
                .collect();
            if taxa.is_empty() {
                continue;
            }
            taxa.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let other: u64 = taxa.iter().skip(TOP).map(|t| t.1).sum();
            taxa.truncate(TOP);
            if other > 0 {
                taxa.push(("other".into(), other));
            }
            ranks.push((rank.to_string(), taxa));
        }
        Ok(Self { name: name.into(), reads: classified + unclassified, classified, ranks })
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

/// Writes the page for `samples`.
pub fn write_html<W: Write + ?Sized>(w: &mut W, title: &str, samples: &[SampleView]) -> io::Result<()> {
    writeln!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>\n\
         body{{font-family:sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse}}\n\
         td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}} td:first-child,th:first-child{{text-align:left}}\n\
         h2{{margin-top:2em}} .rank{{margin:1em 0}} svg text{{font-size:12px}}\n</style></head><body>",
        escape(title)
    )?;
    writeln!(w, "<h1>{}</h1>", escape(title))?;
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
    for s in samples {
        writeln!(w, "<section class=\"sample\"><h2>{}</h2>", escape(&s.name))?;
        writeln!(w, "<p>{} reads, {} classified ({:.2}%)</p>", s.reads, s.classified, percent(s.classified, s.reads))?;
        for (rank, taxa) in &s.ranks {
            let height = 22 * taxa.len() + 4;
            writeln!(w, "<div class=\"rank\"><h3>By {rank} (% of all reads)</h3>")?;
            writeln!(
                w,
                "<svg width=\"760\" height=\"{height}\" role=\"img\" aria-label=\"{} by {rank}\">",
                escape(&s.name)
            )?;
            for (i, (name, reads)) in taxa.iter().enumerate() {
                let share = percent(*reads, s.reads);
                let y = 22 * i + 2;
                let width = (share * 4.0).max(1.0);
                writeln!(
                    w,
                    "<text x=\"0\" y=\"{}\">{}</text><rect x=\"240\" y=\"{y}\" width=\"{width:.1}\" height=\"18\" fill=\"#4a7fb5\"/>\
                     <text x=\"{:.1}\" y=\"{}\">{share:.2}%</text>",
                    y + 14,
                    escape(name),
                    246.0 + width,
                    y + 14
                )?;
            }
            writeln!(w, "</svg></div>")?;
        }
        writeln!(w, "</section>")?;
    }
    writeln!(w, "<footer><p>kmerdb {}</p></footer></body></html>", env!("CARGO_PKG_VERSION"))
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
        let mut out = Vec::new();
        write_html(&mut out, "run", &[view]).unwrap();
        let html = String::from_utf8(out).unwrap();
        assert!(html.contains("<td>s&lt;1&gt;</td><td>8</td><td>4</td><td>50.00%</td>"), "{html}");
        assert!(html.contains(">Gen&lt;us&gt;</text>") && html.contains(">Gen sp. A&amp;B</text>"), "{html}");
        assert!(html.contains(">37.50%</text>") && !html.contains("<script"), "{html}");
    }
}
