//! Where work runs: the validated `--gpus` choice and GPU build settings. Not behind the `gpu`
//! feature, so that configs look the same in every build.

/// What `--gpus` asks for, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRequest {
    /// `none`: the CPU.
    None,
    /// `all`: every visible GPU, or the CPU when there is none.
    All,
    /// Exactly these device ordinals; any missing one is an error.
    List(Vec<usize>),
}

impl std::str::FromStr for GpuRequest {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "cpu" => Ok(GpuRequest::None),
            "all" => Ok(GpuRequest::All),
            list => {
                let ids: Result<Vec<usize>, _> = list.split(',').map(|x| x.trim().parse::<usize>()).collect();
                match ids {
                    Ok(ids) if !ids.is_empty() => Ok(GpuRequest::List(ids)),
                    _ => Err(format!("--gpus {list}: expected all, none, or a list of GPU numbers such as 0,1")),
                }
            }
        }
    }
}

/// As `--gpus` takes it (`none`, `all`, `0,1`): messages name a request as the user wrote it.
impl std::fmt::Display for GpuRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuRequest::None => f.write_str("none"),
            GpuRequest::All => f.write_str("all"),
            GpuRequest::List(ids) => {
                let ids: Vec<String> = ids.iter().map(usize::to_string).collect();
                f.write_str(&ids.join(","))
            }
        }
    }
}

/// Settings of the GPU build a caller may force (tests: many passes, pairs kept off the GPU or
/// spilled to disk; benchmarks: group sizes). `None`: chosen from the GPUs' and the host's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuBuildOptions {
    /// At most this many values per GPU in one pass.
    pub pass_values: Option<u64>,
    /// Bytes of pairs each GPU keeps between reading and the passes (the rest go to host memory).
    pub device_pair_bytes: Option<u64>,
    /// Bytes of pairs host memory keeps (the rest go to spill files in the build's temporary
    /// folder).
    pub host_pair_bytes: Option<u64>,
    /// Threads probing the table together.
    pub group: Option<ProbeGroup>,
}

/// Threads probing the GPU table for one key together (COPS): 1, 2, 4, 8, 16 or 32, the sizes
/// that divide a warp and that the kernels are compiled for (`insert_pairs_g{N}`). Made only by
/// [`ProbeGroup::new`], so a table is never asked for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeGroup(u32);

impl ProbeGroup {
    /// Every size there is a kernel for.
    pub const ALL: [ProbeGroup; 6] =
        [ProbeGroup(1), ProbeGroup(2), ProbeGroup(4), ProbeGroup(8), ProbeGroup(16), ProbeGroup(32)];
    /// The default: 4 threads a key (bench/results/HISTORY.md, "GPU build").
    pub const DEFAULT: ProbeGroup = ProbeGroup(4);

    /// `threads` as a group size, if it is one of [`ProbeGroup::ALL`].
    pub const fn new(threads: u32) -> Option<ProbeGroup> {
        if threads.is_power_of_two() && threads <= 32 { Some(ProbeGroup(threads)) } else { None }
    }

    /// The number of threads.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for ProbeGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::str::FromStr for ProbeGroup {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().ok().and_then(ProbeGroup::new).ok_or_else(|| format!("{s:?} is not 1, 2, 4, 8, 16 or 32"))
    }
}

#[cfg(test)]
mod probe_group_tests {
    use super::ProbeGroup;

    #[test]
    fn only_warp_dividing_sizes_are_groups() {
        let made: Vec<u32> = (0..=64).filter_map(ProbeGroup::new).map(ProbeGroup::get).collect();
        assert_eq!(made, [1, 2, 4, 8, 16, 32]);
        assert_eq!(ProbeGroup::ALL.map(ProbeGroup::get), [1, 2, 4, 8, 16, 32]);
        assert_eq!("16".parse::<ProbeGroup>().unwrap().get(), 16);
        let err = "3".parse::<ProbeGroup>().unwrap_err();
        assert!(err.contains("\"3\" is not 1, 2, 4, 8, 16 or 32"), "{err}");
        assert_eq!(format!("{:>2}", ProbeGroup::DEFAULT), " 4");
    }
}

#[cfg(test)]
mod gpu_request_tests {
    use super::GpuRequest;

    /// A request reads back as the user wrote it (what messages quote) and parses again to itself.
    #[test]
    fn a_request_is_shown_as_gpus_takes_it() {
        for (text, shown) in
            [("none", "none"), ("cpu", "none"), ("all", "all"), ("0", "0"), ("0,1", "0,1"), ("2, 3", "2,3")]
        {
            let request: GpuRequest = text.parse().expect("valid");
            assert_eq!(request.to_string(), shown);
            assert_eq!(shown.parse::<GpuRequest>().expect("valid"), request);
        }
    }
}
