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
    /// Threads probing the table together: 1, 2, 4, 8, 16 or 32.
    pub group: Option<u32>,
}
