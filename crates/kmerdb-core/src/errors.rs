//! How an error reads: its own message, then each cause's, joined by ": ".
//!
//! An error's message says what failed (which file, which record); its cause, the `source()`,
//! says why, and is not repeated in the message. What is printed or logged is the whole chain.

/// `e`'s message followed by those of its causes.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}")]
    struct Outer {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn the_chain_names_the_file_then_the_cause() {
        let e = Outer { path: "a.fq".into(), source: std::io::Error::other("disk on fire") };
        assert_eq!(super::chain(&e), "reading a.fq: disk on fire");
    }
}
