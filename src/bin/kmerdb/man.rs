//! The man pages (`kmerdb manpages DIR`), from the same definitions as `--help`.

use crate::args::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;

/// The man pages of the visible commands, from the same definitions as `--help`.
pub fn write(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut cmd = Cli::command();
    cmd.build();
    let page = |cmd: clap::Command, name: String, extra: &str| -> Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut roff = Vec::new();
        clap_mangen::Man::new(cmd).title(name.to_uppercase()).render(&mut roff)?;
        roff.extend_from_slice(extra.as_bytes());
        std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))
    };
    let visible = |c: &clap::Command| !c.is_hide_set() && c.get_name() != "help";
    for sub in cmd.get_subcommands().filter(|s| visible(s)) {
        let name = format!("kmerdb-{}", sub.get_name());
        // A command's own subcommands (`download taxonomy`) get pages of their own too.
        for nested in sub.get_subcommands().filter(|s| visible(s)) {
            let name = format!("{name}-{}", nested.get_name());
            let bin = format!("kmerdb {} {}", sub.get_name(), nested.get_name());
            page(nested.clone().name(name.clone()).bin_name(bin).version(env!("CARGO_PKG_VERSION")), name, "")?;
        }
        let sub = sub.clone().name(name.clone()).bin_name(name.replace('-', " ")).version(env!("CARGO_PKG_VERSION"));
        page(sub, name, "")?;
    }
    page(cmd.clone(), "kmerdb".into(), MAN_EXTRA)
}

/// Sections of kmerdb.1 that clap's definitions do not hold (roff).
const MAN_EXTRA: &str = r#".SH "EXIT STATUS"
0 on success; 1 on any error (the message names the file and record); 2 on bad usage, such as an
output that names an input or another output; 128 + N when signal N ended the run (130 after
Ctrl\-C), after removing the run's temporary files.
.SH ENVIRONMENT
.TP
\fBKMERDB_DB\fR
The index when \fB\-d\fR is not given (default kmerdb.db).
.TP
\fBKMERDB_CACHE_DIR\fR
Where compiled GPU kernels are cached (default ~/.cache/kmerdb).
.TP
\fBSOURCE_DATE_EPOCH\fR
The build date recorded in an index, for reproducible builds.
.SH "SEE ALSO"
\fBkmerdb\-build\fR(1), \fBkmerdb\-classify\fR(1), \fBkmerdb\-merge\fR(1), \fBkmerdb\-info\fR(1)
"#;
