//! The CPU backend: every op runs at once through the `vkllm-cpu` reference ops.
//!
//! It is the oracle of the model-level parity ladder (tier "cpu vs transformers"), so it favours
//! clarity over speed: tensors are plain vectors in an arena indexed by handle.

use vkllm_cpu as ops;
use vkllm_cpu::kv_quant::KvQuant;
use vkllm_cpu::{AttnParams, DeltaShape, Rope};

use super::cpu_pages::{CPU_KV_PAGE_BYTES, PagePool, PagedKv};
use super::{
    Backend, Experts, HybridOps, KvPageOp, KvRows, KvType, KvView, Linear, StateView, Tensor,
};
use crate::error::ModelError;
use crate::family::Activation;

pub(super) enum Buf {
    F32(Vec<f32>),
    U32(Vec<u32>),
    /// A paged KV tensor (`cpu_pages`).
    Paged(PagedKv),
}

/// Tokens per chunk of the chunked delta rule (transformers' default `chunk_size`).
pub const DELTA_CHUNK: usize = 64;

/// Runs the model graph on the host with the reference ops.
#[derive(Default)]
pub struct CpuBackend {
    pub(super) bufs: Vec<Buf>,
    /// The pages of paged KV tensors.
    pub(super) pool: PagePool,
    /// Quantized K caches store their keys as they are (`Backend::centre_keys` false; tuning
    /// `kv_centre=0`).
    pub uncentred_keys: bool,
    /// Centred keys store the key at position 0 like the rest, with no sink offset
    /// (`Backend::sink_keys` false; tuning `kv_sink=0`).
    pub no_sink_offset: bool,
    /// q4_0 V caches store their values as they are (`Backend::rotate_values` false; tuning
    /// `kv_rot_v=0`).
    pub plain_values: bool,
}

impl CpuBackend {
    pub fn new() -> Self {
        Self::default()
    }

    pub(super) fn push(&mut self, b: Buf) -> Tensor {
        self.bufs.push(b);
        Tensor::from_index((self.bufs.len() - 1) as u32)
    }

    /// The f32 contents of a tensor. Panics on a u32 or paged tensor or a foreign handle: a
    /// programming error in the graph code, not bad input (paged KV tensors are read through
    /// `values`).
    pub fn f32(&self, t: Tensor) -> &[f32] {
        match &self.bufs[t.index()] {
            Buf::F32(v) => v,
            Buf::U32(_) => panic!("tensor {t:?} is u32, used as f32"),
            Buf::Paged(_) => panic!("tensor {t:?} is paged, used as a plain f32 tensor"),
        }
    }

    /// Values held in pages of paged KV tensors now (shared pages once).
    pub fn kv_paged_values(&self) -> usize {
        self.pool.values()
    }

    /// Values in an f32 or paged tensor.
    fn f32_len(&self, t: Tensor) -> usize {
        match &self.bufs[t.index()] {
            Buf::Paged(kv) => kv.len(),
            _ => self.f32(t).len(),
        }
    }

    fn u32(&self, t: Tensor) -> &[u32] {
        match &self.bufs[t.index()] {
            Buf::U32(v) => v,
            _ => panic!("tensor {t:?} is not u32, used as u32"),
        }
    }

    /// Takes an f32 buffer out of the arena so it can be written while others are read.
    fn take(&mut self, t: Tensor) -> Vec<f32> {
        match &mut self.bufs[t.index()] {
            Buf::F32(v) => std::mem::take(v),
            Buf::U32(_) => panic!("tensor {t:?} is u32, used as f32"),
            Buf::Paged(_) => panic!("tensor {t:?} is paged, used as a plain f32 tensor"),
        }
    }

    fn put(&mut self, t: Tensor, v: Vec<f32>) {
        self.bufs[t.index()] = Buf::F32(v);
    }

