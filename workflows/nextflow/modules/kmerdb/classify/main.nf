// Classifies a sample's reads against a kmerdb index: per-read output, kreport, abundances and,
// against a part of a partitioned index, the candidates that KMERDB_MERGE joins.
process KMERDB_CLASSIFY {
    tag "$meta.id"
    label 'process_high'

    conda "${moduleDir}/environment.yml"

    input:
    tuple val(meta), path(reads)
    tuple val(meta2), path(db)

    output:
    tuple val(meta), path("*.kraken.gz"), emit: kraken
    tuple val(meta), path("*.kreport"), emit: report
    tuple val(meta), path("*.abundance.tsv"), emit: abundance
    tuple val(meta), path("*.cand.gz"), emit: candidates
    tuple val("${task.process}"), val('kmerdb'), eval('kmerdb --version | sed "s/^kmerdb //"'), topic: versions, emit: versions_kmerdb

    when:
    task.ext.when == null || task.ext.when

    script:
    def args = task.ext.args ?: ''
    def prefix = task.ext.prefix ?: "${meta.id}"
    def input = meta.single_end ? "${reads}" : "-1 ${reads[0]} -2 ${reads[1]}"
    """
    kmerdb classify \\
        -d ${db} \\
        ${input} \\
        -o ${prefix}.kraken.gz \\
        --report ${prefix}.kreport \\
        --abundance ${prefix}.abundance.tsv \\
        --candidates-out ${prefix}.cand.gz \\
        -t ${task.cpus} \\
        ${args}
    """

    stub:
    def prefix = task.ext.prefix ?: "${meta.id}"
    """
    echo -n | gzip > ${prefix}.kraken.gz
    echo -n | gzip > ${prefix}.cand.gz
    touch ${prefix}.kreport ${prefix}.abundance.tsv
    """
}
