//! The Vulkan backend: the same graph calls recorded as `vkllm-kernels` dispatches.
//!
//! This is the per-dispatch reference path: ops accumulate in one command buffer (the recorder
//! inserts only the barriers data dependencies need), which is submitted when the host must see
//! a result (`read_f32`) or overwrite an input (`write_u32`). Weights are `vkllm_vk::Tensor`s,
//! split by rows under the device's storage-buffer range; RoPE reads a (cos, sin) table built from
//! the CPU op's `cos_sin`, so GPU and CPU rotate by identical angles.

use vkllm_cpu::{AttnParams, Rope};
use vkllm_kernels::WeightType;
use vkllm_vk::{BufSlice, Buffer, Device, MemoryKind, Recorder, Tensor as VkTensor};

mod attention;
// Embedding, RMSNorm, RoPE, gated activation, add, soft-cap.
mod elementwise;
mod fused;
// The hybrid / MoE ops (HybridOps).
mod hybrid;
mod kv_pages;
mod profile;
mod recorded;
mod sample_one;
mod slot_graph;
mod slot_tail;
mod slots;
mod slots_split;
mod submit;
mod tables;
mod weight_type;

pub use recorded::RecordedDecode;
pub use slot_graph::SlotGraph;

pub use slots::{
    ProfiledDispatch, SlotDecoderConfig, SlotDecoderId, SlotStart, SlotSteps, TokenLogprobs,
};

use super::{Backend, CaptureId, KvRows, KvType, KvView, Linear, NormMlp, NormQkv, RopeKv, Tensor};
use crate::error::ModelError;

use crate::family::Activation;

enum Slot {
    /// An activation / constant buffer of `len` 32-bit words; u32 tensors keep a host copy of
    /// what was last written (positions, ids) so shapes that depend on them are known.
    Buf { buf: Buffer, host: Option<Vec<u32>> },
    /// A `[rows, cols]` weight matrix.
    Matrix(VkTensor),
}

struct RopeTable {
    rope: Rope,
    max_pos: usize,
    buf: Buffer,
}

