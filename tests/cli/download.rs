//! `kmerdb download` against a local HTTP server that serves a copy of NCBI's layout made from
//! `data/` (never the internet): the taxonomy dump, assembly summaries of two groups, and each
//! genome's folder with its md5checksums.txt. The server can cut a file's first transfer short,
//! answer 404 for a file, or serve a file damaged; it records every request, so that a rerun is
//! seen fetching only what is missing.

use crate::{data, kmerdb};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the server does besides serving files.
#[derive(Default)]
struct Faults {
    /// Paths whose next transfer stops halfway (then served whole).
    drop_once: HashSet<String>,
    /// Paths answered with 404.
    missing: HashSet<String>,
    /// Paths served with a byte changed.
    damaged: HashSet<String>,
}

struct Server {
    url: String,
    faults: Arc<Mutex<Faults>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Serves the files under `root` on a free local port, one thread a connection.
    fn start(root: PathBuf) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let faults = Arc::new(Mutex::new(Faults::default()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (f, r) = (faults.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (root, f, r) = (root.clone(), f.clone(), r.clone());
                std::thread::spawn(move || {
                    let _ = answer(stream, &root, &f, &r);
                });
            }
        });
        Server { url, faults, requests }
    }

    /// The requests so far for paths ending in `suffix`.
    fn requested(&self, suffix: &str) -> Vec<String> {
        self.requests.lock().unwrap().iter().filter(|p| p.ends_with(suffix)).cloned().collect()
    }
}

fn answer(
    mut stream: std::net::TcpStream,
    root: &Path,
    faults: &Mutex<Faults>,
    requests: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" {
            break;
        }
    }
    requests.lock().unwrap().push(path.clone());
    let (missing, damaged, drop) = {
        let mut f = faults.lock().unwrap();
        (f.missing.contains(&path), f.damaged.contains(&path), f.drop_once.remove(&path))
    };
    let file = root.join(path.trim_start_matches('/'));
    let Ok(mut body) = std::fs::read(&file).map_err(|_| ()).and_then(|b| if missing { Err(()) } else { Ok(b) }) else {
        return stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    };
    if damaged {
        let middle = body.len() / 2;
        body[middle] ^= 0xff;
    }
    write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())?;
    let sent = if drop { &body[..body.len() / 2] } else { &body[..] };
    stream.write_all(sent)?;
    stream.flush()
}

/// Each bundled genome as an assembly: (file stem, accession, folder path on the server, group,
/// taxid, species taxid, level).
struct MirrorGenome {
    stem: String,
    folder: String,
    fasta: String,
}

