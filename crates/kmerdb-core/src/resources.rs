//! Process and machine resource figures: peak resident memory for summaries, and the memory and
//! disk space a build can plan with.

/// Peak resident set size of this process in bytes (Linux `VmHWM`), if the system reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Current resident set size of this process in bytes (Linux `VmRSS`).
pub fn current_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Memory the system could give this process without swapping (Linux `MemAvailable`), if known.
pub fn available_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes an unprivileged process can still write to the file system holding `dir`.
pub fn free_disk_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let s = rustix::fs::statvfs(dir)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

/// `1.23 GB`-style sizes (decimal units, as `ls -lh --si` and most benchmark tables use).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{v:.2} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_and_disk_are_reported_on_linux() {
        assert!(super::available_memory_bytes().is_some_and(|b| b > 0));
        assert!(super::free_disk_bytes(std::path::Path::new(".")).unwrap() > 0);
    }

    #[test]
    fn human_bytes() {
        assert_eq!(super::human_bytes(999), "999 B");
        assert_eq!(super::human_bytes(1_234_000), "1.23 MB");
    }

    #[test]
    fn peak_rss_is_reported_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(super::peak_rss_bytes().unwrap() > 0);
        }
    }
}
