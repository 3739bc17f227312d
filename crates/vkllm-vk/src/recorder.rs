//! The Recorder: batches dispatches and transfers into one command buffer, inserting a barrier
//! only where a data dependency needs one, and the replayable Recording it produces.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use ash::vk;
use vkllm_kernels::Dispatch;

use crate::Error;
use crate::buffer::{BufSlice, BufferInner, barrier, full_barrier, host_barrier};
use crate::device::Device;
use crate::error::{Result, vk_err};
use crate::pipeline::Pipeline;
use crate::recycle::Spare;

const SETS_PER_POOL: u32 = 64;
/// Most storage buffers one kernel binds (Vulkan devices of interest allow >= 16 per stage).
pub const MAX_BINDINGS: usize = 12;
const DESCRIPTORS_PER_POOL: u32 = 64 * MAX_BINDINGS as u32;

#[derive(Clone, Copy, Debug)]
struct Range {
    buf: vk::Buffer,
    start: u64,
    end: u64,
}

impl Range {
    fn overlaps(&self, o: &Range) -> bool {
        self.buf == o.buf && self.start < o.end && o.start < self.end
    }
}

/// GPU time of one recorded dispatch.
#[derive(Clone, Debug)]
pub struct DispatchTiming {
    pub label: &'static str,
    /// Start, relative to the first dispatch's start.
    pub start_ns: f64,
    pub ns: f64,
}

/// Owned Vulkan objects of a recording (destroyed on drop).
struct Objects {
    dev: Device,
    pool: vk::CommandPool,
    cb: vk::CommandBuffer,
    desc_pools: Vec<vk::DescriptorPool>,
    query_pool: vk::QueryPool,
    fence: vk::Fence,
    buffers: Vec<Arc<BufferInner>>,
    pipelines: Vec<Arc<Pipeline>>,
}

impl Drop for Objects {
    fn drop(&mut self) {
        let d = &self.dev.shared.raw;
        // SAFETY: the command buffer is never pending when a Recording drops (every submit
        // waits; after a timeout we wait for idle first).
        unsafe {
            let done = d
                .wait_for_fences(
                    &[self.fence],
                    true,
                    self.dev.shared.fence_timeout.as_nanos() as u64,
                )
                .is_ok();
            if self.query_pool != vk::QueryPool::null() {
                d.destroy_query_pool(self.query_pool, None);
            }
            let spare = Spare {
                pool: self.pool,
                cb: self.cb,
                fence: self.fence,
                desc_pools: std::mem::take(&mut self.desc_pools),
            };
            // A finished command buffer's pool, fence and descriptor pools go to the device's
            // spares (or are destroyed there); after a failed wait they are only destroyed.
            if done {
                let keep = self.dev.shared.tuning.recycle;
                self.dev.shared.spares.put(d, spare, keep);
            } else {
                spare.destroy(d);
            }
        }
    }
}

/// Records one command buffer. Create with [`Recorder::new`], add work, then [`Recorder::finish`].
pub struct Recorder {
    obj: Objects,
    sets_left: u32,
    /// The next of `obj.desc_pools` to allocate sets from once `sets_left` is 0 (a spare's
    /// pools are reused before new ones are created).
    next_pool: usize,
    pending_reads: Vec<Range>,
    pending_writes: Vec<Range>,
    barriers: u32,
    labels: Vec<&'static str>,
    max_timestamps: u32,
    skip_barriers: bool,
    /// Split-K scratch of `matmul_coop` (coop_split.rs).
    pub(crate) split: crate::coop_split::SplitSlots,
    /// The int8 matvec's launch rules for this recording; `None`: the device tuning's.
    pub(crate) q8a_rules: Option<vkllm_kernels::matvec_q8a::Q8aRules>,
}

impl Recorder {
    /// A recorder without timestamps.
    pub fn new(dev: &Device) -> Result<Self> {
        Self::with_timestamps(dev, 0)
    }