/// NCBI's layout under `root`, made from `data/`: the genomes as RefSeq assemblies (E. coli and
/// S. aureus under bacteria, the viruses under viral; VDV1 at level Contig), the taxonomy dump.
fn make_mirror(root: &Path) -> Vec<MirrorGenome> {
    let nodes = std::fs::read_to_string(data().join("taxonomy/nodes.dmp")).unwrap();
    let parent_rank: std::collections::HashMap<u32, (u32, String)> = nodes
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split("\t|\t").collect();
            (f[0].parse().unwrap(), (f[1].parse().unwrap(), f[2].to_owned()))
        })
        .collect();
    let species_of = |mut t: u32| loop {
        let (p, rank) = &parent_rank[&t];
        if rank == "species" || *p == t {
            return t;
        }
        t = *p;
    };
    let map = std::fs::read_to_string(data().join("seqid2taxid.map")).unwrap();
    let taxid_of = |seqid: &str| -> u32 {
        map.lines().find_map(|l| l.split_once('\t').filter(|(s, _)| *s == seqid)).unwrap().1.trim().parse().unwrap()
    };
    let header = "#assembly_accession\tbioproject\tbiosample\twgs_master\trefseq_category\ttaxid\tspecies_taxid\torganism_name\tinfraspecific_name\tisolate\tversion_status\tassembly_level\trelease_type\tgenome_rep\tseq_rel_date\tasm_name\tsubmitter\tgbrs_paired_asm\tpaired_asm_comp\tftp_path\n";
    let mut summaries: std::collections::BTreeMap<&str, String> = Default::default();
    let mut genomes = Vec::new();
    let files = crate::genome_files();
    for (i, file) in files.iter().enumerate() {
        let stem = file.file_name().unwrap().to_str().unwrap().trim_end_matches(".fna.gz").to_owned();
        let seqid = kmerdb::download::ncbi::sequence_ids(file).unwrap().remove(0);
        let taxid = taxid_of(&seqid);
        let accession = format!("GCF_{:09}.1", i + 1);
        let name = format!("{accession}_{stem}");
        let folder = format!("genomes/all/GCF/000/000/{:03}/{name}", i + 1);
        let dir = root.join(&folder);
        std::fs::create_dir_all(&dir).unwrap();
        let fasta = format!("{name}_genomic.fna.gz");
        std::fs::copy(file, dir.join(&fasta)).unwrap();
        let md5 = kmerdb::download::fetch::md5_of_file(&dir.join(&fasta)).unwrap();
        std::fs::write(
            dir.join("md5checksums.txt"),
            format!("0123456789abcdef0123456789abcdef  ./{name}_genomic.gbff.gz\n{md5}  ./{fasta}\n"),
        )
        .unwrap();
        let group = if stem.starts_with("Ecoli") || stem.starts_with("Sau") { "bacteria" } else { "viral" };
        let level = if stem == "VDV1" { "Contig" } else { "Complete Genome" };
        // E. coli K-12's GenBank twin is how GTDB names it (below).
        let paired = if stem == "Ecoli_K12_MG1655" { accession.replace("GCF", "GCA") } else { "na".into() };
        let row = format!(
            "{accession}\tPRJNA1\tSAMN1\t\tna\t{taxid}\t{}\t{stem} organism\t\t\tlatest\t{level}\tMajor\tFull\t2020/01/01\t{stem}\tkmerdb tests\t{paired}\tidentical\thttps://ftp.ncbi.nlm.nih.gov/{folder}\n",
            species_of(taxid)
        );
        summaries.entry(group).or_insert_with(|| format!("#   See the README\n{header}")).push_str(&row);
        genomes.push(MirrorGenome { stem, folder, fasta });
    }
    for (group, text) in summaries {
        let dir = root.join(format!("genomes/refseq/{group}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("assembly_summary.txt"), text).unwrap();
    }
    let tax = root.join("pub/taxonomy");
    std::fs::create_dir_all(&tax).unwrap();
    let gz =
        flate2::write::GzEncoder::new(std::fs::File::create(tax.join("taxdump.tar.gz")).unwrap(), Default::default());
    let mut tar = tar::Builder::new(gz);
    for f in ["nodes.dmp", "names.dmp"] {
        tar.append_path_with_name(data().join("taxonomy").join(f), f).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
    let md5 = kmerdb::download::fetch::md5_of_file(&tax.join("taxdump.tar.gz")).unwrap();
    std::fs::write(tax.join("taxdump.tar.gz.md5"), format!("{md5}  taxdump.tar.gz\n")).unwrap();
    // A GTDB release: the two E. coli (K-12 by its GenBank accession) and S. aureus COL, and
    // an archaeon that no assembly here is.
    let accession =
        |stem: &str| format!("GCF_{:09}.1", files.iter().position(|f| f.to_str().unwrap().contains(stem)).unwrap() + 1);
    let coli = "d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;g__Escherichia;s__Escherichia coli";
    let aureus = "d__Bacteria;p__Bacillota;c__Bacilli;o__Staphylococcales;f__Staphylococcaceae;g__Staphylococcus;s__Staphylococcus aureus";
    let bac = format!(
        "RS_{}\t{coli}\nGB_{}\t{coli}\nRS_{}\t{aureus}\n",
        accession("Ecoli_536"),
        accession("Ecoli_K12").replace("GCF", "GCA"),
        accession("Sau_COL")
    );
    let ar = "GB_GCA_900000001.1\td__Archaea;p__Methanobacteriota;c__Methanobacteria;o__Methanobacteriales;f__Methanobacteriaceae;g__Methanobrevibacter;s__Methanobrevibacter smithii\n";
    std::fs::create_dir_all(root.join("gtdb")).unwrap();
    for (file, text) in [("bac120_taxonomy.tsv.gz", bac.as_str()), ("ar53_taxonomy.tsv.gz", ar)] {
        std::fs::write(root.join("gtdb").join(file), crate::gzip(text.as_bytes())).unwrap();
    }
    genomes
}

/// `kmerdb build` of a downloaded folder `lib` (its genomes and seqid2taxid.map) to `db`, with
/// `taxonomy` (the taxonomy flags); panics if it fails.
fn build_library<'a>(db: &Path, lib: &Path, taxonomy: impl IntoIterator<Item = &'a OsStr>) {
    kmerdb()
        .arg("build")
        .arg("-d")
        .arg(db)
        .args(taxonomy)
        .arg("--seqid2taxid")
        .arg(lib.join("seqid2taxid.map"))
        .arg(lib.join("genomes"))
        .assert()
        .success();
}

/// The standard output of classifying the bundled read pairs against `db`, with `extra` flags.
fn sample_output(db: &Path, extra: &[&str]) -> Vec<u8> {
    let out = crate::classify_pairs(db).arg("-q").args(extra).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn download(server: &Server, args: &[&str]) -> std::process::Output {
    kmerdb()
        .arg("download")
        .args(args)
        .args(["--mirror", &server.url, "--retry-wait", "0.01", "--attempts", "3"])
        .output()
        .unwrap()
}

/// A mirror of NCBI's layout made from `data/` and served: the folder that holds it (and the
/// test's outputs), its genomes and the server.
fn served_mirror() -> (tempfile::TempDir, Vec<MirrorGenome>, Server) {
    let dir = tempfile::tempdir().unwrap();
    let mirror = dir.path().join("mirror");
    let genomes = make_mirror(&mirror);
    (dir, genomes, Server::start(mirror))
}

/// Temporary files (`*.tmp`) in `dir`.
fn temporary_files(dir: &Path) -> usize {
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name());
    names.filter(|n| n.to_string_lossy().ends_with(".tmp")).count()
}

#[test]
fn genomes_and_taxonomy_download_resume_and_build() {
    let (dir, genomes, server) = served_mirror();
    let (tax, lib) = (dir.path().join("tax"), dir.path().join("lib"));

    let out = download(&server, &["taxonomy", "-o", tax.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["nodes.dmp", "names.dmp"] {
        assert_eq!(std::fs::read(tax.join(f)).unwrap(), std::fs::read(data().join("taxonomy").join(f)).unwrap());
    }

    // Lambda's first transfer is cut short (retried, then whole); Sau_COL's file is missing.
    let path_of = |stem: &str| {
        let g = genomes.iter().find(|g| g.stem == stem).unwrap();
        format!("/{}/{}", g.folder, g.fasta)
    };
    server.faults.lock().unwrap().drop_once.insert(path_of("Phage_lambda"));
    server.faults.lock().unwrap().missing.insert(path_of("Sau_COL"));
    let args = ["genomes", "--group", "bacteria,viral", "--level", "contig", "-o", lib.to_str().unwrap()];
    let out = download(&server, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a missing file fails the run: {stderr}");
    assert!(stderr.contains("GCF_000000006.1") && stderr.contains("404"), "{stderr}");
    assert!(stderr.contains("1 of 7 assemblies could not be downloaded"), "{stderr}");
    assert_eq!(server.requested("Phage_lambda_genomic.fna.gz").len(), 2, "the cut transfer is tried again");
    let got = lib.join("genomes");
    assert!(got.join(&genomes.iter().find(|g| g.stem == "Phage_lambda").unwrap().fasta).is_file());
    assert_eq!(temporary_files(&got), 0, "temporary files left in {}", got.display());
    let map = std::fs::read_to_string(lib.join("seqid2taxid.map")).unwrap();
    assert_eq!(map.lines().count(), 6, "{map}");
    assert!(map.contains("NC_001416.1\t10710"), "{map}");

    // The file is back: a rerun fetches it alone.
    server.faults.lock().unwrap().missing.clear();
    let before = server.requested("_genomic.fna.gz").len();
    let out = download(&server, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fetched: Vec<String> = server.requested("_genomic.fna.gz").split_off(before);
    assert_eq!(fetched, [path_of("Sau_COL")]);
    let map = std::fs::read_to_string(lib.join("seqid2taxid.map")).unwrap();
    assert_eq!(map.lines().count(), 7);
    for g in &genomes {
        let want = std::fs::read(data().join("genomes").join(format!("{}.fna.gz", g.stem))).unwrap();
        assert_eq!(std::fs::read(got.join(&g.fasta)).unwrap(), want, "{}", g.stem);
    }

    // The downloaded folder builds as it is, and classifies as the bundled data's index does.
    let (db, bundled) = (dir.path().join("dl.db"), dir.path().join("bundled.db"));
    build_library(&db, &lib, [OsStr::new("--taxonomy"), tax.as_os_str()]);
    crate::build_data(&bundled).assert().success();
    let classify = |db: &Path| sample_output(db, &[]);
    assert!(classify(&db) == classify(&bundled), "the downloaded genomes classify as the bundled ones");
}

#[test]
fn choices_and_damaged_files() {
    let (dir, genomes, server) = served_mirror();
    let (tax, lib) = (dir.path().join("tax"), dir.path().join("lib"));
    assert!(download(&server, &["taxonomy", "-o", tax.to_str().unwrap()]).status.success());

    // Escherichia (561) only, one a species: E. coli's first by accession.
    let out = download(
        &server,
        &[
            "genomes",
            "--group",
            "bacteria,viral",
            "--taxa",
            "561",
            "--taxonomy",
            tax.to_str().unwrap(),
            "--per-species",
            "1",
            "-o",
            lib.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = std::fs::read_to_string(lib.join("assemblies.tsv")).unwrap();
    assert_eq!(table.lines().count(), 2, "{table}");
    assert!(table.contains("Ecoli_536 organism"), "{table}");

    // The default level (complete genomes) leaves VDV1 (a contig) out.
    let lib2 = dir.path().join("lib2");
    let out = download(&server, &["genomes", "--group", "viral", "-o", lib2.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = std::fs::read_to_string(lib2.join("assemblies.tsv")).unwrap();
    assert!(!table.contains("VDV1 organism") && table.contains("Phage_lambda organism"), "{table}");

    // A file served damaged every time fails with its md5, after the attempts; nothing of it stays.
    let g = genomes.iter().find(|g| g.stem == "Phage_lambda").unwrap();
    std::fs::remove_file(lib2.join("genomes").join(&g.fasta)).unwrap();
    server.faults.lock().unwrap().damaged.insert(format!("/{}/{}", g.folder, g.fasta));
    let out = download(&server, &["genomes", "--group", "viral", "-o", lib2.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&g.fasta) && stderr.contains("md5"), "{stderr}");
    assert_eq!(server.requested(&g.fasta).len(), 1 + 3, "fetched once before, then three attempts");
    assert!(!lib2.join("genomes").join(&g.fasta).exists());
    assert_eq!(temporary_files(&lib2.join("genomes")), 0, "the damaged file's temporary file stays");

    // Bad choices are clear errors, and a file given as the folder is left as it was.
    let file = dir.path().join("a file");
    std::fs::write(&file, "kept").unwrap();
    let out = download(&server, &["taxonomy", "-o", file.to_str().unwrap()]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not a folder"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
    let out = download(&server, &["genomes", "--group", "fungi", "-o", lib2.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("genomes/refseq/fungi/assembly_summary.txt") && stderr.contains("404"),
        "{stderr}"
    );
    let out = download(
        &server,
        &[
            "genomes",
            "--group",
            "viral",
            "--taxa",
            "999999999",
            "--taxonomy",
            tax.to_str().unwrap(),
            "-o",
            lib2.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("999999999"), "{stderr}");
}

#[test]
fn gtdb_taxonomy_and_its_genomes_build_with_gtdb_names() {
    let (dir, _, server) = served_mirror();
    let (gtdb, lib) = (dir.path().join("gtdb"), dir.path().join("lib"));
    let out = kmerdb()
        .args(["download", "gtdb-taxonomy", "-o", gtdb.to_str().unwrap(), "--mirror", &format!("{}/gtdb", server.url)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let names = std::fs::read_to_string(gtdb.join("names.dmp")).unwrap();
    assert!(names.contains("\tPseudomonadota\t") && names.contains("\tMethanobrevibacter smithii\t"), "{names}");

    let out = download(
        &server,
        &[
            "genomes",
            "--group",
            "bacteria,viral",
            "--level",
            "contig",
            "--gtdb",
            gtdb.to_str().unwrap(),
            "-o",
            lib.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = std::fs::read_to_string(lib.join("assemblies.tsv")).unwrap();
    assert_eq!(table.lines().count(), 4, "the three genomes GTDB holds, K-12 by its GenBank twin: {table}");
    let species = kmerdb::download::gtdb::read_genomes(&gtdb).unwrap();
    let map = std::fs::read_to_string(lib.join("seqid2taxid.map")).unwrap();
    assert!(map.lines().all(|l| species.values().any(|t| l.ends_with(&format!("\t{t}")))), "{map}");

    let db = dir.path().join("gtdb.db");
    build_library(&db, &lib, [OsStr::new("--taxonomy"), gtdb.as_os_str()]);
    // GTDB's files given to build as they are make the same index (all but the provenance).
    let direct = dir.path().join("direct.db");
    let gtdb_files = dir.path().join("mirror/gtdb");
    let (bac, ar) = (gtdb_files.join("bac120_taxonomy.tsv.gz"), gtdb_files.join("ar53_taxonomy.tsv.gz"));
    let flag = OsStr::new("--taxonomy-gtdb");
    build_library(&direct, &lib, [flag, bac.as_os_str(), flag, ar.as_os_str()]);
    assert_eq!(crate::sections_but_provenance(&direct), crate::sections_but_provenance(&db));

    let report = String::from_utf8(sample_output(&db, &["-o", "/dev/null", "-r", "-"])).unwrap();
    for (rank, name) in [
        ("D", "Bacteria"),
        ("P", "Pseudomonadota"),
        ("F", "Enterobacteriaceae"),
        ("S", "Escherichia coli"),
        ("S", "Staphylococcus aureus"),
    ] {
        assert!(
            report.lines().any(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                f[3] == rank && f[5].trim() == name
            }),
            "no {rank} {name} in the report:\n{report}"
        );
    }
}
