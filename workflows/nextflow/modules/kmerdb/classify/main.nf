// Classifies a sample's reads against a kmerdb index: per-read output, kreport and abundances;
// with save_candidates, the candidates against this index (one part of a partitioned index) that
// KMERDB_MERGE joins; with save_reads, the classified and unclassified reads (gzipped, in their
// input format, `_1`/`_2` for pairs, each header ending in ` kraken:taxid|N`).
// GPUs: ext.gpus (`all`, `none` or a list such as '0,1') if set, else every GPU the task was given
// when it has an accelerator directive, else none.
// The Kraken report is `PREFIX.report.txt`, not `.kreport`: MultiQC's default fn_clean_exts strip
// `.report` and `.txt`, so its sample names are the prefixes without an extra_fn_clean_exts.
process KMERDB_CLASSIFY {
    tag "$meta.id"
    label 'process_high'

    conda "${moduleDir}/environment.yml"

    input:
    tuple val(meta), path(reads)
    tuple val(meta2), path(db)
    val save_candidates
    val save_reads

    output:
    tuple val(meta), path("*.kraken.gz"), emit: kraken
    tuple val(meta), path("*.report.txt"), emit: report
    tuple val(meta), path("*.abundance.tsv"), emit: abundance
    tuple val(meta), path("*.cand.gz"), emit: candidates, optional: true
    tuple val(meta), path("*.classified*"), emit: classified_reads, optional: true
    tuple val(meta), path("*.unclassified*"), emit: unclassified_reads, optional: true
    tuple val("${task.process}"), val('kmerdb'), eval('kmerdb --version | sed "s/^kmerdb //"'), topic: versions, emit: versions_kmerdb

    when:
    task.ext.when == null || task.ext.when

    script:
    def args = task.ext.args ?: ''
    def prefix = task.ext.prefix ?: "${meta.id}"
    def input = meta.single_end ? "${reads}" : "-1 ${reads[0]} -2 ${reads[1]}"
    def candidates = save_candidates ? "--candidates-out ${prefix}.cand.gz" : ''
    // kmerdb writes reads in their input format and turns `#` into the mate number.
    def format = [reads].flatten().every { it.name =~ /\.(fa|fasta|fna|fas)(\.(gz|bz2|xz|zst))?$/ } ? 'fasta' : 'fastq'
    def mate = meta.single_end ? '' : '#'
    def reads_out = save_reads ?
        "--classified-out ${prefix}.classified${mate}.${format}.gz --unclassified-out ${prefix}.unclassified${mate}.${format}.gz" :
        ''
    def accelerators = task.accelerator ? (task.accelerator.request ?: task.accelerator.limit ?: 0) : 0
    def gpus = task.ext.gpus != null ? task.ext.gpus : (accelerators > 0 ? 'all' : 'none')
    """
    kmerdb classify \\
        -d ${db} \\
        ${input} \\
        -o ${prefix}.kraken.gz \\
        --report ${prefix}.report.txt \\
        --abundance ${prefix}.abundance.tsv \\
        ${candidates} \\
        ${reads_out} \\
        -t ${task.cpus} \\
        --gpus ${gpus} \\
        ${args}
    """

    stub:
    def prefix = task.ext.prefix ?: "${meta.id}"
    def format = [reads].flatten().every { it.name =~ /\.(fa|fasta|fna|fas)(\.(gz|bz2|xz|zst))?$/ } ? 'fasta' : 'fastq'
    def mates = meta.single_end ? [''] : ['_1', '_2']
    def saved_reads = ['classified', 'unclassified'].collectMany { kind -> mates.collect { m -> "${prefix}.${kind}${m}.${format}.gz" } }
    def gzipped = (["${prefix}.kraken.gz"] + (save_candidates ? ["${prefix}.cand.gz"] : []) + (save_reads ? saved_reads : [])).join(' ')
    """
    echo -n | gzip | tee ${gzipped} > /dev/null
    touch ${prefix}.report.txt ${prefix}.abundance.tsv
    """
}