    /// A recorder that times up to `max_dispatches` dispatches (0 = no timing).
    pub fn with_timestamps(dev: &Device, max_dispatches: u32) -> Result<Self> {
        let d = &dev.shared.raw;
        if max_dispatches > 0 && !dev.info().timestamps {
            return Err(Error::MissingFeature {
                device: dev.info().name.clone(),
                feature: "timestamps on the compute queue".into(),
            });
        }
        // SAFETY: objects are owned by `Objects`, destroyed on drop (also on early returns, as
        // `obj` is built before anything can fail after the pool); a spare's are reset and
        // unused.
        unsafe {
            let s = match dev.shared.spares.take() {
                Some(s) => s,
                None => Self::create_objects(dev)?,
            };
            let mut obj = Objects {
                dev: dev.clone(),
                pool: s.pool,
                cb: s.cb,
                desc_pools: s.desc_pools,
                query_pool: vk::QueryPool::null(),
                fence: s.fence,
                buffers: Vec::new(),
                pipelines: Vec::new(),
            };
            if max_dispatches > 0 {
                obj.query_pool = d
                    .create_query_pool(
                        &vk::QueryPoolCreateInfo::default()
                            .query_type(vk::QueryType::TIMESTAMP)
                            .query_count(2 * max_dispatches),
                        None,
                    )
                    .map_err(vk_err("vkCreateQueryPool"))?;
            }
            d.begin_command_buffer(obj.cb, &vk::CommandBufferBeginInfo::default())
                .map_err(vk_err("vkBeginCommandBuffer"))?;
            if max_dispatches > 0 {
                d.cmd_reset_query_pool(obj.cb, obj.query_pool, 0, 2 * max_dispatches);
            }
            // Orders this recording after whatever ran on the queue before it (another
            // recording, a transfer, the previous replay of this one).
            full_barrier(d, obj.cb);
            Ok(Recorder {
                obj,
                sets_left: 0,
                next_pool: 0,
                pending_reads: Vec::new(),
                pending_writes: Vec::new(),
                barriers: 0,
                labels: Vec::new(),
                max_timestamps: max_dispatches,
                skip_barriers: false,
                split: Default::default(),
                q8a_rules: None,
            })
        }
    }

