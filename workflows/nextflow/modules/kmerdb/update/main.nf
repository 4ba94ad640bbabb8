// Updates a kmerdb index without a rebuild: adds genomes and removes targets, writing an index with
// the sections a fresh build of the result would have (only the provenance differs).
process KMERDB_UPDATE {
    tag "$meta.id"
    label 'process_high'

    conda "${moduleDir}/environment.yml"

    input:
    tuple val(meta), path(db)
    path genomes
    path remove_targets
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
    def add = genomes ? "--add ${genomes}" : ''
    def remove = remove_targets ? "--remove-targets ${remove_targets}" : ''
    if ("${db}" == "${prefix}.db") error "Input and output names are the same, set prefix in module configuration to disambiguate!"
    """
    kmerdb update \\
        -d ${db} \\
        -o ${prefix}.db \\
        ${add} \\
        ${remove} \\
        --taxonomy ${taxonomy} \\
        --seqid2taxid ${seqid2taxid} \\
        -t ${task.cpus} \\
        ${args}
    """

    stub:
    def prefix = task.ext.prefix ?: "${meta.id}"
    """
    touch ${prefix}.db
    """
}
