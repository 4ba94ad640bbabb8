//! `kmerdb info`: what an index holds, as text for people or JSON for scripts.

use crate::index::format::FORMAT_VERSION;
use crate::index::{Index, SectionKind, TargetInfo};
use crate::resources::human_bytes;
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, Serialize)]
pub struct IndexInfo {
    pub path: String,
    pub file_bytes: u64,
    pub format_version: u32,
    pub header: crate::index::Header,
    /// Stored in its own section (see `index::format`), so shown beside the header.
    pub provenance: crate::index::format::Provenance,
    pub key_index_load_factor: f64,
    /// Bytes of the shards' key indexes and of their location lists (the shard data, less the
    /// padding between blocks).
    pub key_index_bytes: u64,
    pub list_bytes: u64,
    /// The narrowest and widest unit (bits) the shards size their described lists in (delta
    /// lists, clades, long fixed lists: `index::packed_keys::SlotCodes`).
    pub list_unit_bits: [u32; 2],
    pub bytes_per_reference_base: f64,
    pub sections: Vec<SectionInfo>,
    /// The amino-acid table of `build --protein`, if there is one.
    pub protein: Option<ProteinInfo>,
    pub targets: Vec<TargetInfo>,
    /// Whether `--verify` checked every section's checksum (a failed check is an error before
    /// anything is described).
    pub verified: bool,
}

#[derive(Debug, Serialize)]
pub struct SectionInfo {
    pub name: &'static str,
    pub offset: u64,
    pub bytes: u64,
    pub checksum: String,
}

#[derive(Debug, Serialize)]
pub struct ProteinInfo {
    pub k: u32,
    pub sample: u32,
    pub min_orf: u32,
    pub cap: u32,
    /// Distinct amino-acid k-mers, and (k-mer, target) entries.
    pub kmers: u64,
    pub entries: u64,
}

pub fn describe(index: &Index, verified: bool) -> IndexInfo {
    let h = index.header();
    // Counts are as the build reported them, unchecked: a damaged one must not overflow here.
    let slots = h.counts.buckets.saturating_mul(h.key_index.bucket_slots as u64);
    IndexInfo {
        path: index.path().display().to_string(),
        file_bytes: index.file_size(),
        format_version: FORMAT_VERSION,
        header: h.clone(),
        provenance: h.provenance.clone(),
        key_index_load_factor: if slots == 0 { 0.0 } else { h.counts.features as f64 / slots as f64 },
        key_index_bytes: (0..index.shard_count()).map(|s| index.shard_entry(s).key_bytes()).sum(),
        list_bytes: (0..index.shard_count()).map(|s| index.shard_entry(s).words * 4).sum(),
        list_unit_bits: {
            let units = (0..index.shard_count()).map(|s| index.shard_entry(s).unit_bits);
            [units.clone().min().unwrap_or(0), units.max().unwrap_or(0)]
        },
        bytes_per_reference_base: index.file_size() as f64 / h.counts.bases.max(1) as f64,
        sections: SectionKind::ALL
            .iter()
            .filter_map(|&k| h.section(k))
            .map(|s| SectionInfo {
                name: s.kind.name(),
                offset: s.offset,
                bytes: s.len,
                checksum: format!("{:016x}", s.checksum),
            })
            .collect(),
        protein: index.protein().map(|t| {
            let (kmers, entries) = t.len();
            let p = t.params;
            ProteinInfo {
                k: p.k,
                sample: p.sample,
                min_orf: p.min_orf,
                cap: p.cap,
                kmers: kmers as u64,
                entries: entries as u64,
            }
        }),
        targets: index.targets().to_vec(),
        verified,
    }
}

/// Text shown for at most this many targets.
const TARGETS_SHOWN: usize = 20;

