//! The CUDA sources in `cuda/`, embedded in the binary, and their compilation by NVRTC to a cubin
//! for the device's exact architecture, cached on disk so that a second run compiles nothing.
//!
//! NVRTC has no standard headers and our sources include only each other, so the includes are
//! resolved here: each `#include "x.cuh"` is replaced by the file, once.

use crate::gpu::GpuError;
use std::path::PathBuf;

/// Every kernel source file, by the name it is included as.
const FILES: [(&str, &str); 12] = [
    ("common.cuh", include_str!("../../../../cuda/common.cuh")),
    ("sketch.cuh", include_str!("../../../../cuda/sketch.cuh")),
    ("bucket_list.cuh", include_str!("../../../../cuda/bucket_list.cuh")),
    ("limits.cuh", include_str!("../../../../cuda/limits.cuh")),
    ("condense.cuh", include_str!("../../../../cuda/condense.cuh")),
    ("build.cu", include_str!("../../../../cuda/build.cu")),
    ("classify.cuh", include_str!("../../../../cuda/classify.cuh")),
    ("hit_list.cuh", include_str!("../../../../cuda/hit_list.cuh")),
    ("protein.cuh", include_str!("../../../../cuda/protein.cuh")),
    ("slab_hash.cuh", include_str!("../../../../cuda/slab_hash.cuh")),
    ("update.cuh", include_str!("../../../../cuda/update.cuh")),
    ("kmerdb.cu", include_str!("../../../../cuda/kmerdb.cu")),
];

/// The translation unit NVRTC compiles: `kmerdb.cu` with its includes expanded.
pub fn source() -> String {
    expanded("kmerdb.cu")
}

/// The benchmark's kernels (`limits.cuh`: the hardware limits BENCHMARKS.md quotes), a unit of
/// their own that only `kmerdb-gpu-bench` compiles: `kmerdb` neither compiles nor caches them.
pub fn limits_source() -> String {
    expanded("limits.cuh")
}

/// The slab hash table's kernels (`slab_hash.cuh`), a unit of their own: no command uses the
/// table (its tests and `kmerdb-gpu-bench` do), so `kmerdb`'s kernels do not carry it. Compiled
/// and cached on first use by [`cubin_of`].
pub(crate) fn slab_source() -> String {
    expanded("slab_hash.cuh")
}

fn expanded(name: &str) -> String {
    let mut out = String::new();
    let mut seen = Vec::new();
    expand(name, &mut out, &mut seen);
    out
}

fn expand(name: &str, out: &mut String, seen: &mut Vec<String>) {
    if seen.iter().any(|s| s == name) {
        return;
    }
    seen.push(name.to_string());
    let text =
        FILES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).unwrap_or_else(|| {
            panic!("cuda/{name} is included but not embedded in crates/kmerdb-gpu/src/gpu/kernels.rs")
        });
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("#include \"") {
            expand(rest.trim_end_matches('"'), out, seen);
        } else if t != "#pragma once" {
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// NVRTC's version, as (major, minor).
pub(crate) fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| GpuError::Nvrtc { log: format!("{e:?}") })?;
    Ok((major, minor))
}

/// Whether libnvrtc can be loaded (checked before any call, which would otherwise panic).
pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles the kernels with NVRTC for `arch` (e.g. `sm_90`: a cubin; `compute_90`: PTX).
pub fn compile(arch: &str) -> Result<Vec<u8>, GpuError> {
    compile_source(&source(), "kmerdb.cu", arch)
}

/// An NVRTC program, destroyed when dropped (on every error path too).
struct Program(cudarc::nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `create_program` and is destroyed only here.
        let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
    }
}