    /// A new command pool with one command buffer, a signalled fence and no descriptor pools.
    ///
    /// # Safety
    /// `dev` is valid; the caller owns (destroys) what is returned.
    unsafe fn create_objects(dev: &Device) -> Result<Spare> {
        let d = &dev.shared.raw;
        // SAFETY: valid device; everything created is destroyed on the error paths.
        unsafe {
            let pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(dev.shared.queue_family),
                    None,
                )
                .map_err(vk_err("vkCreateCommandPool"))?;
            let fence = match d.create_fence(
                &vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED),
                None,
            ) {
                Ok(f) => f,
                Err(r) => {
                    d.destroy_command_pool(pool, None);
                    return Err(vk_err("vkCreateFence")(r));
                }
            };
            match d.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .command_buffer_count(1),
            ) {
                Ok(cbs) => Ok(Spare {
                    pool,
                    cb: cbs[0],
                    fence,
                    desc_pools: Vec::new(),
                }),
                Err(r) => {
                    d.destroy_fence(fence, None);
                    d.destroy_command_pool(pool, None);
                    Err(vk_err("vkAllocateCommandBuffers")(r))
                }
            }
        }
    }

    pub fn device(&self) -> &Device {
        &self.obj.dev
    }

    /// Barriers inserted so far for data dependencies (the recording's first and last barrier
    /// are not counted).
    pub fn barriers(&self) -> u32 {
        self.barriers
    }

    /// Test hook: stop inserting dependency barriers, so tests can check that synchronization
    /// validation reports the resulting hazards. Never use it for real work.
    #[doc(hidden)]
    pub fn debug_skip_barriers(&mut self) {
        self.skip_barriers = true;
    }

    /// Dispatches recorded so far.
    pub fn dispatches(&self) -> usize {
        self.labels.len()
    }

    fn keep(&mut self, s: &BufSlice<'_>) {
        let inner = &s.buffer.inner;
        if !self.obj.buffers.iter().any(|b| Arc::ptr_eq(b, inner)) {
            self.obj.buffers.push(inner.clone());
        }
    }

    /// Inserts a barrier if any access conflicts with the accesses since the last barrier, and
    /// always before an indirect launch (its sizes are written by an earlier dispatch).
    fn order(&mut self, reads: &[Range], writes: &[Range], indirect: bool) {
        let hazard = reads
            .iter()
            .any(|r| self.pending_writes.iter().any(|w| w.overlaps(r)))
            || writes.iter().any(|w| {
                self.pending_writes.iter().any(|p| p.overlaps(w))
                    || self.pending_reads.iter().any(|p| p.overlaps(w))
            });
        if (hazard || indirect) && !self.skip_barriers {
            barrier(&self.obj.dev.shared.raw, self.obj.cb, indirect);
            self.barriers += 1;
            self.pending_reads.clear();
            self.pending_writes.clear();
        }
        self.pending_reads.extend_from_slice(reads);
        self.pending_writes.extend_from_slice(writes);
        for i in 0..2 {
            if let Some((buf, off, elems)) = self.split.half_src[i] {
                let src = Range {
                    buf,
                    start: off,
                    end: off + 4 * elems as u64,
                };
                if writes.iter().any(|w| w.overlaps(&src)) {
                    self.split.half_src[i] = None;
                }
            }
        }
        // The int8 scratch's record ends with any write to it or to the activations it holds.
        if let Some((buf, off, cols, ..)) = self.split.q8x_src {
            let x = Range {
                buf,
                start: off,
                end: off + 4 * cols as u64,
            };
            let q8x = self.split.q8x_raw().map(|buf| Range {
                buf,
                start: 0,
                end: u64::MAX,
            });
            if writes
                .iter()
                .any(|w| w.overlaps(&x) || q8x.is_some_and(|q| w.overlaps(&q)))
            {
                self.split.q8x_src = None;
            }
        }
    }

    fn range(&self, s: &BufSlice<'_>) -> Range {
        Range {
            buf: s.buffer.raw(),
            start: s.offset,
            end: s.offset + s.len,
        }
    }

    fn check_binding(&self, what: impl Fn() -> String, s: &BufSlice<'_>) -> Result<()> {
        if !Arc::ptr_eq(&s.buffer.inner.shared, &self.obj.dev.shared) {
            return Err(Error::Shape(format!(
                "{}: buffer belongs to another device",
                what()
            )));
        }
        let l = &self.obj.dev.info().limits;
        if !s
            .offset
            .is_multiple_of(l.min_storage_buffer_offset_alignment)
        {
            return Err(Error::Misaligned {
                what: what(),
                offset: s.offset,
                align: l.min_storage_buffer_offset_alignment,
            });
        }
        if s.len == 0 {
            return Err(Error::Shape(format!("{}: empty buffer range", what())));
        }
        if s.len > l.max_storage_buffer_range {
            return Err(Error::BufferRange {
                what: what(),
                len: s.len,
                max: l.max_storage_buffer_range,
            });
        }
        Ok(())
    }

    fn descriptor_set(&mut self, layout: vk::DescriptorSetLayout) -> Result<vk::DescriptorSet> {
        let d = &self.obj.dev.shared.raw;
        if self.sets_left == 0 && self.next_pool < self.obj.desc_pools.len() {
            self.next_pool += 1;
            self.sets_left = SETS_PER_POOL;
        }
        if self.sets_left == 0 {
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: DESCRIPTORS_PER_POOL,
            }];
            // SAFETY: valid device.
            let pool = unsafe {
                d.create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(SETS_PER_POOL)
                        .pool_sizes(&sizes),
                    None,
                )
            }
            .map_err(vk_err("vkCreateDescriptorPool"))?;
            self.obj.desc_pools.push(pool);
            self.next_pool = self.obj.desc_pools.len();
            self.sets_left = SETS_PER_POOL;
        }
        let layouts = [layout];
        let pool = *self
            .obj
            .desc_pools
            .get(self.next_pool.wrapping_sub(1))
            .ok_or(Error::Recording("no descriptor pool"))?;
        // SAFETY: pool has room (at most 8 bindings per kernel x 64 sets).
        let set = unsafe {
            d.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(pool)
                    .set_layouts(&layouts),
            )
        }
        .map_err(vk_err("vkAllocateDescriptorSets"))?[0];
        self.sets_left -= 1;
        Ok(set)
    }

    /// The int8 matvec's launch rules for the products recorded from now on (tests compare
    /// launches; the default is the device tuning's `q8a_*`).
    pub fn set_q8a_rules(&mut self, rules: vkllm_kernels::matvec_q8a::Q8aRules) {
        self.q8a_rules = Some(rules);
    }

    /// The int8 matvec's launch rules in effect.
    pub fn q8a_rules(&self) -> vkllm_kernels::matvec_q8a::Q8aRules {
        self.q8a_rules.unwrap_or_else(|| {
            let t = self.device().tuning();
            vkllm_kernels::matvec_q8a::Q8aRules {
                wide: t.q8a_wide,
                quad: t.q8a_quad,
                workgroups: t.q8a_workgroups,
                xg: t.q8a_xg,
                xg_lanes: t.q8a_xg_lanes,
                xg_rows: t.q8a_xg_rows,
                xg_single: vkllm_kernels::matvec_q8a::XgSingle::from_keys(
                    t.q8a_xg1,
                    t.q8a_xg1_norm,
                ),
                xg_produce: t.q8a_xg1_produce,
                xg_reuse: t.q8a_xg1_reuse,
                mixed: t.q8a_mixed,
                wg: t.q8a_wg,
            }
        })
    }

    /// Records one kernel dispatch.
    pub fn dispatch(&mut self, d: Dispatch<BufSlice<'_>>) -> Result<()> {
        let k = d.kernel;
        if d.buffers.len() != k.bindings.len() || d.push.len() != k.push_size as usize {
            return Err(Error::Shape(format!(
                "kernel {}: malformed dispatch",
                k.name
            )));
        }
        if k.bindings.len() > MAX_BINDINGS {
            return Err(Error::Shape(format!(
                "kernel {}: more than {MAX_BINDINGS} bindings",
                k.name
            )));
        }
        let lim = self.obj.dev.info().limits.max_workgroup_count;
        if d.groups.iter().zip(lim).any(|(&g, l)| g == 0 || g > l) {
            return Err(Error::Shape(format!(
                "kernel {}: workgroup grid {:?} outside 1..={lim:?}",
                k.name, d.groups
            )));
        }
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        for (b, spec) in d.buffers.iter().zip(k.bindings) {
            // The label is only formatted for an error (this runs for every binding recorded).
            self.check_binding(|| format!("kernel {} binding `{}`", k.name, spec.name), b)?;
            let r = self.range(b);
            if spec.access.reads() {
                reads.push(r);
            }
            if spec.access.writes() {
                writes.push(r);
            }
        }
        if self.max_timestamps > 0 && self.labels.len() as u32 >= self.max_timestamps {
            return Err(Error::Recording("more dispatches than timestamp slots"));
        }
        let pipeline = self.obj.dev.pipeline(k, &d.overrides)?;
        let set = self.descriptor_set(pipeline.set_layout)?;
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = d
            .buffers
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo {
                    buffer: b.buffer.raw(),
                    offset: b.offset,
                    range: b.len,
                }]
            })
            .collect();
        let writes_ds: Vec<vk::WriteDescriptorSet> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        for b in &d.buffers {
            self.keep(b);
        }
        let indirect = match d.indirect {
            None => None,
            Some(at) => {
                let b = d.buffers.get(at.binding).ok_or_else(|| {
                    Error::Shape(format!("kernel {}: indirect binding out of range", k.name))
                })?;
                if !at.offset.is_multiple_of(4) || at.offset.saturating_add(12) > b.len {
                    return Err(Error::Shape(format!(
                        "kernel {}: indirect sizes at byte {} of a {}-byte binding",
                        k.name, at.offset, b.len
                    )));
                }
                Some((b.buffer.raw(), b.offset + at.offset))
            }
        };
        self.order(&reads, &writes, indirect.is_some());
        let dev = &self.obj.dev.shared.raw;
        let cb = self.obj.cb;
        let slot = self.labels.len() as u32;
        // SAFETY: cb is recording; set, pipeline and layout are valid and kept alive by the
        // recording.
        unsafe {
            dev.update_descriptor_sets(&writes_ds, &[]);
            if self.max_timestamps > 0 {
                dev.cmd_write_timestamp(
                    cb,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    self.obj.query_pool,
                    2 * slot,
                );
            }
            dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
            dev.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.layout,
                0,
                &[set],
                &[],
            );
            if !d.push.is_empty() {
                dev.cmd_push_constants(
                    cb,
                    pipeline.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &d.push,
                );
            }
            match indirect {
                Some((buf, offset)) => dev.cmd_dispatch_indirect(cb, buf, offset),
                None => dev.cmd_dispatch(cb, d.groups[0], d.groups[1], d.groups[2]),
            }
            if self.max_timestamps > 0 {
                dev.cmd_write_timestamp(
                    cb,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    self.obj.query_pool,
                    2 * slot + 1,
                );
            }
        }
        if !self.obj.pipelines.iter().any(|p| Arc::ptr_eq(p, &pipeline)) {
            self.obj.pipelines.push(pipeline);
        }
        self.labels.push(k.name);
        Ok(())
    }

    /// Records several dispatches in order.
    pub fn dispatch_all<'a>(
        &mut self,
        ds: impl IntoIterator<Item = Dispatch<BufSlice<'a>>>,
    ) -> Result<()> {
        for d in ds {
            self.dispatch(d)?;
        }
        Ok(())
    }

    fn check_transfer(&self, what: &str, s: &BufSlice<'_>) -> Result<()> {
        if !Arc::ptr_eq(&s.buffer.inner.shared, &self.obj.dev.shared) {
            return Err(Error::Shape(format!(
                "{what}: buffer belongs to another device"
            )));
        }
        if !s.offset.is_multiple_of(4) || !s.len.is_multiple_of(4) || s.len == 0 {
            return Err(Error::Misaligned {
                what: format!("{what} ({} bytes)", s.len),
                offset: s.offset,
                align: 4,
            });
        }
        Ok(())
    }

    /// Fills `dst` with the 32-bit pattern `word` (e.g. `f32::NAN.to_bits()` to poison outputs).
    pub fn fill(&mut self, dst: BufSlice<'_>, word: u32) -> Result<()> {
        self.check_transfer("fill", &dst)?;
        self.keep(&dst);
        let r = self.range(&dst);
        self.order(&[], &[r], false);
        // SAFETY: cb is recording; range checked.
        unsafe {
            self.obj.dev.shared.raw.cmd_fill_buffer(
                self.obj.cb,
                dst.buffer.raw(),
                dst.offset,
                dst.len,
                word,
            )
        };
        Ok(())
    }

    /// Copies `src` into `dst` (same length).
    pub fn copy(&mut self, src: BufSlice<'_>, dst: BufSlice<'_>) -> Result<()> {
        self.check_transfer("copy source", &src)?;
        self.check_transfer("copy target", &dst)?;
        if src.len != dst.len {
            return Err(Error::Shape(format!(
                "copy of {} bytes into {}",
                src.len, dst.len
            )));
        }
        self.keep(&src);
        self.keep(&dst);
        let (rs, rd) = (self.range(&src), self.range(&dst));
        self.order(&[rs], &[rd], false);
        // SAFETY: cb is recording; ranges checked.
        unsafe {
            self.obj.dev.shared.raw.cmd_copy_buffer(
                self.obj.cb,
                src.buffer.raw(),
                dst.buffer.raw(),
                &[vk::BufferCopy {
                    src_offset: src.offset,
                    dst_offset: dst.offset,
                    size: src.len,
                }],
            )
        };
        Ok(())
    }

    /// Ends recording.
    pub fn finish(self) -> Result<Recording> {
        let d = &self.obj.dev.shared.raw;
        // SAFETY: cb is recording.
        unsafe {
            full_barrier(d, self.obj.cb);
            host_barrier(d, self.obj.cb);
            d.end_command_buffer(self.obj.cb)
                .map_err(vk_err("vkEndCommandBuffer"))?;
        }
        Ok(Recording {
            obj: self.obj,
            labels: self.labels,
            barriers: self.barriers,
            timed: self.max_timestamps > 0,
        })
    }
}