    fn u32_mut(&mut self, t: Tensor) -> &mut [u32] {
        match &mut self.bufs[t.index()] {
            Buf::U32(v) => v,
            _ => panic!("tensor {t:?} is not u32, used as u32"),
        }
    }

    fn positions(&self, t: Tensor, n: usize) -> Vec<usize> {
        self.u32(t)[..n].iter().map(|&p| p as usize).collect()
    }

    /// The runs of rows an `n`-row recurrent op processes: `(first row, rows, slot)`, one run
    /// of all rows for `Slot(s)`, one row per slot for `PerRow` (slot `None`: idle).
    fn state_runs(&self, st: &StateView, n: usize) -> Vec<(usize, usize, Option<usize>)> {
        match st.rows {
            KvRows::Slot(s) => vec![(0, n, Some(s))],
            KvRows::PerRow => self
                .positions(st.positions, n)
                .into_iter()
                .enumerate()
                .map(|(i, p)| (i, 1, (p < st.capacity).then_some(i)))
                .collect(),
        }
    }
    /// [`Backend::attention`] into `o` (the output tensor, taken out of the arena).
    fn attention_into(
        &self,
        q: Tensor,
        kv: &KvView,
        n: usize,
        pos: &[usize],
        p: &AttnParams,
        o: &mut [f32],
    ) -> Result<(), ModelError> {
        let kv_w = p.n_kv_heads * p.head_dim;
        let q_w = p.n_heads * p.head_dim;
        match kv.rows {
            KvRows::Slot(s) => {
                let n_kv = pos.iter().max().map_or(0, |&m| m + 1);
                if n_kv > kv.capacity {
                    return Err(ModelError::ContextFull {
                        pos: n_kv - 1,
                        capacity: kv.capacity,
                    });
                }
                let base = s * kv.stride * kv_w;
                let rows = n_kv.min(kv.ring) * kv_w;
                ops::attention_ring(
                    &self.f32(q)[..n * q_w],
                    &self.values(kv.k, base, rows)?,
                    &self.values(kv.v, base, rows)?,
                    n,
                    n_kv,
                    kv.ring,
                    pos,
                    p,
                    &mut o[..n * q_w],
                );
            }
            KvRows::PerRow => {
                for (i, &ps) in pos.iter().enumerate() {
                    let out_row = &mut o[i * q_w..(i + 1) * q_w];
                    if ps >= kv.capacity {
                        out_row.fill(0.0);
                        continue;
                    }
                    let base = i * kv.stride * kv_w;
                    let n_kv = ps + 1;
                    let rows = n_kv.min(kv.ring) * kv_w;
                    ops::attention_ring(
                        &self.f32(q)[i * q_w..(i + 1) * q_w],
                        &self.values(kv.k, base, rows)?,
                        &self.values(kv.v, base, rows)?,
                        1,
                        n_kv,
                        kv.ring,
                        &[ps],
                        p,
                        out_row,
                    );
                }
            }
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn alloc_f32(&mut self, len: usize) -> Result<Tensor, ModelError> {
        Ok(self.push(Buf::F32(vec![0.0; len])))
    }

    fn alloc_u32(&mut self, len: usize) -> Result<Tensor, ModelError> {
        Ok(self.push(Buf::U32(vec![0; len])))
    }

    fn alloc_kv(&mut self, len: usize, _dtype: KvType) -> Result<Tensor, ModelError> {
        // f16 caches hold f32 values rounded to f16 when stored (see kv_store).
        self.alloc_f32(len)
    }

    fn kv_page_bytes(&self) -> Option<u64> {
        Some(CPU_KV_PAGE_BYTES)
    }

    fn alloc_kv_paged(
        &mut self,
        len: usize,
        dtype: KvType,
        resident: bool,
    ) -> Result<Tensor, ModelError> {
        Ok(self.alloc_kv_paged_(len, dtype, resident))
    }

    fn kv_pages(&mut self, op: KvPageOp<'_>) -> Result<usize, ModelError> {
        self.kv_pages_(op)
    }

    fn kv_paged_bytes(&self) -> u64 {
        // The cache stores f32 whatever its type (see kv_store).
        4 * self.kv_paged_values() as u64
    }

    fn centre_keys(&self) -> bool {
        !self.uncentred_keys
    }
    fn rotate_values(&self) -> bool {
        !self.plain_values
    }
    fn sink_keys(&self) -> bool {
        !self.no_sink_offset
    }

    fn upload_f32(&mut self, data: &[f32]) -> Result<Tensor, ModelError> {
        Ok(self.push(Buf::F32(data.to_vec())))
    }

    fn upload_matrix(
        &mut self,
        data: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<Tensor, ModelError> {
        assert_eq!(data.len(), rows * cols, "upload_matrix: shape");
        self.upload_f32(data)
    }

    /// Dequantized once here (the values `tensor_f32` of the same source would give), so a
    /// source that makes blocks on the fly (quantize at load) is not asked twice.
    fn upload_matrix_raw(
        &mut self,
        ty: vkllm_cpu::quant::QuantType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Option<Tensor>, ModelError> {
        let n = rows
            .checked_mul(cols)
            .ok_or_else(|| ModelError::TensorShape {
                name: format!("{ty} matrix"),
                expected: vec![rows, cols],
                found: vec![bytes.len()],
            })?;
        let data = vkllm_cpu::quant::dequantize_to_vec(ty, bytes, n)?;
        Ok(Some(self.push(Buf::F32(data))))
    }

    fn write_u32(&mut self, t: Tensor, data: &[u32]) -> Result<(), ModelError> {
        match &mut self.bufs[t.index()] {
            Buf::U32(v) => v[..data.len()].copy_from_slice(data),
            _ => panic!("tensor {t:?} is not u32, written as u32"),
        }
        Ok(())
    }

    fn read_f32(&mut self, t: Tensor, offset: usize, out: &mut [f32]) -> Result<(), ModelError> {
        out.copy_from_slice(&self.values(t, offset, out.len())?);
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
        let ids = self.u32(ids)[..n].to_vec();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(ModelError::TokenOutOfRange { id, vocab });
        }
        let mut o = self.take(out);
        let r = ops::embedding(self.f32(table), dim, &ids, &mut o[..n * dim]);
        if let (Ok(()), Some(s)) = (&r, scale) {
            o[..n * dim].iter_mut().for_each(|x| *x *= s);
        }
        self.put(out, o);
        Ok(r?)
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
        let len = rows * dim;
        let mut o = self.take(out);
        let input: Vec<f32> = if x == out {
            o[..len].to_vec()
        } else {
            self.f32(x)[..len].to_vec()
        };
        ops::rmsnorm(&input, &self.f32(weight)[..dim], eps, offset, &mut o[..len]);
        self.put(out, o);
        Ok(())
    }

    fn linear(&mut self, w: &Linear, x: Tensor, n: usize, out: Tensor) -> Result<(), ModelError> {
        let mut o = self.take(out);
        let y = &mut o[..n * w.rows];
        ops::matmul(
            self.f32(w.weight),
            w.rows,
            w.cols,
            &self.f32(x)[..n * w.cols],
            n,
            y,
        );
        if let Some(b) = w.bias {
            let bias = &self.f32(b)[..w.rows];
            for row in y.chunks_mut(w.rows) {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
        }
        self.put(out, o);
        Ok(())
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
        let pos = self.positions(positions, n);
        let mut v = self.take(x);
        rope.apply_rows(&mut v[..n * n_heads * head_dim], n, n_heads, head_dim, &pos);
        self.put(x, v);
        Ok(())
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
        let pos = self.positions(positions, n);
        // Destination row of each token, or None for a skipped (idle) slot row.
        let dst = match kv.rows {
            KvRows::Slot(s) => {
                if let Some(&p) = pos.iter().find(|&&p| p >= kv.capacity) {
                    return Err(ModelError::ContextFull {
                        pos: p,
                        capacity: kv.capacity,
                    });
                }
                ops::kv::kv_rows(&pos, kv.capacity, kv.ring, kv.stride, s, false)
            }
            KvRows::PerRow => ops::kv::kv_rows(&pos, kv.capacity, kv.ring, kv.stride, 0, true),
        };
        let mut row = vec![0.0; width];
        // Centred keys: stored as scale * code((k - shift) / scale), what attention over the
        // GPU's blocks with the query times the scales sees (the shift moves no softmax); the
        // key at position 0 as scale * (code((k - shift) / scale - sink) + sink).
        let centre = match kv.centre {
            Some(c) => {
                let all = self.f32(c.table);
                let part = all
                    .get(..3 * width)
                    .ok_or_else(|| ModelError::TensorShape {
                        name: "key centring".into(),
                        expected: vec![3, width],
                        found: vec![all.len()],
                    })?;
                Some(part.to_vec())
            }
            None => None,
        };
        for (which, (src, cache)) in [(k, kv.k), (v, kv.v)].into_iter().enumerate() {
            for (i, d) in dst.iter().enumerate() {
                let Some(r) = *d else { continue };
                row.copy_from_slice(&self.f32(src)[i * width..(i + 1) * width]);
                // The cache keeps f32; it holds what a cache of kv.dtype would read back.
                let dtype = [kv.dtype, kv.v_dtype][which];
                if dtype == KvType::F16 {
                    row.iter_mut()
                        .for_each(|x| *x = half::f16::from_f32(*x).to_f32());
                } else if let Some(q) = KvQuant::from_name(dtype.name()) {
                    match (&centre, which) {
                        (Some(c), 0) => {
                            let (shift_inv, sink) = c.split_at(2 * width);
                            ops::kv_quant::centre(&mut row, shift_inv);
                            let first = pos[i] == 0;
                            if first {
                                row.iter_mut().zip(sink).for_each(|(x, o)| *x -= o);
                            }
                            q.round_trip(&mut row, kv.rot.k);
                            if first {
                                row.iter_mut().zip(sink).for_each(|(x, o)| *x += o);
                            }
                            row.iter_mut()
                                .zip(&shift_inv[width..])
                                .for_each(|(x, r)| *x /= r);
                        }
                        _ => q.round_trip(&mut row, [kv.rot.k, kv.rot.v][which]),
                    }
                }
                self.write_values(cache, r * width, &row)?;
            }
        }
        Ok(())
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
        let pos = self.positions(positions, n);
        let mut o = self.take(out);
        let r = self.attention_into(q, kv, n, &pos, p, &mut o);
        self.put(out, o);
        r
    }

    fn gated_act(
        &mut self,
        act: Activation,
        gate: Tensor,
        up: Tensor,
        len: usize,
        out: Tensor,
    ) -> Result<(), ModelError> {
        assert!(out != gate && out != up, "gated_act: out aliases an input");
        let mut o = self.take(out);
        let (g, u) = (&self.f32(gate)[..len], &self.f32(up)[..len]);
        match act {
            Activation::Silu => ops::silu_mul(g, u, &mut o[..len]),
            Activation::GeluTanh => ops::gelu_tanh_mul(g, u, &mut o[..len]),
        }
        self.put(out, o);
        Ok(())
    }

    fn add_inplace(&mut self, a: Tensor, b: Tensor, len: usize) -> Result<(), ModelError> {
        assert_ne!(a, b, "add_inplace: a and b alias");
        let mut v = self.take(a);
        v[..len]
            .iter_mut()
            .zip(&self.f32(b)[..len])
            .for_each(|(x, y)| *x += y);
        self.put(a, v);
        Ok(())
    }

    fn copy(
        &mut self,
        src: Tensor,
        src_offset: usize,
        dst: Tensor,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), ModelError> {
        let range_err = |t: Tensor, off: usize, have: usize| ModelError::TensorShape {
            name: format!("copy range of {t:?}"),
            expected: vec![off.saturating_add(len)],
            found: vec![have],
        };
        let src_len = self.f32_len(src);
        let dst_len = self.f32_len(dst);
        if src_offset.checked_add(len).is_none_or(|e| e > src_len) {
            return Err(range_err(src, src_offset, src_len));
        }
        if dst_offset.checked_add(len).is_none_or(|e| e > dst_len) {
            return Err(range_err(dst, dst_offset, dst_len));
        }
        if matches!(self.bufs[src.index()], Buf::Paged(_))
            || matches!(self.bufs[dst.index()], Buf::Paged(_))
        {
            // Paged KV rows (a partial block given to another slot): through the pages.
            let v = self.values(src, src_offset, len)?.into_owned();
            return self.write_values(dst, dst_offset, &v);
        }
        let mut d = self.take(dst);
        if src == dst {
            // Two ranges of one tensor (a mark copied to another mark of the same layer).
            d.copy_within(src_offset..src_offset + len, dst_offset);
        } else {
            d[dst_offset..dst_offset + len]
                .copy_from_slice(&self.f32(src)[src_offset..src_offset + len]);
        }
        self.put(dst, d);
        Ok(())
    }

    fn softcap(&mut self, x: Tensor, len: usize, cap: f32) -> Result<(), ModelError> {
        let mut v = self.take(x);
        ops::softcap(&mut v[..len], cap);
        self.put(x, v);
        Ok(())
    }
}

impl HybridOps for CpuBackend {
    fn causal_conv1d(
        &mut self,
        x: Tensor,
        n: usize,
        channels: usize,
        kernel: usize,
        weight: Tensor,
        st: &StateView,
        out: Tensor,
    ) -> Result<(), ModelError> {
        st.check(n);
        let len = (kernel - 1) * channels;
        let mut o = self.take(out);
        let mut s = self.take(st.state);
        let (xs, w) = (self.f32(x), &self.f32(weight)[..channels * kernel]);
        for (r0, rows, slot) in self.state_runs(st, n) {
            let span = r0 * channels..(r0 + rows) * channels;
            match slot {
                Some(slot) => ops::causal_conv1d(
                    &xs[span.clone()],
                    channels,
                    w,
                    &mut s[slot * len..(slot + 1) * len],
                    true,
                    &mut o[span],
                ),
                None => o[span].fill(0.0),
            }
        }
        self.put(st.state, s);
        self.put(out, o);
        Ok(())
    }

    fn gated_delta_rule(
        &mut self,
        qkv: Tensor,
        n: usize,
        shape: &DeltaShape,
        a: Tensor,
        b: Tensor,
        a_log: Tensor,
        dt_bias: Tensor,
        st: &StateView,
        out: Tensor,
    ) -> Result<(), ModelError> {
        st.check(n);
        let (qw, vw, hv) = (shape.qk_width(), shape.v_width(), shape.n_v_heads);
        let width = 2 * qw + vw;
        let len = shape.state_len();
        let rows = &self.f32(qkv)[..n * width];
        let mut q = Vec::with_capacity(n * qw);
        let mut k = Vec::with_capacity(n * qw);
        let mut v = Vec::with_capacity(n * vw);
        for r in rows.chunks_exact(width) {
            q.extend_from_slice(&r[..qw]);
            k.extend_from_slice(&r[qw..2 * qw]);
            v.extend_from_slice(&r[2 * qw..]);
        }
        let mut g = vec![0f32; n * hv];
        let mut beta = vec![0f32; n * hv];
        ops::delta_gates(
            &self.f32(a)[..n * hv],
            &self.f32(b)[..n * hv],
            &self.f32(a_log)[..hv],
            &self.f32(dt_bias)[..hv],
            &mut g,
            &mut beta,
        );
        let runs = self.state_runs(st, n);
        let mut s = self.take(st.state);
        let mut o = self.take(out);
        for (r0, m, slot) in runs {
            let y = &mut o[r0 * vw..(r0 + m) * vw];
            let Some(slot) = slot else {
                y.fill(0.0);
                continue;
            };
            let sl = &mut s[slot * len..(slot + 1) * len];
            let (qk, vv, gb) = (
                r0 * qw..(r0 + m) * qw,
                r0 * vw..(r0 + m) * vw,
                r0 * hv..(r0 + m) * hv,
            );
            let (q, k, v) = (&q[qk.clone()], &k[qk], &v[vv]);
            let (g, beta) = (&g[gb.clone()], &beta[gb]);
            if m == 1 {
                ops::gated_delta_rule(shape, q, k, v, g, beta, sl, y);
            } else {
                ops::gated_delta_rule_chunked(shape, DELTA_CHUNK, q, k, v, g, beta, sl, y);
            }
        }
        self.put(st.state, s);
        self.put(out, o);
        Ok(())
    }

    fn gated_rmsnorm(
        &mut self,
        x: Tensor,
        z: Tensor,
        weight: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
        out: Tensor,
    ) -> Result<(), ModelError> {
        let len = rows * dim;
        let mut o = self.take(out);
        ops::gated_rmsnorm(
            &self.f32(x)[..len],
            &self.f32(z)[..len],
            &self.f32(weight)[..dim],
            eps,
            &mut o[..len],
        );
        self.put(out, o);
        Ok(())
    }

    fn sigmoid_mul(
        &mut self,
        x: Tensor,
        gate: Tensor,
        rows: usize,
        cols: usize,
        per_row: bool,
    ) -> Result<(), ModelError> {
        assert_ne!(x, gate, "sigmoid_mul: x and gate alias");
        let mut v = self.take(x);
        let glen = if per_row { rows } else { rows * cols };
        ops::sigmoid_mul(&mut v[..rows * cols], &self.f32(gate)[..glen], rows);
        self.put(x, v);
        Ok(())
    }

    fn moe_route(
        &mut self,
        logits: Tensor,
        n: usize,
        n_experts: usize,
        top_k: usize,
        renormalize: bool,
        shared: bool,
        ids: Tensor,
        weights: Tensor,
    ) -> Result<(), ModelError> {
        let (ew, kk) = (n_experts + shared as usize, top_k + shared as usize);
        let l = self.f32(logits)[..n * ew].to_vec();
        let mut w = self.take(weights);
        let mut e = vec![0u32; n * kk];
        let route = if shared {
            ops::moe_route_shared
        } else {
            ops::moe_route
        };
        route(&l, n_experts, top_k, renormalize, &mut e, &mut w[..n * kk]);
        self.put(weights, w);
        self.u32_mut(ids)[..n * kk].copy_from_slice(&e);
        Ok(())
    }

    fn moe_experts(
        &mut self,
        x: Tensor,
        n: usize,
        ex: &Experts,
        act: Activation,
        top_k: usize,
        ids: Tensor,
        weights: Tensor,
        _scratch: Tensor,
        out: Tensor,
    ) -> Result<(), ModelError> {
        if act != Activation::Silu {
            return Err(self.unsupported("moe_experts with a non-SiLU activation"));
        }
        let h = ex.hidden;
        let shape = ops::MoeShape {
            n_experts: ex.n_experts,
            hidden: h,
            ff: ex.ff,
            top_k,
        };
        let ids = self.u32(ids)[..n * top_k].to_vec();
        let mut o = self.take(out);
        ops::moe_experts(
            &shape,
            &self.f32(x)[..n * h],
            self.f32(ex.gate),
            self.f32(ex.up),
            self.f32(ex.down),
            &ids,
            &self.f32(weights)[..n * top_k],
            &mut o[..n * h],
        );
        self.put(out, o);
        Ok(())
    }
}