/// Compiles the translation unit `source` (named `name` in NVRTC's messages) for `arch`.
pub fn compile_source(source: &str, name: &str, arch: &str) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::{result, sys};
    if !nvrtc_present() {
        return Err(GpuError::NoNvrtc);
    }
    let src = std::ffi::CString::new(source).expect("kernel sources hold no NUL");
    let name = std::ffi::CString::new(name).expect("no NUL");
    let nv = |e: cudarc::nvrtc::result::NvrtcError| GpuError::Nvrtc { log: format!("{e:?}") };
    let prog = Program(result::create_program(&src, Some(&name)).map_err(nv)?);
    let options = [format!("--gpu-architecture={arch}"), "-std=c++17".into(), "-lineinfo".into()];
    // SAFETY: `prog` is a live program; options are valid strings.
    if unsafe { result::compile_program(prog.0, &options) }.is_err() {
        // SAFETY: the program exists; its log is readable after a failed compile.
        let log = unsafe { result::get_program_log(prog.0) }.map(|l| {
            let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        });
        return Err(GpuError::Nvrtc { log: log.unwrap_or_else(|e| format!("{e:?}")) });
    }
    if arch.starts_with("sm_") {
        let mut size = 0usize;
        // SAFETY: the program compiled; a size query, then a copy into a buffer of that size.
        unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }.result().map_err(nv)?;
        let mut buf = vec![0u8; size];
        // SAFETY: as above.
        unsafe { sys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr().cast()) }.result().map_err(nv)?;
        Ok(buf)
    } else {
        // SAFETY: the program compiled.
        Ok(unsafe { result::get_ptx(prog.0) }.map_err(nv)?.iter().map(|&c| c as u8).collect())
    }
}

/// Where compiled kernels are cached: `$KMERDB_CACHE_DIR`, else `$XDG_CACHE_HOME/kmerdb`, else
/// `~/.cache/kmerdb`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("KMERDB_CACHE_DIR") {
        return Some(d.into());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("kmerdb"))
}

/// Whether compiled kernels of this source are in the cache (for some architecture): a first
/// use on a machine compiles them, which takes seconds.
pub fn cached() -> bool {
    let prefix = format!("kernels-{:016x}-", xxhash_rust::xxh3::xxh3_64(source().as_bytes()));
    let Some(dir) = cache_dir() else { return false };
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(&prefix)))
        .unwrap_or(false)
}

/// The cubin for `arch`, from the cache (key: source hash, architecture, NVRTC version) or compiled
/// and cached. Returns it and whether it came from the cache. A cache that cannot be written is
/// only a slower start.
pub fn cubin(arch: &str) -> Result<(Vec<u8>, bool), GpuError> {
    cubin_of(&source(), "kmerdb.cu", arch)
}

