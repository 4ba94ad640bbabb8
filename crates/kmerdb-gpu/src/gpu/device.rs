//! Choosing GPUs and holding what runs on one: context, stream, and the compiled kernels.

use crate::compute::GpuRequest;
use crate::gpu::{GpuError, kernels};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use std::sync::Arc;

/// One GPU, ready to run kmerdb's kernels.
pub struct Gpu {
    pub ordinal: usize,
    pub name: String,
    pub arch: String,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    /// Whether the kernels came from the on-disk cache.
    pub cached_kernels: bool,
}

/// Whether the CUDA driver library can be loaded (cudarc panics on first use otherwise).
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether an NVIDIA GPU is probably there, judged from device files alone (no driver call, which
/// takes a noticeable part of a small run): `/dev/nvidia0` or an entry under
/// `/proc/driver/nvidia/gpus`.
pub fn probably_present() -> bool {
    std::path::Path::new("/dev/nvidia0").exists()
        || std::fs::read_dir("/proc/driver/nvidia/gpus").is_ok_and(|mut d| d.next().is_some())
}

/// Visible GPUs, 0 when there is no driver.
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map(|n| n as usize).unwrap_or(0)
}

/// The GPUs `request` names; empty means the CPU. `All` on a machine without GPUs is the CPU;
/// an explicit GPU that is not there is an error.
pub fn select(request: &GpuRequest) -> Result<Vec<Gpu>, GpuError> {
    let ordinals: Vec<usize> = match request {
        GpuRequest::None => return Ok(Vec::new()),
        GpuRequest::All => {
            let n = device_count();
            if n == 0 {
                log::debug!("no GPU found (no CUDA driver or no device): running on the CPU");
                return Ok(Vec::new());
            }
            (0..n).collect()
        }
        GpuRequest::List(ids) => {
            let n = device_count();
            for &id in ids {
                if id >= n {
                    let reason = if !driver_present() {
                        "no CUDA driver is installed".to_string()
                    } else {
                        format!("this machine has {n} GPU(s)")
                    };
                    return Err(GpuError::Missing { wanted: id, reason });
                }
            }
            ids.clone()
        }
    };
    // Each GPU's context and kernels at once: a context takes about 0.3 s to make.
    let opened: Result<Vec<Gpu>, GpuError> = std::thread::scope(|scope| {
        let opening: Vec<_> = ordinals.into_iter().map(|o| scope.spawn(move || Gpu::open(o))).collect();
        opening.into_iter().map(|o| o.join().expect("opening a GPU does not panic")).collect()
    });
    match (opened, request) {
        // `all` means "GPUs if they work": a GPU that cannot be used is a warning there.
        (Err(e), GpuRequest::All) => {
            log::warn!("GPU unusable ({}): running on the CPU", crate::errors::chain(&e));
            Ok(Vec::new())
        }
        (result, _) => result,
    }
}

/// How the summary lines name `gpus` (not empty): `GPU 0 (NVIDIA H100 80GB HBM3)`,
/// `GPUs 0,1 (…)`.
pub fn describe(gpus: &[Gpu]) -> String {
    // A GPU with several streams is several handles of one ordinal.
    let mut ids: Vec<String> = Vec::new();
    for g in gpus {
        if !ids.contains(&g.ordinal.to_string()) {
            ids.push(g.ordinal.to_string());
        }
    }
    let which = if ids.len() == 1 { "GPU" } else { "GPUs" };
    format!("{which} {} ({})", ids.join(","), gpus[0].name)
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        let ctx = CudaContext::new(ordinal)?;
        // cudarc's per-allocation events order each buffer's uses across streams; kmerdb orders
        // them itself instead (they cost a record and a wait per launch argument).
        // SAFETY: work on a GPU's other streams (the build's copy, split and receive streams, the
        // index's and peers' copies) waits for an event recorded after the writes it reads
        // (`record_event` then `wait`) or for a synchronize, and a buffer is freed only on the
        // stream of its last use or after the streams using it were synchronized.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability()?;
        let arch = format!("sm_{major}{minor}");
        let (cubin, cached_kernels) = kernels::cubin(&arch)?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        let name = ctx.name()?;
        let stream = ctx.default_stream();
        Ok(Self { ordinal, name, arch, ctx, stream, module, cached_kernels })
    }

    /// Another handle of this GPU whose work goes on a stream of its own (non-blocking: it
    /// neither waits for nor holds up the default stream), sharing the context and kernels.
    pub fn with_own_stream(&self) -> Result<Self, GpuError> {
        Ok(Self {
            ordinal: self.ordinal,
            name: self.name.clone(),
            arch: self.arch.clone(),
            ctx: self.ctx.clone(),
            stream: self.ctx.new_stream()?,
            module: self.module.clone(),
            cached_kernels: self.cached_kernels,
        })
    }

    pub fn function(&self, name: &str) -> Result<CudaFunction, GpuError> {
        Ok(self.module.load_function(name)?)
    }

    /// Free and total device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        Ok(self.ctx.mem_get_info()?)
    }

    /// Streaming multiprocessors, for grid sizes.
    pub fn multiprocessors(&self) -> u32 {
        self.ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map(|n| n as u32)
            .unwrap_or(80)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!("all".parse::<GpuRequest>(), Ok(GpuRequest::All));
        assert_eq!("none".parse::<GpuRequest>(), Ok(GpuRequest::None));
        assert_eq!("0,2".parse::<GpuRequest>(), Ok(GpuRequest::List(vec![0, 2])));
        assert!("x".parse::<GpuRequest>().is_err());
    }

    /// On a machine without a GPU, `all` falls back to the CPU and an explicit GPU is an error.
    #[test]
    fn missing_gpus() {
        if device_count() > 0 {
            return;
        }
        assert!(select(&GpuRequest::All).unwrap().is_empty());
        let err = select(&GpuRequest::List(vec![0])).err().unwrap().to_string();
        assert!(err.contains("GPU 0"), "{err}");
    }
}
