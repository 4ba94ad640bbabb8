//! The host side of the bucket-list multi-value table (`cuda/bucket_list.cuh`): allocation, the
//! status word, and the condense steps (collect keys, fill lists).

use crate::compute::ProbeGroup;
use crate::gpu::address::DevAddr;
use crate::gpu::{Gpu, GpuError};
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

/// Kernel view of a table; must match `struct Table` in `cuda/bucket_list.cuh`. It borrows the
/// table's buffers ([`BucketListTable::args`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TableArgs<'a> {
    keys: DevAddr<'a>,
    handles: DevAddr<'a>,
    pool: DevAddr<'a>,
    pool_top: DevAddr<'a>,
    status: DevAddr<'a>,
    lost: DevAddr<'a>,
    chunks: DevAddr<'a>,
    pool_capacity: u64,
    windows: u32,
    max_probes: u32,
    s0: u32,
    growth_num: u32,
    growth_den: u32,
    chunk: u32,
    max_threads: u32,
    _pad: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for TableArgs<'_> {}
// Kernels read it as `struct Table` (cuda/bucket_list.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<TableArgs>() == 96);

/// Kernel view of a target renumbering; must match `struct Remap` in `cuda/condense.cuh`. It
/// borrows the renumbering's buffer ([`DeviceRemap::args`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RemapArgs<'a> {
    remap: DevAddr<'a>,
    remap_len: u32,
    window_bits: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for RemapArgs<'_> {}
// Kernels read it as `struct Remap` (cuda/condense.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<RemapArgs>() == 16);

/// The keys of a table with kept values, on the device: `n` of each array's entries are used.
pub(crate) struct DeviceKeys {
    pub keys: CudaSlice<u32>,
    /// The key's slot in the table (where its list handle is).
    pub table_slots: CudaSlice<u32>,
    /// Values kept after renumbering.
    pub counts: CudaSlice<u32>,
    pub n: u64,
    /// The renumbering the values were counted with.
    pub remap: DeviceRemap,
}

/// A target renumbering on the device (see `cuda/condense.cuh`): each stored target's new
/// number, `remap_len` of them (none: values kept as stored), and the window bits of the values.
pub struct DeviceRemap {
    remap: CudaSlice<u32>,
    remap_len: u32,
    window_bits: u32,
}

impl DeviceRemap {
    /// The kernels' view of it, borrowing its buffer.
    pub fn args(&self, gpu: &Gpu) -> RemapArgs<'_> {
        RemapArgs { remap: DevAddr::of(gpu, &self.remap), remap_len: self.remap_len, window_bits: self.window_bits }
    }
}

/// Status bits, as in `cuda/bucket_list.cuh`.
pub const STATUS_POOL_EXHAUSTED: u32 = 1;
pub const STATUS_PROBE_LIMIT: u32 = 2;
pub(crate) const STATUS_POOL_OFFSET: u32 = 4;
pub(crate) const STATUS_MAX_BUCKETS: u32 = 8;

/// Shape of a table.
#[derive(Debug, Clone, Copy)]
pub struct TableConfig {
    /// Key slots (rounded up to a prime number of probing windows).
    pub key_slots: u64,
    /// 8-byte value slots in the pool (at most 2^32).
    pub pool_slots: u64,
    /// Threads probing together (COPS).
    pub group: ProbeGroup,
    /// Value slots of a key's first bucket, and the growth of later ones (numerator, denominator).
    pub first_bucket: u32,
    pub growth: (u32, u32),
    /// Probing windows visited before giving up on a key.
    pub max_probes: u32,
    /// Pool slots a thread takes at a time; room for one chunk per thread is added to the pool
    /// (0: no chunks, every bucket from the shared pointer, the pool exactly `pool_slots`).
    pub pool_chunk: u32,
}

impl TableConfig {
    pub fn new(key_slots: u64, pool_slots: u64) -> Self {
        Self {
            key_slots,
            pool_slots,
            group: ProbeGroup::DEFAULT,
            first_bucket: 2,
            growth: (3, 2),
            max_probes: 1000,
            pool_chunk: 64,
        }
    }

    /// Device bytes the table takes.
    pub fn bytes(&self) -> u64 {
        self.key_slots * 12 + self.pool_slots * 8 + 64
    }
}

/// What the status word and counters say after a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStatus {
    pub bits: u32,
    /// Values that could not be stored.
    pub lost: u64,
    /// Pool slots handed out (may pass the capacity when the pool ran out).
    pub pool_used: u64,
}