/// [`cubin`] of another translation unit (`source`, named `name` in NVRTC's messages).
pub(crate) fn cubin_of(source: &str, name: &str, arch: &str) -> Result<(Vec<u8>, bool), GpuError> {
    let (major, minor) = nvrtc_version()?;
    let key = format!("{:016x}-{arch}-nvrtc{major}.{minor}", xxhash_rust::xxh3::xxh3_64(source.as_bytes()));
    let path = cache_dir().map(|d| d.join(format!("kernels-{key}.cubin")));
    if let Some(p) = &path {
        if let Ok(bytes) = std::fs::read(p) {
            return Ok((bytes, true));
        }
    }
    let bytes = compile_source(source, name, arch)?;
    if let Some(p) = &path {
        let stored = p.parent().map(std::fs::create_dir_all).transpose().ok().and_then(|_| {
            let dir = p.parent()?;
            let mut tmp = tempfile::NamedTempFile::new_in(dir).ok()?;
            std::io::Write::write_all(&mut tmp, &bytes).ok()?;
            tmp.persist(p).ok()
        });
        if stored.is_none() {
            log::debug!("could not cache compiled kernels in {}", p.display());
        }
    }
    Ok((bytes, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_are_expanded_once() {
        let s = source();
        assert!(!s.lines().any(|l| l.trim_start().starts_with("#include")));
        assert_eq!(s.matches("typedef unsigned int u32;").count(), 1);
        assert!(
            s.contains("ENTRY_POINTS(32)")
                && s.contains("__global__ void fill_lists")
                && s.contains("void select_pass")
        );
        assert!(!s.contains("slab_apply"), "the slab table's kernels are a unit of their own");
        assert!(slab_source().contains("void slab_apply"));
    }

    /// The constants both sides define (`#define` in `cuda/`, `const` in Rust) agree.
    #[test]
    fn constants_shared_with_cuda_agree() {
        let text = source() + &limits_source() + &slab_source();
        let defined = |name: &str| -> u64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("cuda/ defines no {name}"));
            let value = line.split_whitespace().nth(2).expect("a value").trim_end_matches(['u', 'l', 'U', 'L']);
            match value.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
                None => value.parse().unwrap(),
            }
        };
        use crate::index::{bcht, locations};
        let empty = bcht::EMPTY_SLOT;
        use crate::slab_hash as slab;
        let pairs: [(&str, u64); 27] = [
            ("NO_FEATURE", crate::sketch::NO_FEATURE.into()),
            ("MAX_SKETCH", crate::sketch::MAX_SKETCH_SIZE.into()),
            ("MAX_SPLIT_GPUS", crate::gpu::passes::MAX_GPUS as u64),
            ("MAX_SHARDS", 1 << crate::index::format::DEFAULT_SHARD_BITS),
            ("STATUS_POOL_EXHAUSTED", crate::gpu::table::STATUS_POOL_EXHAUSTED.into()),
            ("STATUS_PROBE_LIMIT", crate::gpu::table::STATUS_PROBE_LIMIT.into()),
            ("STATUS_POOL_OFFSET", crate::gpu::table::STATUS_POOL_OFFSET.into()),
            ("STATUS_MAX_BUCKETS", crate::gpu::table::STATUS_MAX_BUCKETS.into()),
            ("INLINE_FLAG", locations::INLINE_FLAG.into()),
            ("PAD_WORDS", locations::PAD_WORDS as u64),
            ("BUCKET_SLOTS", bcht::BUCKET_SLOTS as u64),
            ("MAX_CLADES", crate::gpu::classify::MAX_CLADES as u64),
            ("MAX_CODE", locations::MAX_CODE),
            ("UNKNOWN_CODE_BITS", crate::index::stored_shard::UNKNOWN_CODE_BITS.into()),
            // A slot is (key, value) as two u32, read on the device as one little-endian u64.
            ("EMPTY_SLOT", u64::from(empty.value) << 32 | u64::from(empty.key)),
            ("SLAB_WORDS", slab::SLAB_WORDS as u64),
            ("SLAB_PAIRS", slab::SLAB_PAIRS as u64),
            ("SLAB_NEXT_WORD", slab::SLAB_NEXT_WORD as u64),
            ("SLAB_EMPTY", slab::SLAB_EMPTY.into()),
            ("SLAB_DELETED", slab::SLAB_DELETED.into()),
            ("SLAB_NULL", slab::SLAB_NULL.into()),
            ("SLAB_BLOCK_SLABS", slab::SLAB_BLOCK_SLABS as u64),
            ("SLAB_MAX_ATTEMPTS", slab::SLAB_MAX_ATTEMPTS.into()),
            ("STATUS_SLAB_POOL_EXHAUSTED", slab::STATUS_SLAB_POOL_EXHAUSTED.into()),
            ("STATUS_SLAB_BAD_PAIR", slab::STATUS_SLAB_BAD_PAIR.into()),
            ("STATUS_SLAB_BAD_OP", slab::STATUS_SLAB_BAD_OP.into()),
            // The even words below word 30 hold keys.
            ("SLAB_KEY_LANES", (0..slab::SLAB_PAIRS).map(|p| 1u64 << (2 * p)).sum()),
        ];
        for (name, rust) in pairs {
            assert_eq!(defined(name), rust, "cuda/'s {name} differs from the Rust constant");
        }
    }

    /// Every kernel compiles. CI installs NVRTC (`pip install nvidia-cuda-nvrtc==13.0.88`) and
    /// sets KMERDB_REQUIRE_NVRTC=1, so a kernel that does not compile fails CI; elsewhere the test
    /// says it could not run.
    #[test]
    fn kernels_compile_with_nvrtc() {
        if !nvrtc_present() {
            assert!(
                std::env::var_os("KMERDB_REQUIRE_NVRTC").is_none(),
                "KMERDB_REQUIRE_NVRTC is set but libnvrtc cannot be loaded (LD_LIBRARY_PATH?)"
            );
            eprintln!("libnvrtc not found: kernel compilation NOT checked");
            return;
        }
        for arch in ["sm_90", "compute_90", "sm_80"] {
            match compile(arch) {
                Ok(bytes) => assert!(bytes.len() > 1000, "{arch}: {} bytes", bytes.len()),
                Err(e) => panic!("{arch}: {e}"),
            }
            match compile_source(&limits_source(), "limits.cuh", arch) {
                Ok(bytes) => assert!(bytes.len() > 1000, "{arch}, the benchmark's kernels: {} bytes", bytes.len()),
                Err(e) => panic!("{arch}, the benchmark's kernels: {e}"),
            }
            match compile_source(&slab_source(), "slab_hash.cuh", arch) {
                Ok(bytes) => assert!(bytes.len() > 1000, "{arch}, the slab table's kernels: {} bytes", bytes.len()),
                Err(e) => panic!("{arch}, the slab table's kernels: {e}"),
            }
        }
        assert!(!source().contains("limit_cas"), "the benchmark's kernels are not kmerdb's");
    }
}