/// Runs the model graph on a Vulkan device.
pub struct VulkanBackend {
    dev: Device,
    slots: Vec<Slot>,
    rec: Option<Recorder>,
    ropes: Vec<RopeTable>,
    /// Split-K attention partials (`part_ml`, `part_o`), grown on demand.
    attn_parts: Option<(Buffer, Buffer)>,
    /// The one-dispatch attention's per-(query, kv head) counters: zeroed when created, left
    /// zero by every dispatch; grown on demand.
    attn_counters: Option<Buffer>,
    /// f32 K and V rows of the tokens being appended to a quantized cache (RoPE writes them,
    /// kv_append quantizes them into the cache), grown on demand.
    kv_stage: Option<(Buffer, Buffer)>,
    /// f16 copies of a quantized cache's rows for the cooperative-matrix prefill attention.
    kv_half: Option<(Buffer, Buffer)>,
    /// Each biased weight's bias tiled `n` times, so a bias add is one copy per linear.
    tiled_bias: Vec<(Tensor, usize, Buffer)>,
    /// Keep quantized weights in their blocks (the fast path) instead of f32.
    quantized: bool,
    /// While a decode step is captured: the KV capacity. Shapes that would depend on positions
    /// use it instead (attention over the whole cache, masked by the positions buffer; a RoPE
    /// table for every position), so the recording is valid at every step.
    capture_ctx: Option<usize>,
    /// Buffers replaced while recorded work may still use them; dropped after the next flush.
    retired: Vec<Buffer>,
    /// Batched decoders recorded over this backend's tensors (see `slots.rs`).
    slot_decoders: Vec<Option<slots::SlotDecoder>>,
    /// While profiling: recorders time up to this many dispatches, and `mark` records which
    /// graph region each dispatch index starts.
    timestamps: u32,
    marks: Vec<(usize, &'static str)>,
    /// Fused dispatches for fusable graph steps (`fused.rs`); false: the reference op sequence.
    fused: bool,
    /// Decode attention with the input step folded in (`attention.rs`,
    /// [`VulkanBackend::with_folded_attention`]).
    fold_attention: bool,
    /// While a forward is profiled (`profile.rs`): the timings of the recordings flushed so far.
    profiled: Option<Vec<vkllm_vk::DispatchTiming>>,
    /// Step inputs in host-visible memory and reads copied in the same submit as the work
    /// before them (one submit per forward); false (tuning `one_submit=0`): inputs in device
    /// memory written by a copy each, reads by a copy of their own (three extra round trips).
    one_submit: bool,
    /// Host-visible target of `read_f32`'s copies (`readback_buffer`).
    readback: Option<Buffer>,
    /// `Backend::sample_token`'s buffers, made on first use.
    one_sampler: Option<sample_one::OneSampler>,
    /// Parts submitted since the last `flush`, not yet waited for.
    in_flight: Vec<vkllm_vk::Recording>,
    /// Paged-KV ops that re-mapped pages so far (each waits for the GPU to be idle).
    kv_page_ops: u64,
    /// Dispatches at which the open recording is submitted as the next part.
    next_part: usize,
    /// Submit a forward in growing parts while it is recorded (`record`), the first of this
    /// many dispatches (`with_submits`); None (tuning `split_submit=0`): one submit at the end.
    first_part: Option<usize>,
    /// `matmul_coop`'s split-K scratch, handed from each recorder to the next.
    split_scratch: vkllm_vk::SplitSlots,
    /// Parts submitted early so far (`record`), for tests.
    parts_submitted: u64,
    /// Captures made by `Backend::capture` (`recorded.rs`; `None` once released).
    captures: Vec<Option<vkllm_vk::Recording>>,
    /// The last capture of a chain submitted without waiting (`replay_captures_nowait`):
    /// `flush` waits for it.
    replay_pending: Option<usize>,
    /// Bumped by every flush that drops replaced scratch: captures made before it are stale.
    scratch_gen: u64,
}

impl VulkanBackend {
    /// A backend on `dev`, tuned by the device's [`vkllm_vk::Tuning`].
    pub fn new(dev: Device) -> Self {
        let t = dev.tuning().clone();
        VulkanBackend {
            dev,
            slots: Vec::new(),
            rec: None,
            ropes: Vec::new(),
            attn_parts: None,
            attn_counters: None,
            kv_stage: None,
            kv_half: None,
            tiled_bias: Vec::new(),
            quantized: true,
            capture_ctx: None,
            retired: Vec::new(),
            slot_decoders: Vec::new(),
            timestamps: 0,
            marks: Vec::new(),
            fused: t.fused,
            fold_attention: false,
            profiled: None,
            one_submit: t.one_submit,
            readback: None,
            one_sampler: None,
            in_flight: Vec::new(),
            kv_page_ops: 0,
            next_part: submit::FIRST_PART,
            first_part: t.split_submit,
            split_scratch: Default::default(),
            parts_submitted: 0,
            captures: Vec::new(),
            replay_pending: None,
            scratch_gen: 0,
        }
    }

    /// Bytes of a weight matrix as stored on the device (0 for a non-matrix tensor).
    pub fn matrix_bytes(&self, t: Tensor) -> u64 {
        match &self.slots[t.index()] {
            Slot::Matrix(m) => (m.rows * m.row_bytes()) as u64,
            Slot::Buf { .. } => 0,
        }
    }

    /// Device memory held by this backend, by kind: (weights, other buffers).
    pub fn memory_bytes(&self) -> (u64, u64) {
        let mut w = 0;
        let mut other = 0;
        for s in &self.slots {
            match s {
                Slot::Matrix(m) => w += (m.rows * m.row_bytes()) as u64,
                Slot::Buf { buf, .. } => other += buf.size(),
            }
        }
        (w, other)
    }

