//! Which samples a classify run has and where each one's outputs go, from the reads and output
//! names as the command line gives them: files, `-1`/`-2` pairs or a `--samples` sheet; output
//! names that are templates with `{sample}`; per-read lines to stdout when nothing else is asked
//! for. Also the run's [`FilePlan`] (what it reads and writes), checked before any work starts.

use crate::classify::samples::{SampleSheetError, read_sample_sheet};
use crate::classify::{ReadLayout, Sample, SampleOutputs};
use crate::input::Source;
use crate::paths::FilePlan;
use std::path::{Path, PathBuf};

/// How the reads are given.
#[derive(Debug, Clone)]
pub enum ReadsGiven {
    /// Read files (`READS`): single-end, or interleaved pairs.
    Files { files: Vec<PathBuf>, interleaved: bool },
    /// `-1`/`-2` files, one R2 for each R1.
    Pairs { r1: Vec<PathBuf>, r2: Vec<PathBuf> },
    /// A `--samples` sheet.
    Sheet { sheet: PathBuf, interleaved: bool },
}

impl ReadsGiven {
    /// The one way of the three that the command line used: an error when it used none or several,
    /// or when the `-1` and `-2` counts differ.
    pub fn from_flags(
        files: Vec<PathBuf>,
        r1: Vec<PathBuf>,
        r2: Vec<PathBuf>,
        sheet: Option<PathBuf>,
        interleaved: bool,
    ) -> Result<Self, PlanError> {
        if r1.len() != r2.len() {
            return Err(PlanError::Usage(format!(
                "-1 is given {} times but -2 {} times: give one -2 for every -1",
                r1.len(),
                r2.len()
            )));
        }
        match (files.is_empty(), r1.is_empty(), sheet) {
            (false, true, None) => Ok(Self::Files { files, interleaved }),
            (true, false, None) => Ok(Self::Pairs { r1, r2 }),
            (true, true, Some(sheet)) => Ok(Self::Sheet { sheet, interleaved }),
            _ => Err(PlanError::Usage("give reads in one way: as READS, as -1/-2 pairs, or with --samples".into())),
        }
    }
}

/// Output names as given: each a path, `-` for stdout, or (with several samples, required) a
/// template in which `{sample}` stands for the sample's name.
#[derive(Debug, Clone, Default)]
pub struct OutputNames {
    /// Each sample's outputs, as templates.
    pub per_sample: SampleOutputs,
    /// One page for the whole run (not per sample).
    pub html: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The command line asks for what cannot be done (exit code 2).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Sheet(#[from] SampleSheetError),
}

/// The run's samples, each with its reads and its outputs' names filled in. Without `-o`, the
/// per-read lines of one sample go to stdout, as Kraken 2 writes them, unless another output
/// takes stdout (`-r -`); several samples need `-o` with `{sample}` for them (with no output
/// named at all they ask for it).
pub fn samples(given: &ReadsGiven, names: &OutputNames) -> Result<Vec<Sample>, PlanError> {
    let sources = |paths: &[PathBuf]| -> Vec<Source> { paths.iter().map(|p| Source::from_arg(p)).collect() };
    let layouts: Vec<(String, ReadLayout)> = match given {
        ReadsGiven::Sheet { sheet, interleaved } => read_sample_sheet(sheet, *interleaved)?,
        ReadsGiven::Pairs { r1, r2 } => {
            vec![(sample_name(&r1[0]), ReadLayout::Paired(sources(r1).into_iter().zip(sources(r2)).collect()))]
        }
        ReadsGiven::Files { files, interleaved } => {
            let layout =
                if *interleaved { ReadLayout::Interleaved(sources(files)) } else { ReadLayout::Single(sources(files)) };
            vec![(sample_name(&files[0]), layout)]
        }
    };
    let stdin_uses = layouts.iter().flat_map(|(_, l)| l.sources()).filter(|s| **s == Source::Stdin).count();
    if stdin_uses > 1 {
        return Err(PlanError::Usage("stdin (-) can be read only once".into()));
    }
    let mut templates = names.per_sample.clone();
    let to_stdout = |t: &Option<PathBuf>| t.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let nothing_named = names.html.is_none() && templates.by_flag().iter().all(|(_, t)| t.is_none());
    let one_sample = layouts.len() == 1;
    if templates.kraken.is_none()
        && (nothing_named || one_sample && !templates.by_flag().iter().any(|(_, t)| to_stdout(t)))
    {
        templates.kraken = Some(PathBuf::from("-"));
    }
    // Lines sent to /dev/null are not made at all (the run is as fast as with the report only).
    if templates.kraken.as_ref().is_some_and(|p| p.as_os_str() == "/dev/null") {
        templates.kraken = None;
    }
    let named: Vec<&PathBuf> = templates.by_flag().into_iter().filter_map(|(_, t)| t.as_ref()).collect();
    if named.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        return Err(PlanError::Usage("only one output can go to stdout (-)".into()));
    }
    if layouts.len() > 1 {
        if let Some(t) = named.iter().find(|t| !t.to_string_lossy().contains("{sample}")) {
            return Err(PlanError::Usage(format!(
                "{}: with several samples every output name must contain {{sample}}",
                t.display()
            )));
        }
    }
    Ok(layouts.into_iter().map(|(name, reads)| Sample { outputs: templates.for_sample(&name), name, reads }).collect())
}