/// A finished command buffer: submit it as often as needed (a pre-recorded decode step).
pub struct Recording {
    obj: Objects,
    labels: Vec<&'static str>,
    barriers: u32,
    timed: bool,
}

impl Recording {
    /// Submits and waits for completion (bounded by the device's fence timeout).
    pub fn submit(&self) -> Result<()> {
        self.obj.dev.submit_and_wait(self.obj.cb, self.obj.fence)
    }

    /// Submits `chain` (recordings of one device) as one batch, in order, and waits for all of
    /// it: one queue submission and one host wait however many recordings (each begins with a
    /// full barrier, so each sees what the ones before it wrote). None of them may be pending.
    pub fn submit_chain(chain: &[&Recording]) -> Result<()> {
        Self::submit_chain_nowait(chain)?;
        match chain.last() {
            Some(last) => last.obj.dev.wait_fence(last.obj.fence),
            None => Ok(()),
        }
    }

    /// [`Recording::submit_chain`] without the wait: [`Recording::wait`] on the chain's last
    /// recording waits for all of it. None of them may be submitted again before that.
    pub fn submit_chain_nowait(chain: &[&Recording]) -> Result<()> {
        let Some(last) = chain.last() else {
            return Ok(());
        };
        if chain
            .iter()
            .any(|r| !std::sync::Arc::ptr_eq(&r.obj.dev.shared, &last.obj.dev.shared))
        {
            return Err(Error::Recording(
                "a chain of recordings of different devices",
            ));
        }
        let cbs: Vec<vk::CommandBuffer> = chain.iter().map(|r| r.obj.cb).collect();
        last.obj.dev.submit_all(&cbs, last.obj.fence)
    }