impl TableStatus {
    pub fn is_error(&self) -> bool {
        self.bits & (STATUS_POOL_EXHAUSTED | STATUS_PROBE_LIMIT | STATUS_POOL_OFFSET) != 0
    }

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (bit, what) in [
            (STATUS_POOL_EXHAUSTED, "value pool exhausted"),
            (STATUS_PROBE_LIMIT, "key table full (probe limit)"),
            (STATUS_POOL_OFFSET, "value pool beyond 2^32 slots"),
            (STATUS_MAX_BUCKETS, "a key reached the longest bucket chain"),
        ] {
            if self.bits & bit != 0 {
                parts.push(what);
            }
        }
        format!("{} ({} values not stored)", parts.join(", "), self.lost)
    }
}

/// One key of the table with the number of values kept after renumbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KeyList {
    pub key: u32,
    pub slot: u32,
    pub count: u32,
}

/// A bucket-list table on one GPU.
pub struct BucketListTable<'g> {
    gpu: &'g Gpu,
    config: TableConfig,
    windows: u32,
    keys: CudaSlice<u32>,
    handles: CudaSlice<u64>,
    pool: CudaSlice<u64>,
    /// pool_top, lost
    counters: CudaSlice<u64>,
    status: CudaSlice<u32>,
    /// Each thread's pool chunk between launches.
    chunks: CudaSlice<u64>,
    max_threads: u32,
    pool_capacity: u64,
}

fn is_prime(n: u64) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}

/// The most threads a launch of [`launch_config`] has.
pub(crate) fn max_threads(gpu: &Gpu) -> u32 {
    gpu.multiprocessors() * 32 * 256
}

/// Launch shape for `n` items: 256 threads a block, at most 32 blocks per multiprocessor.
pub fn launch_config(gpu: &Gpu, n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, gpu.multiprocessors() as u64 * 32) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// Sets every word of `words` to `value` (on the GPU's stream, without waiting).
pub(crate) fn fill_u32(gpu: &Gpu, words: &mut CudaSlice<u32>, value: u32) -> Result<(), GpuError> {
    let f = gpu.function("fill_u32")?;
    let n = words.len() as u64;
    let mut b = gpu.stream.launch_builder(&f);
    b.arg(words).arg(&n).arg(&value);
    // SAFETY: the kernel writes `n` words of `words`, which has `n` words.
    unsafe { b.launch(launch_config(gpu, n)) }?;
    Ok(())
}

impl<'g> BucketListTable<'g> {
    pub fn new(gpu: &'g Gpu, config: TableConfig) -> Result<Self, GpuError> {
        let group = u64::from(config.group.get());
        let mut windows = config.key_slots.div_ceil(group).max(2);
        while !is_prime(windows) {
            windows += 1;
        }
        let windows = u32::try_from(windows).map_err(|_| GpuError::TableFull {
            ordinal: gpu.ordinal,
            what: "more than 2^32 probing windows requested".into(),
            key_slots: config.key_slots,
            value_slots: config.pool_slots,
            advice: "build on several GPUs, or on the CPU (--gpus none)".into(),
        })?;
        let (free, _) = gpu.memory()?;
        let max_threads = max_threads(gpu);
        let pool_capacity = config.pool_slots + max_threads as u64 * config.pool_chunk as u64;
        let needed = windows as u64 * group * 12 + pool_capacity * 8 + max_threads as u64 * 16;
        if needed > free as u64 {
            return Err(GpuError::OutOfMemory { ordinal: gpu.ordinal, free, needed });
        }
        let slots = windows as usize * group as usize;
        let s = &gpu.stream;
        let keys = s.alloc_zeros::<u32>(slots)?;
        let handles = s.alloc_zeros::<u64>(slots)?;
        let pool = s.alloc_zeros::<u64>(pool_capacity.max(1) as usize)?;
        let counters = s.alloc_zeros::<u64>(2)?;
        let status = s.alloc_zeros::<u32>(1)?;
        let chunks = s.alloc_zeros::<u64>(2 * max_threads as usize)?;
        let mut table =
            Self { gpu, config, windows, keys, handles, pool, counters, status, chunks, max_threads, pool_capacity };
        table.empty_keys()?;
        Ok(table)
    }

    fn empty_keys(&mut self) -> Result<(), GpuError> {
        fill_u32(self.gpu, &mut self.keys, crate::sketch::NO_FEATURE)
    }

    /// Empties the table for the next round (see `gpu::build`).
    pub fn clear(&mut self) -> Result<(), GpuError> {
        self.empty_keys()?;
        let s = &self.gpu.stream;
        s.memset_zeros(&mut self.handles)?;
        s.memset_zeros(&mut self.counters)?;
        s.memset_zeros(&mut self.status)?;
        s.memset_zeros(&mut self.chunks)?;
        s.synchronize()?;
        Ok(())
    }