/// What a classify run reads (the index, the sheet, every sample's reads) and writes (every output
/// of every sample, each mate's file for paired reads outputs, the HTML page), each named by the
/// flag that gave it (and the sample, with several).
pub fn file_plan(
    db: &Path,
    given: &ReadsGiven,
    samples: &[Sample],
    html: Option<&Path>,
) -> Result<FilePlan, PlanError> {
    let mut plan = FilePlan::new();
    plan.reads("-d/--db", db);
    let sheet = match given {
        ReadsGiven::Sheet { sheet, .. } => Some(sheet),
        _ => None,
    };
    if let Some(sheet) = sheet {
        plan.reads("--samples", sheet);
    }
    let several = samples.len() > 1 || sheet.is_some();
    let label = |flag: &str, sample: &str| if several { format!("{flag} (sample {sample})") } else { flag.to_string() };
    let flag = |plain: &'static str| if sheet.is_some() { "--samples" } else { plain };
    for s in samples {
        let mut read = |flag: &str, src: &Source| {
            // Stdin is known by the file it is open on.
            let path = match src {
                Source::File(p) => p.as_path(),
                Source::Stdin => Path::new("-"),
            };
            plan.reads(label(flag, &s.name), path);
        };
        match &s.reads {
            ReadLayout::Single(files) | ReadLayout::Interleaved(files) => {
                files.iter().for_each(|f| read(flag("READS"), f))
            }
            ReadLayout::Paired(pairs) => {
                for (r1, r2) in pairs {
                    read(flag("-1"), r1);
                    read(flag("-2"), r2);
                }
            }
        }
    }
    for s in samples {
        for (flag, path) in s.outputs.by_flag() {
            let Some(p) = path else { continue };
            // A paired sample's reads outputs are one file a mate (`#` in the name).
            let reads_out = flag == "--classified-out" || flag == "--unclassified-out";
            if reads_out && s.reads.is_paired() {
                let mates = crate::output::mate_paths(p).map_err(|e| PlanError::Usage(format!("{flag} {e}")))?;
                for m in &mates {
                    plan.writes(label(flag, &s.name), m);
                }
            } else {
                plan.writes(label(flag, &s.name), p);
            }
        }
    }
    if let Some(p) = html {
        plan.writes("--html", p);
    }
    Ok(plan)
}

