// kmerdb on a partitioned index, with the modules in modules/kmerdb: build every part, classify
// every sample against every part, merge each sample's parts. With --add (genomes: a folder or a
// file) or --remove_targets (a file of sequence ids, one per line), the built parts are updated
// before they are classified: every part takes the whole removal list (ext.args '--skip-absent':
// each removes the targets it holds) and the last part the added genomes (as in the Snakemake
// workflow's rule update); a part with nothing to do is classified as built.
//   nextflow run workflows/nextflow --genomes data/genomes --taxonomy data/taxonomy \
//       --seqid2taxid data/seqid2taxid.map --samplesheet samples.tsv --partitions 2 \
//       [--add new_genomes/] [--remove_targets removed.txt] [--gpus all]
nextflow.enable.dsl = 2

include { KMERDB_BUILD    } from './modules/kmerdb/build/main'
include { KMERDB_CLASSIFY } from './modules/kmerdb/classify/main'
include { KMERDB_MERGE    } from './modules/kmerdb/merge/main'
include { KMERDB_UPDATE   } from './modules/kmerdb/update/main'

params.genomes = null
params.taxonomy = null
params.seqid2taxid = null
// The sample sheet of `kmerdb classify --samples` (README, "Sample sheets"): tab-separated sample,
// r1, r2 (r2 empty for single-end reads) with that header row, paths relative to the sheet.
params.samplesheet = null
params.partitions = 2
params.outdir = 'results'
// The update step (null: none): genomes to add to the last part, sequence ids to remove.
params.add = null
params.remove_targets = null
// kmerdb classify's --gpus (all, none or a list such as 0,1); null: GPUs only for a task with an
// accelerator directive (nextflow.config, KMERDB_CLASSIFY's ext.gpus).
params.gpus = null

workflow {
    parts = Channel.of(1..params.partitions).map { i -> [[id: "part${i}", part: i, parts: params.partitions], file(params.genomes)] }
    KMERDB_BUILD(parts, file(params.taxonomy), file(params.seqid2taxid))

    // A part is updated when there are targets to remove (every part: each may hold some) or
    // genomes to add (the last part); the others go on as built. Without --add and
    // --remove_targets, none is updated.
    built = KMERDB_BUILD.out.db.branch { meta, db ->
        update: params.remove_targets || (params.add && meta.part == params.partitions)
        as_built: true
    }
    to_update = built.update.multiMap { meta, db ->
        db: [meta, db]
        genomes: (params.add && meta.part == params.partitions) ? file(params.add, checkIfExists: true) : []
    }
    remove_targets = params.remove_targets ? file(params.remove_targets, checkIfExists: true) : []
    KMERDB_UPDATE(to_update.db, to_update.genomes, remove_targets, file(params.taxonomy), file(params.seqid2taxid))
    dbs = KMERDB_UPDATE.out.db.mix(built.as_built)

    samples = Channel.fromPath(params.samplesheet)
        .splitCsv(header: true, sep: '\t')
        .map { row ->
            def single = !row.r2
            def dir = file(params.samplesheet).parent
            [[id: row.sample, single_end: single], single ? [dir.resolve(row.r1)] : [dir.resolve(row.r1), dir.resolve(row.r2)]]
        }
    // Every sample against every part; each classification named after both.
    pairs = samples.combine(dbs)
        .multiMap { meta, reads, part_meta, db ->
            reads: [meta + [part: part_meta.part], reads]
            db: [part_meta, db]
        }
    // Candidates for the merge; no reads (a read that one part leaves unclassified may be another's).
    KMERDB_CLASSIFY(pairs.reads, pairs.db, true, false)
    KMERDB_MERGE(KMERDB_CLASSIFY.out.candidates.map { meta, cand -> [[id: meta.id, single_end: meta.single_end], cand] }.groupTuple())
}