    /// Dequantize weights to f32 at load (the reference path) instead of running the quantized
    /// kernels on the stored blocks.
    pub fn with_f32_weights(mut self) -> Self {
        self.quantized = false;
        self
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The device buffer holding an activation tensor (a host can record its own work reading
    /// it, e.g. the residual stream in a layer hook, without a copy to the CPU); `None` for
    /// weight matrices.
    pub fn tensor_buffer(&self, t: Tensor) -> Option<&Buffer> {
        match self.slots.get(t.index())? {
            Slot::Buf { buf, .. } => Some(buf),
            Slot::Matrix(_) => None,
        }
    }

    fn push(&mut self, s: Slot) -> Tensor {
        self.slots.push(s);
        Tensor::from_index((self.slots.len() - 1) as u32)
    }

    fn buf(&self, t: Tensor) -> &Buffer {
        match &self.slots[t.index()] {
            Slot::Buf { buf, .. } => buf,
            Slot::Matrix(_) => panic!("tensor {t:?} is a matrix, used as a buffer"),
        }
    }

    fn all(&self, t: Tensor) -> BufSlice<'_> {
        self.buf(t).all()
    }

    /// The first `words` 32-bit words of a buffer.
    fn head(&self, t: Tensor, words: usize) -> Result<BufSlice<'_>, ModelError> {
        Ok(self.buf(t).slice(0, 4 * words as u64)?)
    }

    fn matrix(&self, t: Tensor) -> &VkTensor {
        match &self.slots[t.index()] {
            Slot::Matrix(m) => m,
            Slot::Buf { .. } => panic!("tensor {t:?} is a buffer, used as a matrix"),
        }
    }

    /// One past the largest position in `positions[..n]`; while a decode step is captured, the
    /// KV capacity (the recording must hold for every position).
    fn positions_end(&self, positions: Tensor, n: usize) -> usize {
        match self.capture_ctx {
            Some(cap) => cap,
            None => self
                .host_u32(positions, n)
                .iter()
                .max()
                .map_or(0, |&p| p as usize + 1),
        }
    }

    fn host_u32(&self, t: Tensor, n: usize) -> &[u32] {
        match &self.slots[t.index()] {
            Slot::Buf { host: Some(h), .. } => &h[..n],
            _ => panic!("tensor {t:?} has no host copy of its u32 values"),
        }
    }

    fn alloc(&mut self, len: usize, host: Option<Vec<u32>>) -> Result<Tensor, ModelError> {
        let buf =
            self.dev
                .create_buffer("activation", 4 * len.max(1) as u64, MemoryKind::Device)?;
        let t = self.push(Slot::Buf { buf, host });
        self.record(|me, r| Ok(r.fill(me.all(t), 0)?))?;
        Ok(t)
    }

    /// The K and V buffers an op on `kv` binds, and the row stride between its queries: one
    /// slot's region for `Slot(s)` (stride 0), the whole cache for `PerRow` (stride = slot rows).
    fn kv_region(
        &self,
        kv: &KvView,
        width: usize,
    ) -> Result<(BufSlice<'_>, BufSlice<'_>, usize), ModelError> {
        match kv.rows {
            KvRows::Slot(s) => {
                let values = (kv.stride * width) as u64;
                let (kb, vb) = (kv.dtype.bytes(values), kv.v_dtype.bytes(values));
                Ok((
                    self.buf(kv.k).slice(s as u64 * kb, kb)?,
                    self.buf(kv.v).slice(s as u64 * vb, vb)?,
                    0,
                ))
            }
            KvRows::PerRow => Ok((self.all(kv.k), self.all(kv.v), kv.stride)),
        }
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        // Buffers must outlive the work that uses them.
        let _ = self.flush();
    }
}

impl Backend for VulkanBackend {
    fn name(&self) -> String {
        self.dev.info().name.clone()
    }

    /// 512 tokens on devices with cooperative matrices (their matmuls and prefill attention
    /// only fill a large GPU with large chunks; docs/benchmarks-history.md);
    /// [`crate::DEFAULT_CHUNK`] elsewhere.
    fn prefill_chunk(&self) -> usize {
        if self.dev.coopmat() {
            512
        } else {
            crate::DEFAULT_CHUNK
        }
    }