    /// Submits without waiting; [`Recording::wait`] (or dropping the recording) waits. Work
    /// submitted after it on the queue starts after it (every recording begins with a full
    /// barrier). Do not submit it again before it has been waited for.
    pub fn submit_nowait(&self) -> Result<()> {
        self.obj.dev.submit(self.obj.cb, self.obj.fence)
    }

    /// Waits for the last submit (bounded by the device's fence timeout).
    pub fn wait(&self) -> Result<()> {
        self.obj.dev.wait_fence(self.obj.fence)
    }

    pub fn dispatches(&self) -> usize {
        self.labels.len()
    }

    pub fn barriers(&self) -> u32 {
        self.barriers
    }

    /// GPU time of each dispatch of the last submit (recorded with timestamps).
    pub fn timings(&self) -> Result<Vec<DispatchTiming>> {
        if !self.timed {
            return Err(Error::Recording("recorded without timestamps"));
        }
        let n = self.labels.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut ticks = vec![0u64; 2 * n];
        let d = &self.obj.dev.shared.raw;
        // SAFETY: the last submit completed (submit waits); queries 0..2n were written.
        unsafe {
            d.get_query_pool_results(
                self.obj.query_pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(vk_err("vkGetQueryPoolResults"))?;
        let period = self.obj.dev.info().limits.timestamp_period_ns as f64;
        Ok(self
            .labels
            .iter()
            .enumerate()
            .map(|(i, &label)| DispatchTiming {
                label,
                start_ns: ticks[2 * i].saturating_sub(ticks[0]) as f64 * period,
                ns: ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period,
            })
            .collect())
    }
}

/// Recorded sequences kept by key (e.g. one decode step per batch shape) and replayed without
/// re-recording.
pub struct RecordingCache<K> {
    map: HashMap<K, Recording>,
}

impl<K: Hash + Eq> Default for RecordingCache<K> {
    fn default() -> Self {
        RecordingCache {
            map: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> RecordingCache<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The recording for `key`, recorded by `record` on first use.
    pub fn get_or_record(
        &mut self,
        dev: &Device,
        key: K,
        record: impl FnOnce(&mut Recorder) -> Result<()>,
    ) -> Result<&Recording> {
        use std::collections::hash_map::Entry;
        match self.map.entry(key) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) => {
                let mut r = Recorder::new(dev)?;
                record(&mut r)?;
                Ok(e.insert(r.finish()?))
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drops every recording (e.g. after the buffers they use were reallocated).
    pub fn clear(&mut self) {
        self.map.clear();
    }
}
