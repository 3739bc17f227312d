//! The text form of [`Tuning`]: `key=value` specs (`--tune`, `VKLLM_TUNE`) parsed onto the
//! defaults, and printed back (every key, or only the changed ones).

use std::fmt;

use vkllm_kernels::matmul_cm2::CmTile;
use vkllm_kernels::matmul_coop::CoopTile;

use super::*;

fn tile_name(t: CoopTile) -> &'static str {
    [
        (CoopTile::TINY, "tiny"),
        (CoopTile::SMALL, "small"),
        (CoopTile::LARGE, "large"),
        (CoopTile::WIDE, "wide"),
        (CoopTile::TALL, "tall"),
    ]
    .iter()
    .find(|(c, _)| *c == t)
    .map_or("custom", |(_, n)| n)
}

impl Tuning {
    /// The defaults with `spec` applied: comma-separated `key=value` pairs (see [`TUNING_KEYS`];
    /// whitespace around items is ignored, an empty spec changes nothing).
    pub fn parse(spec: &str) -> Result<Tuning, TuneError> {
        let mut t = Tuning::default();
        t.apply(spec)?;
        Ok(t)
    }

    /// Applies `spec` (as [`Tuning::parse`]) on top of `self`.
    pub fn apply(&mut self, spec: &str) -> Result<(), TuneError> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| TuneError::Syntax(item.to_string()))?;
            self.set(k.trim(), v.trim())?;
        }
        Ok(())
    }

    /// Sets one key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), TuneError> {
        let bad = |expected: &'static str| TuneError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        let flag = || match value {
            "1" | "on" | "true" => Ok(true),
            "0" | "off" | "false" => Ok(false),
            _ => Err(bad("1 or 0")),
        };
        let num = || value.parse::<u64>().map_err(|_| bad("a number"));
        let in_range = |lo: u64, hi: u64| {
            num().and_then(|n| {
                if (lo..=hi).contains(&n) {
                    Ok(n)
                } else {
                    Err(bad("a number in range"))
                }
            })
        };
        // A matmul_cm2 tile, `auto` or MxNxK that the shader takes (`gated`: two accumulators).
        let cm2_tile = |gated: bool| -> Result<Option<CmTile>, TuneError> {
            if value == "auto" {
                return Ok(None);
            }
            let v: Vec<u32> = value.split('x').map_while(|x| x.parse().ok()).collect();
            let tile = match v[..] {
                [bm, bn, bk] => Some(CmTile {
                    bm,
                    bn,
                    bk,
                    tokens_first: false,
                }),
                _ => None,
            };
            tile.filter(|t| t.fits(gated)).map(Some).ok_or_else(|| {
                bad(
                    "auto or MxNxK: sides multiples of 16 up to 256, K 16, 32 or 64, \
                     at most 128 accumulator values an invocation (two accumulators when gated)",
                )
            })
        };
        match key {
            "matvec" => {
                self.matvec = match value {
                    "auto" => None,
                    "reference" => Some(MatvecImpl::Reference),
                    "fast" => Some(MatvecImpl::Fast),
                    "int8" => Some(MatvecImpl::Int8),
                    _ => return Err(bad("auto, reference, fast or int8")),
                }
            }
            "matvec_layout" => {
                self.matvec_layout = match value {
                    "auto" => None,
                    "teams" => Some(MatvecLayout::Teams),
                    "rows" => Some(MatvecLayout::Rows),
                    _ => return Err(bad("auto, teams or rows")),
                }
            }
            "q8a_wide" => self.q8a_wide = flag()?,
            "q8a_quad" => self.q8a_quad = flag()?,
            "q8a_workgroups" => self.q8a_workgroups = in_range(0, 1 << 20)? as u32,
            "q8a_xg" => self.q8a_xg = flag()?,
            "q8a_xg1" => self.q8a_xg1 = flag()?,
            "q8a_xg1_norm" => self.q8a_xg1_norm = in_range(0, 1 << 20)? as u32,
            "q8a_xg1_produce" => self.q8a_xg1_produce = flag()?,
            "q8a_xg1_reuse" => self.q8a_xg1_reuse = flag()?,
            "q8a_mixed" => self.q8a_mixed = flag()?,
            "q8a_wg" => {
                let w = in_range(0, 1024)? as u32;
                if w != 0 && (w < 32 || !w.is_power_of_two()) {
                    return Err(bad("0 or a power of two from 32 to 1024"));
                }
                self.q8a_wg = w;
            }
            "q8a_xg_lanes" => {
                let l = in_range(0, 32)? as u32;
                if l != 0 && !l.is_power_of_two() {
                    return Err(bad("0 or a power of two up to 32"));
                }
                self.q8a_xg_lanes = l;
            }
            "q8a_xg_rows" => self.q8a_xg_rows = in_range(0, 2)? as u32,
            "decode_int8_max_n" => self.decode_int8_max_n = in_range(1, 256)? as u32,
            "coop_narrow" => self.coop_narrow = in_range(0, 64)? as u32,
            "coop_narrow_min" => self.coop_narrow_min = in_range(2, 65)? as u32,
            "coop_narrow_q6k" => self.coop_narrow_q6k = flag()?,
            "coop_narrow_split" => {
                self.coop_narrow_split = match value {
                    "auto" => None,
                    _ => Some(in_range(1, 16)? as u32),
                }
            }
            "coopmat" => self.coopmat = flag()?,
            "splitk" => {
                self.splitk = match value {
                    "auto" => SplitK::Auto,
                    "off" | "0" => SplitK::Off,
                    _ => SplitK::Target(in_range(1, 1 << 16)? as usize),
                }
            }
            "coop_bk" => {
                self.coop_bk = match value {
                    "32" => 32,
                    "64" => 64,
                    _ => return Err(bad("32 or 64")),
                }
            }
            "coop_direct" => self.coop_direct = flag()?,
            "coop_float_split" => self.coop_float_split = flag()?,
            "coop_x_f16" => self.coop_x_f16 = flag()?,
            "coop_tile" => {
                self.coop_tile = match value {
                    "auto" => None,
                    "tiny" => Some(CoopTile::TINY),
                    "small" => Some(CoopTile::SMALL),
                    "large" => Some(CoopTile::LARGE),
                    "wide" => Some(CoopTile::WIDE),
                    "tall" => Some(CoopTile::TALL),
                    _ => return Err(bad("auto, tiny, small, large, wide or tall")),
                }
            }
            "coop_glu" => self.coop_glu = flag()?,
            "coop_glu_half" => self.coop_glu_half = flag()?,
            "cm2_matmul" => self.cm2_matmul = flag()?,
            "cm2_matmul_decode" => self.cm2_matmul_decode = flag()?,
            "cm2_matmul_min_n" => self.cm2_matmul_min_n = in_range(1, 1 << 20)? as usize,
            "cm2_matmul_tile" => self.cm2_matmul_tile = cm2_tile(false)?,
            "cm2_matmul_glu_tile" => self.cm2_matmul_glu_tile = cm2_tile(true)?,
            "cm2_matmul_tokens_first" => self.cm2_matmul_tokens_first = flag()?,
            "cm2_matmul_group" => self.cm2_matmul_group = flag()?,
            "coop_group" => {
                self.coop_group = match value {
                    "qkv" => CoopGroup::Qkv,
                    "mlp" => CoopGroup::Mlp,
                    "all" => CoopGroup::All,
                    "none" => CoopGroup::None,
                    _ => return Err(bad("qkv, mlp, all or none")),
                }
            }
            "dequant" => {
                self.dequant = match value {
                    "auto" => DequantPolicy::AUTO,
                    "off" => DequantPolicy::Off,
                    "all" => DequantPolicy::All,
                    _ => return Err(bad("auto, off or all")),
                }
            }
            "dequant_keep_mb" => {
                self.dequant_keep_mb = match value {
                    "auto" => None,
                    _ => Some(in_range(0, 1 << 24)? as usize),
                }
            }
            "dequant_min" | "dequant_tokens" | "dequant_tokens_q8" => {
                let n = num()? as usize;
                let (mut e, mut t, mut t8) = match self.dequant {
                    DequantPolicy::Auto {
                        min_elements,
                        min_tokens,
                        min_tokens_q8,
                    } => (min_elements, min_tokens, min_tokens_q8),
                    _ => return Err(bad("dequant=auto first")),
                };
                match key {
                    "dequant_min" => e = n,
                    "dequant_tokens" => t = n,
                    _ => t8 = n,
                }
                self.dequant = DequantPolicy::Auto {
                    min_elements: e,
                    min_tokens: t,
                    min_tokens_q8: t8,
                };
            }
            "wg_coherent" => self.wg_coherent = flag()?,
            "wg_coherent_all" => self.wg_coherent_all = flag()?,
            "prune" => self.prune = flag()?,
            "recycle" => self.recycle = flag()?,
            "fence_spin_us" => {
                self.fence_spin_us = match value {
                    "auto" => None,
                    _ => Some(in_range(0, 10_000_000)?),
                }
            }
            "pipeline_stats" => self.pipeline_stats = flag()?,
            "sparse" => self.sparse = flag()?,
            "attn" => {
                self.attn = match value {
                    "split" => DecodeAttn::Split,
                    "fused" => DecodeAttn::Fused,
                    "reference" => DecodeAttn::Reference,
                    _ => return Err(bad("split, fused or reference")),
                }
            }
            "attn_chunk" => {
                self.attn_chunk = match value {
                    "auto" => None,
                    _ => {
                        let c = in_range(8, 256)? as usize;
                        if !c.is_power_of_two() {
                            return Err(bad("auto or a power of two in 8..=256"));
                        }
                        Some(c)
                    }
                }
            }
            "attn_adaptive" => self.attn_adaptive = flag()?,
            "attn_wide" => self.attn_wide = flag()?,
            "attn_wide_merge" => self.attn_wide_merge = flag()?,
            "attn_wide_rope" => self.attn_wide_rope = flag()?,
            "attn_prefill" => {
                self.attn_prefill = match value {
                    "auto" => PrefillAttn::Auto,
                    "cm2" => PrefillAttn::Cm2,
                    "coop2" => PrefillAttn::Coop2,
                    "coop1" => PrefillAttn::Coop1,
                    "portable" => PrefillAttn::Portable,
                    _ => return Err(bad("auto, cm2, coop2, coop1 or portable")),
                }
            }
            "attn_coop_nsg" => self.attn_coop_nsg = in_range(1, 4)? as u32,
            "attn_coop_split" => {
                self.attn_coop_split = match value {
                    "auto" => None,
                    _ => Some(in_range(1, 16)? as u32),
                }
            }
            "attn_coop_vahead" => {
                self.attn_coop_vahead = match value {
                    "auto" => None,
                    _ => Some(flag()?),
                }
            }
            "attn_cm2_tile" => {
                self.attn_cm2_tile = match value {
                    "auto" => None,
                    _ => {
                        let ok = |x: &str| {
                            x.parse::<u32>()
                                .ok()
                                .filter(|n| n.is_multiple_of(16) && (16..=128).contains(n))
                        };
                        let tile = value.split_once('x').and_then(|(r, k)| ok(r).zip(ok(k)));
                        Some(tile.ok_or_else(|| bad("auto or RxK, multiples of 16 up to 128"))?)
                    }
                }
            }
            "attn_cm2_mma" => self.attn_cm2_mma = flag()?,
            "attn_cm2_prefetch" => self.attn_cm2_prefetch = flag()?,
            "attn_cm2_qscale" => self.attn_cm2_qscale = flag()?,
            "attn_cm2_unclamped" => self.attn_cm2_unclamped = flag()?,
            "attn_cm2_stats16" => self.attn_cm2_stats16 = flag()?,
            "attn_cm2_ohalf" => self.attn_cm2_ohalf = flag()?,
            "kv_centre" => self.kv_centre = flag()?,
            "kv_sink" => self.kv_sink = flag()?,
            "kv_rot_v" => self.kv_rot_v = flag()?,
            "attn_coop_bk" => {
                self.attn_coop_bk = match value {
                    "32" => 32,
                    "64" => 64,
                    _ => return Err(bad("32 or 64")),
                }
            }
            "attn_f32_kv" => {
                self.attn_f32_kv = match value {
                    "auto" => F32KvPrefill::Auto,
                    "half" => F32KvPrefill::Half,
                    "direct" => F32KvPrefill::Direct,
                    _ => return Err(bad("half, auto or direct")),
                }
            }
            "fused" => self.fused = flag()?,
            "rope_kv_tpw" => {
                self.rope_kv_tpw = match value {
                    "auto" => None,
                    _ => Some(in_range(1, 4)? as usize),
                }
            }
            "delta_chunked" => self.delta_chunked = flag()?,
            "delta_wide" => self.delta_wide = flag()?,
            "delta_norm" => self.delta_norm = flag()?,
            "delta_chunked_wide" => self.delta_chunked_wide = flag()?,
            "moe_grouped_min" => self.moe_grouped_min = in_range(0, 1 << 20)? as u32,
            "moe_grouped_min_f32" => self.moe_grouped_min_f32 = in_range(0, 1 << 20)? as u32,
            "moe_q8g_min" => self.moe_q8g_min = in_range(0, 1 << 20)? as u32,
            "moe_q8g_cols" => self.moe_q8g_cols = in_range(1, 8)? as u32,
            "moe_q8g_wpe" => self.moe_q8g_wpe = in_range(0, 1 << 20)? as u32,
            "moe_lanes" => {
                let l = in_range(0, 128)? as u32;
                if l != 0 && !l.is_power_of_two() {
                    return Err(bad("0 or a power of two up to 128"));
                }
                self.moe_lanes = l;
            }
            "moe_q8a" => self.moe_q8a = flag()?,
            "moe_shared" => self.moe_shared = flag()?,
            "moe_coop" => self.moe_coop = flag()?,
            "one_submit" => self.one_submit = flag()?,
            "split_submit" => {
                self.split_submit = match num()? {
                    0 => None,
                    n if n > 1 => Some(n.min(1 << 20) as usize),
                    _ => return Err(bad("0 or a number > 1")),
                }
            }
            _ => {
                return Err(TuneError::UnknownKey {
                    key: key.to_string(),
                    known: TUNING_KEYS.join(", "),
                });
            }
        }
        Ok(())
    }

    /// The keys whose values differ from the defaults, as `key=value,...` (empty: the
    /// defaults); [`Tuning::parse`] of it gives `self` back.
    pub fn changes(&self) -> String {
        let all = self.to_string();
        let def = Tuning::default().to_string();
        let defaults: Vec<&str> = def.split(',').collect();
        all.split(',')
            .filter(|kv| !defaults.contains(kv))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Every key as `key=value`, comma-separated.
impl fmt::Display for Tuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |x: bool| if x { "1" } else { "0" };
        let opt = |x: Option<String>| x.unwrap_or_else(|| "auto".to_string());
        let matvec = opt(self.matvec.map(|m| {
            match m {
                MatvecImpl::Reference => "reference",
                MatvecImpl::Fast => "fast",
                MatvecImpl::Int8 => "int8",
            }
            .to_string()
        }));
        let layout = opt(self.matvec_layout.map(|l| {
            match l {
                MatvecLayout::Teams => "teams",
                MatvecLayout::Rows => "rows",
            }
            .to_string()
        }));
        let splitk = match self.splitk {
            SplitK::Auto => "auto".to_string(),
            SplitK::Off => "off".to_string(),
            SplitK::Target(n) => n.to_string(),
        };
        let group = match self.coop_group {
            CoopGroup::Qkv => "qkv",
            CoopGroup::Mlp => "mlp",
            CoopGroup::All => "all",
            CoopGroup::None => "none",
        };
        let dequant = match self.dequant {
            DequantPolicy::Off => "dequant=off".to_string(),
            DequantPolicy::All => "dequant=all".to_string(),
            DequantPolicy::Auto {
                min_elements,
                min_tokens,
                min_tokens_q8,
            } => format!(
                "dequant=auto,dequant_min={min_elements},dequant_tokens={min_tokens},\
                 dequant_tokens_q8={min_tokens_q8}"
            ),
        };
        let attn = match self.attn {
            DecodeAttn::Split => "split",
            DecodeAttn::Fused => "fused",
            DecodeAttn::Reference => "reference",
        };
        let prefill = match self.attn_prefill {
            PrefillAttn::Auto => "auto",
            PrefillAttn::Cm2 => "cm2",
            PrefillAttn::Coop2 => "coop2",
            PrefillAttn::Coop1 => "coop1",
            PrefillAttn::Portable => "portable",
        };
        let f32_kv = match self.attn_f32_kv {
            F32KvPrefill::Auto => "auto",
            F32KvPrefill::Half => "half",
            F32KvPrefill::Direct => "direct",
        };
        write!(
            f,
            "matvec={matvec},matvec_layout={layout},q8a_wide={},q8a_quad={},q8a_workgroups={},\
             q8a_xg={},q8a_xg1={},q8a_xg1_norm={},q8a_xg1_produce={},q8a_xg1_reuse={},q8a_mixed={},q8a_wg={},q8a_xg_lanes={},q8a_xg_rows={},decode_int8_max_n={},coopmat={},coop_narrow={},coop_narrow_split={},coop_narrow_min={},coop_narrow_q6k={},splitk={splitk},coop_bk={},coop_direct={},coop_float_split={},\
             coop_x_f16={},coop_tile={},coop_glu={},coop_glu_half={},cm2_matmul={},cm2_matmul_min_n={},cm2_matmul_decode={},cm2_matmul_tile={},cm2_matmul_glu_tile={},cm2_matmul_tokens_first={},cm2_matmul_group={},coop_group={group},\
             {dequant},dequant_keep_mb={},wg_coherent={},wg_coherent_all={},prune={},recycle={},fence_spin_us={},pipeline_stats={},sparse={},\
             attn={attn},attn_chunk={},attn_adaptive={},attn_wide={},attn_wide_merge={},attn_wide_rope={},attn_prefill={prefill},attn_coop_nsg={},\
             attn_coop_split={},attn_coop_bk={},attn_coop_vahead={},attn_cm2_tile={},attn_cm2_mma={},attn_cm2_prefetch={},attn_cm2_qscale={},attn_cm2_unclamped={},attn_cm2_stats16={},attn_cm2_ohalf={},kv_centre={},kv_sink={},kv_rot_v={},attn_f32_kv={f32_kv},fused={},rope_kv_tpw={},delta_chunked={},delta_wide={},delta_norm={},delta_chunked_wide={},moe_grouped_min={},\
             moe_grouped_min_f32={},moe_q8g_min={},moe_q8g_cols={},moe_q8g_wpe={},moe_lanes={},moe_q8a={},moe_shared={},moe_coop={},one_submit={},split_submit={}",
            b(self.q8a_wide),
            b(self.q8a_quad),
            self.q8a_workgroups,
            b(self.q8a_xg),
            b(self.q8a_xg1),
            self.q8a_xg1_norm,
            b(self.q8a_xg1_produce),
            b(self.q8a_xg1_reuse),
            b(self.q8a_mixed),
            self.q8a_wg,
            self.q8a_xg_lanes,
            self.q8a_xg_rows,
            self.decode_int8_max_n,
            b(self.coopmat),
            self.coop_narrow,
            opt(self.coop_narrow_split.map(|s| s.to_string())),
            self.coop_narrow_min,
            b(self.coop_narrow_q6k),
            self.coop_bk,
            b(self.coop_direct),
            b(self.coop_float_split),
            b(self.coop_x_f16),
            self.coop_tile.map_or("auto", tile_name),
            b(self.coop_glu),
            b(self.coop_glu_half),
            b(self.cm2_matmul),
            self.cm2_matmul_min_n,
            b(self.cm2_matmul_decode),
            opt(self
                .cm2_matmul_tile
                .map(|t| format!("{}x{}x{}", t.bm, t.bn, t.bk))),
            opt(self
                .cm2_matmul_glu_tile
                .map(|t| format!("{}x{}x{}", t.bm, t.bn, t.bk))),
            b(self.cm2_matmul_tokens_first),
            b(self.cm2_matmul_group),
            opt(self.dequant_keep_mb.map(|v| v.to_string())),
            b(self.wg_coherent),
            b(self.wg_coherent_all),
            b(self.prune),
            b(self.recycle),
            opt(self.fence_spin_us.map(|u| u.to_string())),
            b(self.pipeline_stats),
            b(self.sparse),
            opt(self.attn_chunk.map(|c| c.to_string())),
            b(self.attn_adaptive),
            b(self.attn_wide),
            b(self.attn_wide_merge),
            b(self.attn_wide_rope),
            self.attn_coop_nsg,
            opt(self.attn_coop_split.map(|s| s.to_string())),
            self.attn_coop_bk,
            opt(self.attn_coop_vahead.map(|v| b(v).to_string())),
            opt(self.attn_cm2_tile.map(|(r, k)| format!("{r}x{k}"))),
            b(self.attn_cm2_mma),
            b(self.attn_cm2_prefetch),
            b(self.attn_cm2_qscale),
            b(self.attn_cm2_unclamped),
            b(self.attn_cm2_stats16),
            b(self.attn_cm2_ohalf),
            b(self.kv_centre),
            b(self.kv_sink),
            b(self.kv_rot_v),
            b(self.fused),
            opt(self.rope_kv_tpw.map(|t| t.to_string())),
            b(self.delta_chunked),
            b(self.delta_wide),
            b(self.delta_norm),
            b(self.delta_chunked_wide),
            self.moe_grouped_min,
            self.moe_grouped_min_f32,
            self.moe_q8g_min,
            self.moe_q8g_cols,
            self.moe_q8g_wpe,
            self.moe_lanes,
            b(self.moe_q8a),
            b(self.moe_shared),
            b(self.moe_coop),
            b(self.one_submit),
            self.split_submit.unwrap_or(0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_parses_back_for_every_key_changed() {
        let spec = "matvec=int8,matvec_layout=rows,q8a_wide=0,q8a_quad=0,q8a_workgroups=512,\
                    q8a_xg=0,q8a_xg1=1,q8a_xg1_norm=512,q8a_xg1_produce=1,q8a_xg1_reuse=0,q8a_mixed=0,q8a_wg=512,q8a_xg_lanes=4,q8a_xg_rows=1,decode_int8_max_n=32,coopmat=0,coop_narrow=0,coop_narrow_split=3,coop_narrow_min=17,coop_narrow_q6k=0,splitk=96,coop_bk=32,coop_direct=0,coop_float_split=0,\
                    coop_x_f16=0,coop_tile=wide,coop_glu=0,coop_glu_half=0,cm2_matmul=0,cm2_matmul_min_n=64,cm2_matmul_decode=1,cm2_matmul_tile=64x128x32,cm2_matmul_glu_tile=64x64x32,cm2_matmul_tokens_first=0,cm2_matmul_group=1,coop_group=none,\
                    dequant=auto,dequant_keep_mb=512,dequant_min=4096,dequant_tokens=64,dequant_tokens_q8=96,wg_coherent=0,wg_coherent_all=1,prune=1,\
                    recycle=0,fence_spin_us=0,pipeline_stats=1,sparse=0,attn=fused,attn_chunk=64,attn_adaptive=0,attn_wide=0,attn_wide_merge=1,attn_wide_rope=1,\
                    attn_prefill=coop1,attn_coop_nsg=2,attn_coop_split=1,attn_coop_bk=32,attn_coop_vahead=1,attn_cm2_tile=32x64,attn_cm2_mma=0,attn_cm2_prefetch=1,attn_cm2_qscale=0,attn_cm2_unclamped=0,attn_cm2_stats16=0,attn_cm2_ohalf=0,kv_centre=0,kv_sink=0,kv_rot_v=0,attn_f32_kv=auto,fused=0,\
                    rope_kv_tpw=3,delta_chunked=0,delta_wide=0,delta_norm=0,delta_chunked_wide=0,moe_grouped_min=0,moe_grouped_min_f32=0,moe_q8g_min=2,moe_q8g_cols=2,moe_q8g_wpe=4,moe_lanes=0,moe_q8a=0,moe_shared=0,moe_coop=0,one_submit=0,\
                    split_submit=0";
        let t = Tuning::parse(spec).unwrap();
        assert_ne!(t, Tuning::default());
        assert_eq!(Tuning::parse(&t.to_string()).unwrap(), t);
        assert_eq!(Tuning::parse(&t.changes()).unwrap(), t);
        // Every key of the list was set to a non-default value above (`dequant` stays `auto`
        // so that its bounds can change; `off` and `all` round-trip below).
        for k in TUNING_KEYS.iter().filter(|k| **k != "dequant") {
            assert!(
                t.changes().contains(&format!("{k}=")),
                "{k} not changed by the spec"
            );
        }
        for d in ["dequant=off", "dequant=all"] {
            let t = Tuning::parse(d).unwrap();
            assert_eq!(t.changes(), d);
            assert_eq!(Tuning::parse(&t.to_string()).unwrap(), t);
        }
        for v in ["cm2", "coop2", "coop1", "portable"] {
            let t = Tuning::parse(&format!("attn_prefill={v}")).unwrap();
            assert_eq!(t.changes(), format!("attn_prefill={v}"));
        }
        assert_eq!(Tuning::default().changes(), "");
        assert_eq!(Tuning::parse(" ").unwrap(), Tuning::default());
    }

    #[test]
    fn bad_specs_are_typed_errors() {
        assert!(matches!(Tuning::parse("splitk"), Err(TuneError::Syntax(_))));
        assert!(matches!(
            Tuning::parse("split_k=off"),
            Err(TuneError::UnknownKey { .. })
        ));
        for bad in [
            "coop_bk=48",
            "attn_chunk=48",
            "attn_chunk=512",
            "attn_coop_nsg=5",
            "attn_f32_kv=f16",
            "attn_coop_split=17",
            "attn_coop_bk=48",
            "attn_coop_vahead=2",
            "attn_cm2_tile=48x40",
            "attn_cm2_tile=256x64",
            "attn_cm2_tile=64",
            "cm2_matmul_tile=128x128",
            "cm2_matmul_tile=128x128x48",
            "cm2_matmul_tile=512x128x64",
            "cm2_matmul_glu_tile=128x256x64",
            "attn_cm2_mma=2",
            "q8a_wide=yes",
            "split_submit=1",
            "matvec=fastest",
            "dequant=off,dequant_min=5",
        ] {
            assert!(
                matches!(Tuning::parse(bad), Err(TuneError::BadValue { .. })),
                "{bad}"
            );
        }
    }
}