    /// f16 on GPUs (half the memory and the bytes each attention reads, as llama.cpp's
    /// default); f32 on CPU devices (lavapipe), where memory is not the limit.
    fn default_kv(&self) -> crate::KvType {
        match self.dev.info().kind {
            vkllm_vk::DeviceKind::Cpu => crate::KvType::F32,
            _ => crate::KvType::F16,
        }
    }

    fn centre_keys(&self) -> bool {
        self.dev.tuning().kv_centre
    }
    fn rotate_values(&self) -> bool {
        self.dev.tuning().kv_rot_v
    }
    fn sink_keys(&self) -> bool {
        self.dev.tuning().kv_sink
    }

    fn memory_free(&self) -> Option<(u64, u64)> {
        let total = self.dev.info().device_local_bytes();
        let (w, other) = self.memory_bytes();
        Some((total.saturating_sub(w + other), total))
    }

    fn mark(&mut self, region: &'static str) {
        if self.timestamps > 0 {
            let base = self.profiled.as_ref().map_or(0, Vec::len);
            let at = base + self.rec.as_ref().map_or(0, |r| r.dispatches());
            self.marks.push((at, region));
        }
    }

    fn sync(&mut self) -> Result<(), ModelError> {
        self.flush()
    }

    fn capture<F>(&mut self, capacity: usize, f: F) -> Result<Option<CaptureId>, ModelError>
    where
        F: FnOnce(&mut Self) -> Result<(), ModelError>,
    {
        self.capture_recording(capacity, f).map(Some)
    }

    fn replay_captures(&mut self, ids: &[CaptureId]) -> Result<(), ModelError> {
        self.replay_recordings(ids, true)
    }

    fn replay_captures_nowait(&mut self, ids: &[CaptureId]) -> Result<(), ModelError> {
        self.replay_recordings(ids, false)
    }

    fn captures_current(&mut self, ids: &[CaptureId]) -> Result<bool, ModelError> {
        self.flush()?;
        Ok(ids.iter().all(|id| id.generation == self.scratch_gen))
    }

    fn release_captures(&mut self, ids: &[CaptureId]) {
        // A capture in flight is waited for before it goes.
        let _ = self.wait_replay();
        self.release_recordings(ids)
    }

    fn sample_token(
        &mut self,
        logits: Tensor,
        vocab: usize,
        p: &vkllm_cpu::sampler::SamplingParams,
        counts: &[u32],
        seq: u64,
        step: u64,
    ) -> Result<Option<u32>, ModelError> {
        self.sample_one(logits, vocab, p, counts, seq, step)
            .map(Some)
    }

    fn alloc_f32(&mut self, len: usize) -> Result<Tensor, ModelError> {
        self.alloc(len, None)
    }

    fn alloc_u32(&mut self, len: usize) -> Result<Tensor, ModelError> {
        if !self.one_submit {
            return self.alloc(len, Some(vec![0; len]));
        }
        // Host-visible: a forward's ids and positions are written straight into mapped memory,
        // with no copy submitted and waited for; device-local where the device allows, since
        // many workgroups read them (a prefill chunk's positions: every head of every token).
        let buf =
            self.dev
                .create_buffer("step input", 4 * len.max(1) as u64, MemoryKind::Upload)?;
        buf.write_host(0, &vec![0; 4 * len.max(1)])?;
        Ok(self.push(Slot::Buf {
            buf,
            host: Some(vec![0; len]),
        }))
    }

    fn alloc_u32_scratch(&mut self, len: usize) -> Result<Tensor, ModelError> {
        self.alloc(len, None)
    }

    fn alloc_kv(&mut self, len: usize, dtype: KvType) -> Result<Tensor, ModelError> {
        let bytes = dtype.bytes(len as u64).next_multiple_of(4).max(4);
        let buf = self
            .dev
            .create_buffer("kv cache", bytes, MemoryKind::Device)?;
        let t = self.push(Slot::Buf { buf, host: None });
        self.record(|me, r| Ok(r.fill(me.all(t), 0)?))?;
        Ok(t)
    }

