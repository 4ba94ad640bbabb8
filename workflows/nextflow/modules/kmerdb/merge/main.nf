// Joins a sample's candidates from every part of a partitioned index into the outputs one index of
// all the genomes would give.
// The Kraken report is `PREFIX.report.txt`, not `.kreport`: MultiQC's default fn_clean_exts strip
// `.report` and `.txt`, so its sample names are the prefixes without an extra_fn_clean_exts.
process KMERDB_MERGE {
    tag "$meta.id"
    label 'process_low'

    conda "${moduleDir}/environment.yml"

    input:
    tuple val(meta), path(candidates)

    output:
    tuple val(meta), path("*.kraken.gz"), emit: kraken
    tuple val(meta), path("*.report.txt"), emit: report
    tuple val(meta), path("*.abundance.tsv"), emit: abundance
    tuple val(meta), path("*.cami"), emit: cami
    tuple val("${task.process}"), val('kmerdb'), eval('kmerdb --version | sed "s/^kmerdb //"'), topic: versions, emit: versions_kmerdb

    when:
    task.ext.when == null || task.ext.when

    script:
    def args = task.ext.args ?: ''
    def prefix = task.ext.prefix ?: "${meta.id}"
    """
    kmerdb merge \\
        ${candidates} \\
        --sample ${meta.id} \\
        -o ${prefix}.kraken.gz \\
        --report ${prefix}.report.txt \\
        --abundance ${prefix}.abundance.tsv \\
        --cami ${prefix}.cami \\
        ${args}
    """

    stub:
    def prefix = task.ext.prefix ?: "${meta.id}"
    """
    echo -n | gzip > ${prefix}.kraken.gz
    touch ${prefix}.report.txt ${prefix}.abundance.tsv ${prefix}.cami
    """
}