pub fn render_text(info: &IndexInfo) -> String {
    let h = &info.header;
    let p = &h.sketch;
    let c = &h.counts;
    let mut s = String::new();
    let _ = writeln!(s, "index            {}", info.path);
    let _ = writeln!(s, "format version   {}", info.format_version);
    let _ = writeln!(
        s,
        "built            kmerdb {} at {} ({})",
        h.provenance.kmerdb_version,
        chrono::DateTime::from_timestamp(h.provenance.created_unix, 0).map(|d| d.to_rfc3339()).unwrap_or_default(),
        h.provenance.command_line.join(" ")
    );
    let _ = writeln!(
        s,
        "parameters       k={} window={} stride={} sketch-size={} hash-function={} seed={} max-locations-per-feature={} shards={}",
        p.k,
        p.window,
        p.stride,
        p.sketch_size,
        h.hash_function,
        p.hash_seed,
        h.max_locations_per_feature,
        h.shard_count()
    );
    let _ = writeln!(
        s,
        "locations        {} bits = {} target bits + {} window bits, stored as global window numbers in lists of {}-bit entries (delta lists sized in {}-bit units)",
        h.layout.bits(),
        h.layout.target_bits,
        h.layout.window_bits,
        h.layout.stored_bits,
        match info.list_unit_bits {
            [a, b] if a == b => a.to_string(),
            [a, b] => format!("{a}- to {b}"),
        }
    );
    let taxonomy = match h.taxonomy {
        crate::index::format::TaxonomySource::Ncbi => {
            format!("NCBI, {} taxa (checksum {:016x})", c.taxa, h.collection.taxonomy_checksum)
        }
        crate::index::format::TaxonomySource::PerSequence => {
            format!("none: each sequence its own taxon, {} taxa", c.taxa)
        }
    };
    let _ = writeln!(s, "taxonomy         {taxonomy}");
    let part = &h.collection;
    if part.parts > 1 {
        let _ = writeln!(s, "partition        part {} of {} (build id {:016x})", part.part, part.parts, part.id);
    }
    let _ = writeln!(s, "targets          {} ({} bases, {} windows)", c.targets, c.bases, c.windows);
    let _ = writeln!(
        s,
        "features         {}, of which {} clade features over the location cap ({} locations, kept for updates)",
        c.features, c.clade_features, c.clade_locations
    );
    let _ = writeln!(s, "locations        {}", c.locations);
    if let Some(p) = &info.protein {
        let _ = writeln!(
            s,
            "protein          {} amino-acid {}-mers ({} entries), 1 in {} kept, open reading frames of at least {} aa, at most {} targets each",
            p.kmers, p.k, p.entries, p.sample, p.min_orf, p.cap
        );
    }
    let _ = writeln!(
        s,
        "key index        {} buckets of {} slots, load factor {:.3}, {} ({:.1} bits a feature); lists {}",
        c.buckets,
        h.key_index.bucket_slots,
        info.key_index_load_factor,
        human_bytes(info.key_index_bytes),
        info.key_index_bytes as f64 * 8.0 / c.features.max(1) as f64,
        human_bytes(info.list_bytes)
    );
    let _ = writeln!(
        s,
        "size             {} ({:.3} bytes per reference base)",
        human_bytes(info.file_bytes),
        info.bytes_per_reference_base
    );
    for sec in &info.sections {
        let _ = writeln!(
            s,
            "  section {:<10} {:>12} bytes at {:>12}  xxh3 {}",
            sec.name, sec.bytes, sec.offset, sec.checksum
        );
    }
    s.push_str(if info.verified {
        "checksums        all sections verified\n"
    } else {
        "checksums        not checked (use --verify)\n"
    });
    let _ = writeln!(s, "targets (name, taxid, length, windows):");
    for t in info.targets.iter().take(TARGETS_SHOWN) {
        let _ = writeln!(s, "  {}\t{}\t{}\t{}", t.name, t.taxid, t.length, t.windows);
    }
    if info.targets.len() > TARGETS_SHOWN {
        let _ = writeln!(s, "  ... {} more (--json lists all)", info.targets.len() - TARGETS_SHOWN);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Verify;
    use crate::index::test_index::{open_fixed, seed, with_header};

    /// Fuzzing (index_open_fixed): a bucket count near 2^60 overflowed the key index's slot count
    /// (a panic with overflow checks; a wrapped count and a load factor in the billions without).
    #[test]
    fn regression_huge_bucket_count_does_not_overflow() {
        let index = open_fixed(&with_header(&seed(), |h| h.counts.buckets = (1 << 60) + 1), Verify::All).expect("open");
        let info = describe(&index, false);
        assert!(info.key_index_load_factor < 1e-9, "load factor {}", info.key_index_load_factor);
        assert!(
            render_text(&info).contains("key index        1152921504606846977 buckets of 16 slots, load factor 0.000,")
        );
    }
}
