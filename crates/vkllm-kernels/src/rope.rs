//! `shaders/rope.wgsl`: rotary position embedding from a host-computed (cos, sin) table.

use crate::sources::ROPE as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

pub static ROPE: KernelSpec = KernelSpec {
    name: "rope",
    file: "rope.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rw("x"), rd("pos"), rd("table")],
    push_size: 24,
    exact_fp: false,
    glsl: None,
};

/// Which dimensions are rotated together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs `(2i, 2i + 1)` (GPT-J, llama.cpp's "normal" mode).
    Interleaved,
    /// Pairs `(i, i + rotary_dim / 2)` (GPT-NeoX, transformers' `rotate_half`).
    NeoX,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RopeParams {
    pub n_tok: u32,
    pub n_heads: u32,
    pub head_dim: u32,
    pub rotary_dim: u32,
    pub style: u32,
    pub max_pos: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct RopeShape {
    pub n_tok: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    /// Rotated dims (<= head_dim, even); the rest pass through (partial rotary).
    pub rotary_dim: usize,
    pub layout: RopeLayout,
    /// Positions covered by the table (`table` holds `max_pos * rotary_dim / 2` pairs).
    pub max_pos: usize,
}

/// Builds the `(cos, sin)` table for positions `0..max_pos` from `inv_freq` (length
/// `rotary_dim / 2`) with `angle(pos, inv_freq)` giving the angle, so the caller computes it
/// exactly as its reference does; `cos`/`sin` are evaluated in f64 and rounded to f32.
pub fn rope_table(
    inv_freq: &[f32],
    max_pos: usize,
    angle: impl Fn(usize, f32) -> f64,
) -> Vec<[f32; 2]> {
    let mut t = Vec::with_capacity(max_pos * inv_freq.len());
    for pos in 0..max_pos {
        for &f in inv_freq {
            let a = angle(pos, f);
            t.push([a.cos() as f32, a.sin() as f32]);
        }
    }
    t
}

/// Rotates `x` ([n_tok, n_heads, head_dim], in place) by the angles of `pos[t]`.
pub struct Rope<B> {
    pub x: B,
    pub pos: B,
    pub table: B,
}

impl<B: KernelBuffer> Rope<B> {
    pub fn dispatch(self, s: &RopeShape) -> Result<Dispatch<B>, Error> {
        let k = &ROPE;
        if !s.rotary_dim.is_multiple_of(2) || s.rotary_dim > s.head_dim || s.rotary_dim == 0 {
            return Err(shape_err(
                k,
                format!(
                    "rotary_dim {} must be even, > 0 and <= head_dim {}",
                    s.rotary_dim, s.head_dim
                ),
            ));
        }
        need(
            k,
            "x",
            &self.x,
            4 * (s.n_tok * s.n_heads * s.head_dim) as u64,
        )?;
        need(k, "pos", &self.pos, 4 * s.n_tok as u64)?;
        need(
            k,
            "table",
            &self.table,
            8 * (s.max_pos * s.rotary_dim / 2) as u64,
        )?;
        let p = RopeParams {
            n_tok: to_u32(k, "n_tok", s.n_tok)?,
            n_heads: to_u32(k, "n_heads", s.n_heads)?,
            head_dim: to_u32(k, "head_dim", s.head_dim)?,
            rotary_dim: to_u32(k, "rotary_dim", s.rotary_dim)?,
            style: match s.layout {
                RopeLayout::Interleaved => 0,
                RopeLayout::NeoX => 1,
            },
            max_pos: to_u32(k, "max_pos", s.max_pos)?,
        };
        let pairs = (s.n_tok * s.n_heads * s.rotary_dim / 2) as u64;
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![self.x, self.pos, self.table],
            &p,
            grid_for(k, pairs.div_ceil(WG as u64))?,
        ))
    }
}
