//! Device-side tables and scratch the Vulkan backend builds on the host or grows on demand: RoPE
//! (cos, sin) tables, split-K attention partials and counters, and tiled biases; and the host-side
//! choice of the cooperative-matrix prefill attention.

use vkllm_cpu::Rope;
use vkllm_vk::{Buffer, MemoryKind, PrefillAttn};

use super::{RopeTable, VulkanBackend};
use crate::backend::Tensor;
use crate::error::ModelError;

impl VulkanBackend {
    /// The first position of a prefill batch when the cooperative-matrix attention can run it:
    /// the device runs cooperative matrices, the head dim and subgroup size fit the kernel, the
    /// positions (host copy) are consecutive, and no step is being captured.
    pub(super) fn coop_prefill_pos0(
        &self,
        positions: Tensor,
        n: usize,
        head_dim: usize,
    ) -> Option<usize> {
        use vkllm_kernels::attention_prefill_coop::CoopAttnTile;
        let portable = self.dev.tuning().attn_prefill == PrefillAttn::Portable;
        if !self.dev.coopmat() || self.capture_ctx.is_some() || portable {
            return None;
        }
        // Either kernel may take the shape (head dims past 128: only the second, which
        // `coop2_tile` then picks or, failing that, leaves the launch to the portable kernel).
        let sg = self.dev.info().subgroup_size;
        let first = CoopAttnTile::for_shape(head_dim, sg).is_some();
        if !first && head_dim > vkllm_kernels::attention_prefill_coop2::MAX_HEAD_DIM {
            return None;
        }
        let pos = self.host_u32(positions, n);
        let p0 = *pos.first()?;
        let consecutive = pos.iter().enumerate().all(|(i, &p)| p == p0 + i as u32);
        consecutive.then_some(p0 as usize)
    }

    /// The second cooperative-matrix prefill kernel's configuration for `shape`, unless the
    /// tuning's `attn_prefill=coop1` asks for the first one or the shape is outside it.
    pub(super) fn coop2_tile(
        &self,
        shape: &vkllm_kernels::attention::AttnShape,
    ) -> Option<vkllm_kernels::attention_prefill_coop2::CoopAttn2Tile> {
        use vkllm_kernels::attention_prefill_coop2::CoopAttn2Tile;
        let t = self.dev.tuning();
        if t.attn_prefill == PrefillAttn::Coop1 {
            return None;
        }
        let group = shape.n_heads / shape.n_kv_heads.max(1);
        let sg = self.dev.info().subgroup_size;
        let tile = CoopAttn2Tile::with_nsg(t.attn_coop_nsg, shape.head_dim, group, sg, shape.kv)
            .or_else(|| CoopAttn2Tile::for_shape(shape.head_dim, group, sg, shape.kv))?;
        // Wider key steps where the shape takes them.
        let tile = tile
            .with_bk(t.attn_coop_bk, shape.head_dim, sg, shape.kv)
            .unwrap_or(tile);
        let v_ahead = t.attn_coop_vahead.unwrap_or(true);
        Some(CoopAttn2Tile { v_ahead, ..tile })
    }

    /// The workgroup-scope kernel's configuration for `shape` where tuning `attn_prefill` is
    /// `auto` or `cm2`, the device runs VK_NV_cooperative_matrix2 and the kernel takes the
    /// shape (tile, row sums and prefetch as tunings `attn_cm2_*` say).
    pub(super) fn cm2_tile(
        &self,
        shape: &vkllm_kernels::attention::AttnShape,
    ) -> Option<vkllm_kernels::attention_prefill_cm2::CmAttnTile> {
        let t = self.dev.tuning();
        if !matches!(t.attn_prefill, PrefillAttn::Auto | PrefillAttn::Cm2) || !self.dev.coopmat2() {
            return None;
        }
        use vkllm_kernels::attention_prefill_cm2::CmAttnTile;
        let fits = |t: &CmAttnTile| self.dev.info().cm2_attn_fits(t, shape.head_dim);
        let tile = CmAttnTile::for_shape(shape).filter(fits)?;
        // A tile the shape or the device cannot take keeps the kernel's own.
        let tile = t
            .attn_cm2_tile
            .and_then(|(r, k)| tile.with_tile(r, k, shape))
            .filter(fits)
            .unwrap_or(tile);
        Some(vkllm_kernels::attention_prefill_cm2::CmAttnTile {
            sum_mma: t.attn_cm2_mma,
            prefetch: t.attn_cm2_prefetch,
            qscale: t.attn_cm2_qscale,
            unclamped: t.attn_cm2_unclamped,
            stats16: t.attn_cm2_stats16,
            o_halves: t.attn_cm2_ohalf,
            ..tile
        })
    }