/// A sample's default name: its first file's name without read-file extensions and mate marks
/// (`sample_R1.fq.gz` → `sample`; stdin is `stdin`).
pub(crate) fn sample_name(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "stdin".into());
    let mut stem = name.as_str();
    for ext in [".gz", ".bz2", ".xz", ".zst", ".fastq", ".fq", ".fasta", ".fa", ".fna"] {
        stem = stem.strip_suffix(ext).unwrap_or(stem);
    }
    for mate in ["_R1_001", "_R1", "_1", ".R1", ".1"] {
        if let Some(s) = stem.strip_suffix(mate) {
            return s.to_string();
        }
    }
    if stem == "-" { "stdin".into() } else { stem.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn sample_names_drop_extensions_and_mate_marks() {
        for (path, name) in [
            ("dir/gut_R1_001.fastq.gz", "gut"),
            ("gut_R1.fq", "gut"),
            ("x_1.fa.zst", "x"),
            ("x.R1.fq.bz2", "x"),
            ("reads.fna", "reads"),
            ("-", "stdin"),
            ("plain", "plain"),
        ] {
            assert_eq!(sample_name(Path::new(path)), name, "{path}");
        }
    }

    #[test]
    fn reads_are_given_in_exactly_one_way() {
        let one = |files: &[&str], r1: &[&str], r2: &[&str], sheet: Option<&str>| {
            ReadsGiven::from_flags(
                files.iter().map(|s| p(s)).collect(),
                r1.iter().map(|s| p(s)).collect(),
                r2.iter().map(|s| p(s)).collect(),
                sheet.map(p),
                false,
            )
        };
        assert!(matches!(one(&["a.fq"], &[], &[], None), Ok(ReadsGiven::Files { .. })));
        assert!(matches!(one(&[], &["a_1.fq"], &["a_2.fq"], None), Ok(ReadsGiven::Pairs { .. })));
        assert!(matches!(one(&[], &[], &[], Some("s.tsv")), Ok(ReadsGiven::Sheet { .. })));
        for bad in [
            one(&[], &[], &[], None),
            one(&["a.fq"], &["a_1.fq"], &["a_2.fq"], None),
            one(&["a.fq"], &[], &[], Some("s.tsv")),
            one(&[], &["a_1.fq", "b_1.fq"], &["a_2.fq"], None),
        ] {
            assert!(matches!(bad, Err(PlanError::Usage(_))), "{bad:?}");
        }
    }

    #[test]
    fn lines_go_to_stdout_unless_named_or_stdout_is_taken() {
        let given = ReadsGiven::Pairs { r1: vec![p("s_R1.fq")], r2: vec![p("s_R2.fq")] };
        let s = samples(&given, &OutputNames::default()).unwrap();
        assert_eq!((s.len(), s[0].name.as_str()), (1, "s"));
        assert_eq!(s[0].outputs.kraken, Some(p("-")));
        let report =
            OutputNames { per_sample: SampleOutputs { report: Some(p("r.txt")), ..Default::default() }, html: None };
        let s = samples(&given, &report).unwrap();
        assert_eq!((s[0].outputs.kraken.clone(), s[0].outputs.report.clone()), (Some(p("-")), Some(p("r.txt"))));
        let report_to_stdout =
            OutputNames { per_sample: SampleOutputs { report: Some(p("-")), ..Default::default() }, html: None };
        let s = samples(&given, &report_to_stdout).unwrap();
        assert_eq!((s[0].outputs.kraken.clone(), s[0].outputs.report.clone()), (None, Some(p("-"))));
        let nowhere = OutputNames {
            per_sample: SampleOutputs { kraken: Some(p("/dev/null")), report: Some(p("r.txt")), ..Default::default() },
            html: None,
        };
        assert_eq!(samples(&given, &nowhere).unwrap()[0].outputs.kraken, None);
        let two = OutputNames {
            per_sample: SampleOutputs { kraken: Some(p("-")), report: Some(p("-")), ..Default::default() },
            html: None,
        };
        assert!(matches!(samples(&given, &two), Err(PlanError::Usage(m)) if m.contains("stdout")));
    }

    #[test]
    fn several_samples_need_templates_and_fill_them() {
        let dir = tempfile::tempdir().unwrap();
        let sheet = dir.path().join("s.tsv");
        std::fs::write(&sheet, "a\ta_1.fq\ta_2.fq\nb\tb.fq\n").unwrap();
        let given = ReadsGiven::Sheet { sheet: sheet.clone(), interleaved: false };
        let fixed = OutputNames {
            per_sample: SampleOutputs { report: Some(p("out.kreport")), ..Default::default() },
            html: None,
        };
        assert!(matches!(samples(&given, &fixed), Err(PlanError::Usage(m)) if m.contains("{sample}")));
        let names = OutputNames {
            per_sample: SampleOutputs {
                kraken: Some(p("{sample}.kraken")),
                classified: Some(p("{sample}#.fq")),
                ..Default::default()
            },
            html: None,
        };
        let s = samples(&given, &names).unwrap();
        assert_eq!(
            s.iter().map(|s| s.outputs.kraken.clone().unwrap()).collect::<Vec<_>>(),
            [p("a.kraken"), p("b.kraken")]
        );
        // The plan names each sample's files, each mate's file for a paired sample's reads output.
        let plan = file_plan(Path::new("x.db"), &given, &s, None).unwrap();
        let text = format!("{plan:?}");
        for want in [
            "a_1.fq\", usage: Reads",
            "b.fq\", usage: Reads",
            "path: \"a_1.fq\", usage: Writes",
            "path: \"a_2.fq\", usage: Writes",
            "path: \"b#.fq\", usage: Writes",
            "--classified-out (sample a)",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }
}
