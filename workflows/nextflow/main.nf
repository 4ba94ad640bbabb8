// kmerdb on a partitioned index, with the modules in modules/kmerdb: build every part, classify
// every sample against every part, merge each sample's parts.
//   nextflow run workflows/nextflow --genomes data/genomes --taxonomy data/taxonomy \
//       --seqid2taxid data/seqid2taxid.map --samplesheet samples.tsv --partitions 2
nextflow.enable.dsl = 2

include { KMERDB_BUILD    } from './modules/kmerdb/build/main'
include { KMERDB_CLASSIFY } from './modules/kmerdb/classify/main'
include { KMERDB_MERGE    } from './modules/kmerdb/merge/main'

params.genomes = null
params.taxonomy = null
params.seqid2taxid = null
// The sample sheet of `kmerdb classify --samples` (README, "Sample sheets"): tab-separated sample,
// r1, r2 (r2 empty for single-end reads) with that header row, paths relative to the sheet.
params.samplesheet = null
params.partitions = 2
params.outdir = 'results'

workflow {
    parts = Channel.of(1..params.partitions).map { i -> [[id: "part${i}", part: i, parts: params.partitions], file(params.genomes)] }
    KMERDB_BUILD(parts, file(params.taxonomy), file(params.seqid2taxid))

    samples = Channel.fromPath(params.samplesheet)
        .splitCsv(header: true, sep: '\t')
        .map { row ->
            def single = !row.r2
            def dir = file(params.samplesheet).parent
            [[id: row.sample, single_end: single], single ? [dir.resolve(row.r1)] : [dir.resolve(row.r1), dir.resolve(row.r2)]]
        }
    // Every sample against every part; each classification named after both.
    pairs = samples.combine(KMERDB_BUILD.out.db)
        .multiMap { meta, reads, part_meta, db ->
            reads: [meta + [part: part_meta.part], reads]
            db: [part_meta, db]
        }
    KMERDB_CLASSIFY(pairs.reads, pairs.db)
    KMERDB_MERGE(KMERDB_CLASSIFY.out.candidates.map { meta, cand -> [[id: meta.id, single_end: meta.single_end], cand] }.groupTuple())
}
