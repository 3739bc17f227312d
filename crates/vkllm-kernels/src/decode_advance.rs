//! `shaders/decode_advance.wgsl`: the per-slot bookkeeping between recorded decode steps
//! (sampled id -> next input, id ring, penalty counts, sampler step, position, retirement).

use crate::sample::SampleRow;
use crate::sources::DECODE_ADVANCE as SRC;
use crate::spec::{need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static DECODE_ADVANCE: KernelSpec = KernelSpec {
    name: "decode_advance",
    file: "decode_advance.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[
        rd("sampled"),
        rw("ids"),
        rw("pos"),
        rw("cfg"),
        rw("counts"),
        rw("ring"),
        rw("ctl"),
    ],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DecodeAdvanceParams {
    pub n_rows: u32,
    pub v: u32,
    pub capacity: u32,
    pub ring_steps: u32,
}

/// The slots a [`DecodeAdvance`] dispatch updates.
#[derive(Clone, Copy, Debug)]
pub struct DecodeAdvanceShape {
    pub rows: usize,
    pub vocab: usize,
    /// Positions per slot: a slot whose next position would reach it retires.
    pub capacity: usize,
    pub ring_steps: usize,
    /// `counts` holds `[rows, vocab]` (otherwise no row may use counts).
    pub counts: bool,
}

pub struct DecodeAdvance<B> {
    pub sampled: B,
    pub ids: B,
    pub pos: B,
    /// One `SampleRow` per row.
    pub cfg: B,
    pub counts: B,
    pub ring: B,
    pub ctl: B,
}

impl<B: KernelBuffer> DecodeAdvance<B> {
    pub fn dispatch(self, s: &DecodeAdvanceShape) -> Result<Dispatch<B>, Error> {
        let k = &DECODE_ADVANCE;
        if s.rows == 0 || s.vocab == 0 || s.capacity == 0 || s.ring_steps == 0 {
            return Err(shape_err(k, "empty rows, vocabulary, capacity or ring"));
        }
        let rows = 4 * s.rows as u64;
        need(k, "sampled", &self.sampled, rows)?;
        need(k, "ids", &self.ids, rows)?;
        need(k, "pos", &self.pos, rows)?;
        need(
            k,
            "cfg",
            &self.cfg,
            (std::mem::size_of::<SampleRow>() * s.rows) as u64,
        )?;
        if s.counts {
            need(k, "counts", &self.counts, 4 * (s.rows * s.vocab) as u64)?;
        }
        need(k, "ring", &self.ring, rows * s.ring_steps as u64)?;
        need(k, "ctl", &self.ctl, 4)?;
        let p = DecodeAdvanceParams {
            n_rows: to_u32(k, "rows", s.rows)?,
            v: to_u32(k, "vocab", s.vocab)?,
            capacity: to_u32(k, "capacity", s.capacity)?,
            ring_steps: to_u32(k, "ring_steps", s.ring_steps)?,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new(),
            vec![
                self.sampled,
                self.ids,
                self.pos,
                self.cfg,
                self.counts,
                self.ring,
                self.ctl,
            ],
            &p,
            [1, 1, 1],
        ))
    }
}