    pub(super) fn rope_table(&mut self, rope: &Rope, need: usize) -> Result<usize, ModelError> {
        if let Some(i) = self
            .ropes
            .iter()
            .position(|t| t.rope == *rope && t.max_pos >= need)
        {
            return Ok(i);
        }
        let max_pos = need.next_power_of_two().max(256);
        let mut table = Vec::with_capacity(max_pos * rope.rotary_dim);
        for p in 0..max_pos {
            let (c, s) = rope.cos_sin(p);
            for (c, s) in c.into_iter().zip(s) {
                table.extend([c, s]);
            }
        }
        let buf = self.dev.buffer_from("rope table", &table)?;
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ropes)
            .into_iter()
            .partition(|t| t.rope == *rope);
        self.ropes = keep;
        self.retired.extend(old.into_iter().map(|t| t.buf));
        self.ropes.push(RopeTable {
            rope: *rope,
            max_pos,
            buf,
        });
        Ok(self.ropes.len() - 1)
    }

    pub(super) fn attn_parts(&mut self, ml: u64, o: u64) -> Result<(), ModelError> {
        let big_enough = self
            .attn_parts
            .as_ref()
            .is_some_and(|(a, b)| a.size() >= ml && b.size() >= o);
        if !big_enough {
            // Pending work may still use the old partials: keep them until the next flush.
            if let Some((a, b)) = self.attn_parts.take() {
                self.retired.extend([a, b]);
            }
            self.attn_parts = Some((
                self.dev
                    .create_buffer("attn part_ml", ml, MemoryKind::Device)?,
                self.dev
                    .create_buffer("attn part_o", o, MemoryKind::Device)?,
            ));
        }
        Ok(())
    }

    /// At least `bytes` in each of the two f32 KV staging buffers (`kv_stage`).
    pub(super) fn kv_stage(&mut self, bytes: u64) -> Result<(), ModelError> {
        let mut slot = self.kv_stage.take();
        let r = self.grow_pair(&mut slot, bytes, "kv stage");
        self.kv_stage = slot;
        r
    }

    /// At least `bytes` in each of the two f16 copies of quantized K and V (`kv_half`).
    pub(super) fn kv_half(&mut self, bytes: u64) -> Result<(), ModelError> {
        let mut slot = self.kv_half.take();
        let r = self.grow_pair(&mut slot, bytes, "kv f16 copy");
        self.kv_half = slot;
        r
    }

    /// Replaces a (K, V) scratch pair smaller than `bytes` by a new one.
    fn grow_pair(
        &mut self,
        slot: &mut Option<(Buffer, Buffer)>,
        bytes: u64,
        label: &str,
    ) -> Result<(), ModelError> {
        if slot
            .as_ref()
            .is_some_and(|(k, v)| k.size() >= bytes && v.size() >= bytes)
        {
            return Ok(());
        }
        // Pending work may still use the old rows: keep them until the next flush.
        if let Some((k, v)) = slot.take() {
            self.retired.extend([k, v]);
        }
        *slot = Some((
            self.dev
                .create_buffer(&format!("{label} k"), bytes, MemoryKind::Device)?,
            self.dev
                .create_buffer(&format!("{label} v"), bytes, MemoryKind::Device)?,
        ));
        Ok(())
    }

    /// At least `bytes` of zeroed attention counters (a new buffer is zeroed on creation; the
    /// kernel leaves the counters zero after each dispatch, so a kept one stays zeroed).
    pub(super) fn attn_counters(&mut self, bytes: u64) -> Result<(), ModelError> {
        if self
            .attn_counters
            .as_ref()
            .is_some_and(|c| c.size() >= bytes)
        {
            return Ok(());
        }
        // Pending work may still use the old counters: keep them until the next flush.
        if let Some(c) = self.attn_counters.take() {
            self.retired.push(c);
        }
        let zeros = vec![0u32; bytes.div_ceil(4) as usize];
        self.attn_counters = Some(self.dev.buffer_from("attn counters", &zeros)?);
        Ok(())
    }

    pub(super) fn bias_rows(
        &mut self,
        bias: Tensor,
        rows: usize,
        n: usize,
    ) -> Result<usize, ModelError> {
        if let Some(i) = self
            .tiled_bias
            .iter()
            .position(|(b, m, _)| *b == bias && *m >= n)
        {
            return Ok(i);
        }
        let mut one = vec![0u8; 4 * rows];
        self.dev.download(self.buf(bias), 0, &mut one)?;
        let m = n.next_power_of_two();
        let tiled: Vec<u8> = one.iter().copied().cycle().take(one.len() * m).collect();
        let buf = self.dev.buffer_from("tiled bias", &tiled)?;
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.tiled_bias)
            .into_iter()
            .partition(|(b, _, _)| *b == bias);
        self.tiled_bias = keep;
        self.retired.extend(old.into_iter().map(|(_, _, buf)| buf));
        self.tiled_bias.push((bias, m, buf));
        Ok(self.tiled_bias.len() - 1)
    }
}
