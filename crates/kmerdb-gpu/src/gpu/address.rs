//! Device addresses that carry the borrow of the buffer they point into. Kernels take their
//! arrays through `#[repr(C)]` argument structs (`TableArgs`, `IndexArgs`, ...); their address
//! fields are [`DevAddr`]s, so that the borrow checker keeps every buffer a struct points into
//! alive, and not mutably borrowed on the host, for as long as the struct exists. Addresses
//! passed to kernels on their own, and to the copies of `gpu::pinned` and `gpu::multi`, are
//! `DevAddr`s too.
//!
//! What the lifetime does not cover: a borrow ends once a launch or copy is queued, not when the
//! GPU has run it. A `CudaSlice` is freed on the stream it was allocated on, after the work queued
//! there; work on any other stream is ordered by hand (events, synchronizes), as each launch's
//! `// SAFETY:` comment says. Nor does a `DevAddr` say whether the GPU reads or writes through
//! it: both happen in `unsafe` launches.
//!
//! Addresses stored as data in device memory (the per-shard tables of `IndexArgs`, which point
//! into the index's shard buffers) are bare `u64`s, taken with [`DevAddr::raw`]: no type follows
//! them onto the GPU, and their buffers are kept alive by whoever owns them (see the uses).

use crate::gpu::Gpu;
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr};
use std::marker::PhantomData;

/// An address the GPU can use (device memory, or pinned host memory under unified addressing),
/// valid for `'a`: made from a borrow of the buffer it points into. A `u64` in memory
/// (`repr(transparent)`), so it takes a bare address's place in a kernel struct without changing
/// its layout.
///
/// An address cannot outlive its buffer:
///
/// ```compile_fail
/// use kmerdb_gpu::gpu::{Gpu, address::DevAddr};
/// fn dangling(gpu: &Gpu) -> DevAddr<'static> {
///     let buffer = gpu.stream.alloc_zeros::<u32>(1).unwrap();
///     DevAddr::of(gpu, &buffer)
/// }
/// ```
///
/// nor its buffer be written on the host while the address is held:
///
/// ```compile_fail
/// use kmerdb_gpu::gpu::{Gpu, address::DevAddr};
/// fn overwritten(gpu: &Gpu) {
///     let mut buffer = gpu.stream.alloc_zeros::<u32>(1).unwrap();
///     let addr = DevAddr::of(gpu, &buffer);
///     gpu.stream.memcpy_htod(&[1u32], &mut buffer).unwrap();
///     println!("{addr:?}");
/// }
/// ```
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevAddr<'a> {
    addr: u64,
    _borrow: PhantomData<&'a ()>,
}

// SAFETY: a `u64` (repr(transparent)), passed to a kernel as the pointer or `unsigned long long`
// it stands for; the lifetime marker has no size.
unsafe impl DeviceRepr for DevAddr<'_> {}
const _: () = assert!(std::mem::size_of::<DevAddr>() == 8);

impl<'a> DevAddr<'a> {
    /// The address of `s`'s first item, taken for `gpu`'s stream (cudarc's event tracking is off,
    /// see `gpu::device`, so this orders nothing: it only reads the address).
    pub fn of<T>(gpu: &Gpu, s: &'a CudaSlice<T>) -> Self {
        let (addr, _sync) = s.device_ptr(&gpu.stream);
        Self { addr, _borrow: PhantomData }
    }

    /// The address of item `index` of `s` (`index == s.len()`: just past the end, for an empty
    /// range there).
    pub fn at<T>(gpu: &Gpu, s: &'a CudaSlice<T>, index: usize) -> Self {
        assert!(index <= s.len(), "item {index} of a device buffer of {}", s.len());
        let base = Self::of(gpu, s);
        Self { addr: base.addr + (index * std::mem::size_of::<T>()) as u64, _borrow: PhantomData }
    }

    /// An address that does not come from a `CudaSlice` (pinned host memory, see
    /// `gpu::pinned::HostBuffer::addr`).
    ///
    /// # Safety
    ///
    /// `addr` is an address the GPU can use, and the memory there stays allocated for all of
    /// `'a`: the caller ties `'a` to a borrow of whatever owns it.
    pub(crate) unsafe fn from_raw(addr: u64) -> Self {
        Self { addr, _borrow: PhantomData }
    }

    /// The bare address, for addresses stored as data in device memory, where no lifetime
    /// follows them (see the module's header).
    pub fn raw(self) -> u64 {
        self.addr
    }
}