    /// Value slots the pool can still hand out for sure (thread chunks already taken count as used).
    pub fn pool_free(&self, status: &TableStatus) -> u64 {
        self.config.pool_slots.saturating_sub(status.pool_used)
    }

    /// Every (key, stored value) pair, in no particular order; values as stored (no renumbering).
    pub fn drain_pairs(&self) -> Result<(Vec<KeyList>, Vec<u64>), GpuError> {
        let (lists, remap) = self.collect(None)?;
        let values = self.fill(&lists, &remap, false)?;
        Ok((lists, values))
    }

    pub(crate) fn key_slots(&self) -> u64 {
        self.windows as u64 * u64::from(self.config.group.get())
    }

    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// The kernels' view of the table, borrowing its buffers.
    pub fn args(&self) -> TableArgs<'_> {
        let g = self.gpu;
        TableArgs {
            keys: DevAddr::of(g, &self.keys),
            handles: DevAddr::of(g, &self.handles),
            pool: DevAddr::of(g, &self.pool),
            pool_top: DevAddr::at(g, &self.counters, 0),
            status: DevAddr::of(g, &self.status),
            lost: DevAddr::at(g, &self.counters, 1),
            chunks: DevAddr::of(g, &self.chunks),
            pool_capacity: self.pool_capacity,
            windows: self.windows,
            max_probes: self.config.max_probes,
            s0: self.config.first_bucket,
            growth_num: self.config.growth.0,
            growth_den: self.config.growth.1,
            chunk: self.config.pool_chunk.max(1),
            max_threads: self.max_threads,
            _pad: 0,
        }
    }

    /// The error for a status word that says the table ran out of room, with `advice` on what to do.
    pub fn full(&self, status: &TableStatus, advice: &str) -> GpuError {
        GpuError::TableFull {
            ordinal: self.gpu.ordinal,
            what: status.describe(),
            key_slots: self.key_slots(),
            value_slots: self.config.pool_slots,
            advice: advice.into(),
        }
    }

    /// Waits for the table's work and reads its status word.
    pub fn status(&self) -> Result<TableStatus, GpuError> {
        let s = &self.gpu.stream;
        let bits = s.clone_dtoh(&self.status)?[0];
        let counters = s.clone_dtoh(&self.counters)?;
        Ok(TableStatus { bits, lost: counters[1], pool_used: counters[0] })
    }

    /// Inserts (key, value) pairs (the table tests' entry point; the build inserts from its fused
    /// kernel); keys and values of different lengths are an error.
    pub fn insert_pairs(&mut self, keys: &[u32], values: &[u64]) -> Result<(), GpuError> {
        if keys.len() != values.len() {
            let pairs = keys.len().max(values.len()) as u64;
            return Err(GpuError::PairCount { pairs, keys: keys.len(), values: values.len() });
        }
        let s = &self.gpu.stream;
        let (dk, dv) = (s.clone_htod(keys)?, s.clone_htod(values)?);
        self.insert_device_pairs(&dk, &dv, keys.len() as u64)
    }

    /// Inserts `n` pairs already on the device and waits for them (benchmarks time this); fewer
    /// than `n` keys or values are an error, nothing inserted.
    pub fn insert_device_pairs(
        &mut self,
        keys: &CudaSlice<u32>,
        values: &CudaSlice<u64>,
        n: u64,
    ) -> Result<(), GpuError> {
        if (keys.len() as u64) < n || (values.len() as u64) < n {
            return Err(GpuError::PairCount { pairs: n, keys: keys.len(), values: values.len() });
        }
        let (k, v) = (DevAddr::of(self.gpu, keys), DevAddr::of(self.gpu, values));
        // SAFETY: both slices hold `n` items, are borrowed until the synchronize below.
        unsafe { self.queue_insert(k, v, n) }?;
        self.gpu.stream.synchronize()?;
        Ok(())
    }

    /// Queues the insertion of `n` pairs at the device addresses `keys` (u32 each) and `values`
    /// (u64 each) on the GPU's stream, and returns at once.
    ///
    /// # Safety
    ///
    /// `keys` and `values` are device memory of this GPU holding `n` items each, kept alive and
    /// unchanged until the stream has passed this point (their borrows end when this returns).
    pub(crate) unsafe fn queue_insert(&self, keys: DevAddr<'_>, values: DevAddr<'_>, n: u64) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let s = &self.gpu.stream;
        let f = self.gpu.function(&format!("insert_pairs_g{}", self.config.group.get()))?;
        let args = self.args();
        let mut b = s.launch_builder(&f);
        b.arg(&keys).arg(&values).arg(&n).arg(&args);
        // SAFETY: the kernel reads `n` keys and values (valid, per the caller) and writes only
        // the table.
        unsafe { b.launch(launch_config(self.gpu, n)) }?;
        Ok(())
    }

    /// Key slots in use.
    pub(crate) fn occupied_keys(&self) -> Result<u64, GpuError> {
        let s = &self.gpu.stream;
        let (table, slots) = (self.args(), self.key_slots());
        let occupied = s.alloc_zeros::<u64>(1)?;
        let f = self.gpu.function("count_keys")?;
        let mut b = s.launch_builder(&f);
        b.arg(&table).arg(&slots).arg(&occupied);
        // SAFETY: reads the table, adds to one counter.
        unsafe { b.launch(launch_config(self.gpu, slots)) }?;
        Ok(s.clone_dtoh(&occupied)?[0])
    }

    /// Every key with at least one kept value, downloaded, with the renumbering on the device (for
    /// [`fill`](Self::fill)). `remap` renumbers targets (see `cuda/condense.cuh`); `None` keeps
    /// values as stored. Order is arbitrary.
    pub fn collect(&self, remap: Option<(&[u32], u32)>) -> Result<(Vec<KeyList>, DeviceRemap), GpuError> {
        let keys = self.collect_on_device(remap)?;
        let s = &self.gpu.stream;
        let m = keys.n as usize;
        let (k, sl, c) = (s.clone_dtoh(&keys.keys)?, s.clone_dtoh(&keys.table_slots)?, s.clone_dtoh(&keys.counts)?);
        let lists = (0..m).map(|i| KeyList { key: k[i], slot: sl[i], count: c[i] }).collect();
        Ok((lists, keys.remap))
    }

    /// Every key with at least one kept value, left on the device (see [`collect`](Self::collect)).
    pub(crate) fn collect_on_device(&self, remap: Option<(&[u32], u32)>) -> Result<DeviceKeys, GpuError> {
        let s = &self.gpu.stream;
        let (table, slots) = (self.args(), self.key_slots());
        let (remap_host, window_bits): (&[u32], u32) = remap.unwrap_or((&[], 0));
        let remap = DeviceRemap {
            remap: if remap_host.is_empty() { s.alloc_zeros::<u32>(1)? } else { s.clone_htod(remap_host)? },
            remap_len: remap_host.len() as u32,
            window_bits,
        };
        let margs = remap.args(self.gpu);

        let n = self.occupied_keys()? as usize;
        let keys = s.alloc_zeros::<u32>(n.max(1))?;
        let key_slots = s.alloc_zeros::<u32>(n.max(1))?;
        let counts = s.alloc_zeros::<u32>(n.max(1))?;
        let found = s.alloc_zeros::<u64>(1)?;
        let f = self.gpu.function("collect_keys")?;
        let mut b = s.launch_builder(&f);
        b.arg(&table).arg(&slots).arg(&margs).arg(&keys).arg(&key_slots).arg(&counts).arg(&found);
        // SAFETY: writes at most `n` (occupied slots) entries of each output.
        unsafe { b.launch(launch_config(self.gpu, slots)) }?;
        let n = s.clone_dtoh(&found)?[0];
        Ok(DeviceKeys { keys, table_slots: key_slots, counts, n, remap })
    }

    /// The kept values of `lists` back to back (each list at the running sum of the counts),
    /// renumbered with the `remap` of [`collect`](Self::collect), sorted within each list if `sort`.
    pub fn fill(&self, lists: &[KeyList], remap: &DeviceRemap, sort: bool) -> Result<Vec<u64>, GpuError> {
        let s = &self.gpu.stream;
        let mut offsets = Vec::with_capacity(lists.len());
        let mut total = 0u64;
        for l in lists {
            offsets.push(total);
            total += l.count as u64;
        }
        if lists.is_empty() {
            return Ok(Vec::new());
        }
        let slots: Vec<u32> = lists.iter().map(|l| l.slot).collect();
        let (dslots, doffsets) = (s.clone_htod(&slots)?, s.clone_htod(&offsets)?);
        let out = s.alloc_zeros::<u64>(total.max(1) as usize)?;
        let f = self.gpu.function("fill_lists")?;
        let (table, margs, n, sort) = (self.args(), remap.args(self.gpu), lists.len() as u64, sort as u32);
        let mut b = s.launch_builder(&f);
        b.arg(&table).arg(&margs).arg(&dslots).arg(&doffsets).arg(&n).arg(&sort).arg(&out);
        // SAFETY: list i is written at offsets[i].. with exactly counts[i] values, inside `out`.
        unsafe { b.launch(launch_config(self.gpu, n)) }?;
        let mut values = s.clone_dtoh(&out)?;
        values.truncate(total as usize);
        Ok(values)
    }
}
