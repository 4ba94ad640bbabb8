// Builds a kmerdb index (or one part of a partitioned index: ext.args '--partition I/N').
process KMERDB_BUILD {
    tag "$meta.id"
    label 'process_high'

    conda "${moduleDir}/environment.yml"

    input:
    tuple val(meta), path(genomes)
    path taxonomy
    path seqid2taxid

    output:
    tuple val(meta), path("*.db"), emit: db
    tuple val("${task.process}"), val('kmerdb'), eval('kmerdb --version | sed "s/^kmerdb //"'), topic: versions, emit: versions_kmerdb

    when:
    task.ext.when == null || task.ext.when

    script:
    def args = task.ext.args ?: ''
    def prefix = task.ext.prefix ?: "${meta.id}"
    """
    kmerdb build \\
        ${genomes} \\
        --taxonomy ${taxonomy} \\
        --seqid2taxid ${seqid2taxid} \\
        -d ${prefix}.db \\
        -t ${task.cpus} \\
        ${args}
    """

    stub:
    def prefix = task.ext.prefix ?: "${meta.id}"
    """
    touch ${prefix}.db
    """
}
