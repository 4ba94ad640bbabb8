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

/// Settings of the GPU build table a caller may force (tests: tiny tables; benchmarks: group sizes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuBuildOptions {
    pub key_slots: Option<u64>,
    pub pool_slots: Option<u64>,
    pub group: Option<u32>,
}