    fn kv_page_bytes(&self) -> Option<u64> {
        self.kv_page_bytes_()
    }

    fn alloc_kv_paged(
        &mut self,
        len: usize,
        dtype: KvType,
        resident: bool,
    ) -> Result<Tensor, ModelError> {
        self.alloc_kv_paged_(len, dtype, resident)
    }

    fn kv_pages(&mut self, op: super::KvPageOp<'_>) -> Result<usize, ModelError> {
        self.kv_pages_(op)
    }

    fn kv_paged_bytes(&self) -> u64 {
        self.kv_paged_bytes_()
    }

    fn upload_f32(&mut self, data: &[f32]) -> Result<Tensor, ModelError> {
        let buf = self.dev.buffer_from("constant", data)?;
        Ok(self.push(Slot::Buf { buf, host: None }))
    }

    fn upload_matrix(
        &mut self,
        data: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<Tensor, ModelError> {
        let t = VkTensor::from_bytes(
            &self.dev,
            "weight",
            WeightType::F32,
            rows,
            cols,
            bytemuck::cast_slice(data),
        )?;
        Ok(self.push(Slot::Matrix(t)))
    }

    fn stacks_shared_expert(&self) -> bool {
        self.fused && self.dev.tuning().moe_shared
    }

    fn upload_matrix_raw(
        &mut self,
        ty: vkllm_cpu::quant::QuantType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Option<Tensor>, ModelError> {
        if !self.quantized || ty == vkllm_cpu::quant::QuantType::F32 {
            return Ok(None);
        }
        let wt = weight_type::weight_type(ty);
        let t = VkTensor::from_bytes(&self.dev, "weight", wt, rows, cols, bytes)?;
        Ok(Some(self.push(Slot::Matrix(t))))
    }

    fn write_u32(&mut self, t: Tensor, data: &[u32]) -> Result<(), ModelError> {
        // Recorded work may still read the old values.
        self.flush()?;
        self.dev
            .upload(self.buf(t), 0, bytemuck::cast_slice(data))?;
        if let Slot::Buf { host: Some(h), .. } = &mut self.slots[t.index()] {
            h[..data.len()].copy_from_slice(data);
        }
        Ok(())
    }

    fn read_f32(&mut self, t: Tensor, offset: usize, out: &mut [f32]) -> Result<(), ModelError> {
        if self.read_in_submit(t, offset, out)? {
            return Ok(());
        }
        self.flush()?;
        self.dev.download(
            self.buf(t),
            4 * offset as u64,
            bytemuck::cast_slice_mut(out),
        )?;
        Ok(())
    }

    fn embedding(
        &mut self,
        table: Tensor,
        vocab: usize,
        dim: usize,
        ids: Tensor,
        n: usize,
        scale: Option<f32>,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.embedding_op(table, vocab, dim, ids, n, scale, out)
    }

    fn rmsnorm(
        &mut self,
        x: Tensor,
        weight: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
        offset: f32,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.rmsnorm_op(x, weight, rows, dim, eps, offset, out)
    }

    fn linear(&mut self, w: &Linear, x: Tensor, n: usize, out: Tensor) -> Result<(), ModelError> {
        let bias = match w.bias {
            Some(b) => Some(self.bias_rows(b, w.rows, n)?),
            None => None,
        };
        let decode = self.decoding();
        self.record(|me, r| {
            let y = me.head(out, n * w.rows)?;
            if let Some(i) = bias {
                r.copy(me.tiled_bias[i].2.slice(0, 4 * (n * w.rows) as u64)?, y)?;
            }
            let (m, xs) = (me.matrix(w.weight), me.head(x, n * w.cols)?);
            let out = if bias.is_some() {
                fused::Out::Add
            } else {
                fused::Out::Store
            };
            fused::product((me.fused, decode), r, m, xs, n, y, out)
        })
    }

    fn rope(
        &mut self,
        x: Tensor,
        n: usize,
        n_heads: usize,
        head_dim: usize,
        positions: Tensor,
        rope: &Rope,
    ) -> Result<(), ModelError> {
        self.rope_op(x, n, n_heads, head_dim, positions, rope)
    }

    fn kv_store(
        &mut self,
        k: Tensor,
        v: Tensor,
        n: usize,
        width: usize,
        positions: Tensor,
        kv: &KvView,
    ) -> Result<(), ModelError> {
        self.kv_store_op(k, v, n, width, positions, kv)
    }

    fn rope_kv(&mut self, a: &RopeKv<'_>, kv: &KvView) -> Result<(), ModelError> {
        self.rope_kv_op(a, kv)
    }

    fn rope_attention(
        &mut self,
        a: &RopeKv<'_>,
        kv: &KvView,
        p: &AttnParams,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.rope_attention_op(a, kv, p, out)
    }

    fn norm_qkv(&mut self, a: &NormQkv<'_>) -> Result<bool, ModelError> {
        self.norm_qkv_op(a)
    }

    fn norm_gated_mlp(&mut self, a: &NormMlp<'_>) -> Result<(), ModelError> {
        self.norm_gated_mlp_op(a)
    }

    fn moe_ffn(&mut self, a: &crate::backend::MoeFfn<'_>) -> Result<(), ModelError> {
        self.moe_ffn_op(a)
    }

    fn norm_linears(
        &mut self,
        x: Tensor,
        norm: (Tensor, f32, f32),
        n: usize,
        h: Tensor,
        ws: &[(&Linear, Tensor)],
    ) -> Result<(), ModelError> {
        self.norm_linears_op(x, norm, n, h, ws)
    }

    fn linear_add(
        &mut self,
        w: &Linear,
        x: Tensor,
        n: usize,
        acc: Tensor,
        tmp: Tensor,
    ) -> Result<(), ModelError> {
        self.linear_add_op(w, x, n, acc, tmp, None)
    }

    fn linear_add_before_norm(
        &mut self,
        w: &Linear,
        x: Tensor,
        n: usize,
        (acc, tmp): (Tensor, Tensor),
        next_norm: (Tensor, f32),
    ) -> Result<(), ModelError> {
        self.linear_add_op(w, x, n, acc, tmp, Some(next_norm))
    }

    fn attention(
        &mut self,
        q: Tensor,
        kv: &KvView,
        n: usize,
        positions: Tensor,
        p: &AttnParams,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.attention_op(q, kv, n, positions, p, out)
    }

    fn gated_act(
        &mut self,
        act: Activation,
        gate: Tensor,
        up: Tensor,
        len: usize,
        out: Tensor,
    ) -> Result<(), ModelError> {
        self.gated_act_op(act, gate, up, len, out)
    }

    fn add_inplace(&mut self, a: Tensor, b: Tensor, len: usize) -> Result<(), ModelError> {
        self.add_inplace_op(a, b, len)
    }

    fn copy(
        &mut self,
        src: Tensor,
        src_offset: usize,
        dst: Tensor,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), ModelError> {
        self.record(|me, r| {
            let s = me.buf(src).slice(4 * src_offset as u64, 4 * len as u64)?;
            let d = me.buf(dst).slice(4 * dst_offset as u64, 4 * len as u64)?;
            Ok(r.copy(s, d)?)
        })
    }

    fn copy_kv(
        &mut self,
        src: Tensor,
        src_offset: usize,
        dst: Tensor,
        dst_offset: usize,
        len: usize,
        dtype: KvType,
    ) -> Result<(), ModelError> {
        // f16 caches pack two values per word, quantized ones 64 per unit (offsets and lengths
        // are whole rows, which are whole words and units).
        let words = |v: usize| dtype.words(v as u64) as usize;
        self.copy(src, words(src_offset), dst, words(dst_offset), words(len))
    }

    fn softcap(&mut self, x: Tensor, len: usize, cap: f32) -> Result<(), ModelError> {
        self.softcap_op(x, len, cap)
    }
}
