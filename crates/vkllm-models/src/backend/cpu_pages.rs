//! The CPU backend's paged KV tensors ([`Backend::alloc_kv_paged`]): a tensor is a table of
//! pages from one pool, and a page shared by several tensors (or several slots' ranges of one)
//! is one vector, read and written in place by each. A page holds the values whose bytes in a
//! cache of the tensor's type lie in that page (the cache stores f32, see `kv_store`), so page
//! ranges mean what they mean on the GPU, where the pages are the device's.
//!
//! [`Backend::alloc_kv_paged`]: crate::backend::Backend::alloc_kv_paged

use std::borrow::Cow;

use super::cpu::{Buf, CpuBackend};
use crate::backend::{KvPageOp, KvPageShare, KvType, Tensor};
use crate::error::ModelError;

/// Bytes per page (as lavapipe's sparse pages): blocks of 16 rows of 64 f32 values.
pub(super) const CPU_KV_PAGE_BYTES: u64 = 4096;

/// A page's values and how many page tables hold it (0: free).
struct Page {
    data: Vec<f32>,
    refs: u32,
}

/// Every paged tensor's pages.
#[derive(Default)]
pub(super) struct PagePool {
    pages: Vec<Page>,
    free: Vec<u32>,
}

/// A paged KV tensor: `len` values of a `dtype` cache, page `i` in `map[i]` (`None`: unbound).
pub(super) struct PagedKv {
    dtype: KvType,
    len: usize,
    map: Vec<Option<u32>>,
}

/// Bytes per value of `t` as a fraction (quantized types: a unit's words over its values).
fn byte_ratio(t: KvType) -> (u64, u64) {
    match t {
        KvType::F32 => (4, 1),
        KvType::F16 => (2, 1),
        _ => (
            4 * t.unit_words() as u64,
            vkllm_kernels::kv_append::KV_UNIT as u64,
        ),
    }
}

impl PagedKv {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The first value whose byte lies at or past byte `b`.
    fn value_at(&self, b: u64) -> usize {
        let (num, den) = byte_ratio(self.dtype);
        ((b * den).div_ceil(num) as usize).min(self.len)
    }

    /// The values of page `p`.
    fn page_range(&self, p: usize) -> std::ops::Range<usize> {
        let b = p as u64 * CPU_KV_PAGE_BYTES;
        self.value_at(b)..self.value_at(b + CPU_KV_PAGE_BYTES)
    }

    /// The page holding value `i`.
    fn page_of(&self, i: usize) -> usize {
        let (num, den) = byte_ratio(self.dtype);
        (i as u64 * num / den / CPU_KV_PAGE_BYTES) as usize
    }

    fn check(&self, t: Tensor, first: usize, count: usize) -> Result<(), ModelError> {
        if first.checked_add(count).is_none_or(|e| e > self.map.len()) {
            return Err(pages_err(format!(
                "pages {first}..+{count} of {t:?}, which has {}",
                self.map.len()
            )));
        }
        Ok(())
    }
}

fn range_err(t: Tensor, start: usize, end: usize, have: usize) -> ModelError {
    ModelError::TensorShape {
        name: format!("values {start}..{end} of {t:?}"),
        expected: vec![end],
        found: vec![have],
    }
}

fn pages_err(msg: String) -> ModelError {
    ModelError::Config {
        field: "kv pages".into(),
        msg,
    }
}

impl PagePool {
    fn alloc(&mut self, data: Vec<f32>) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.pages[id as usize] = Page { data, refs: 1 };
                id
            }
            None => {
                self.pages.push(Page { data, refs: 1 });
                (self.pages.len() - 1) as u32
            }
        }
    }

    fn retain(&mut self, id: u32) {
        self.pages[id as usize].refs += 1;
    }

    fn release(&mut self, id: u32) {
        let p = &mut self.pages[id as usize];
        p.refs -= 1;
        if p.refs == 0 {
            p.data = Vec::new();
            self.free.push(id);
        }
    }

    /// Values the pages in use hold (a shared page once).
    pub(super) fn values(&self) -> usize {
        self.pages
            .iter()
            .filter(|p| p.refs > 0)
            .map(|p| p.data.len())
            .sum()
    }
}

impl CpuBackend {
    fn paged(&self, t: Tensor) -> Result<&PagedKv, ModelError> {
        match self.bufs.get(t.index()) {
            Some(Buf::Paged(p)) => Ok(p),
            _ => Err(pages_err(format!("tensor {t:?} is not a paged KV tensor"))),
        }
    }

    fn paged_mut(&mut self, t: Tensor) -> Result<&mut PagedKv, ModelError> {
        match self.bufs.get_mut(t.index()) {
            Some(Buf::Paged(p)) => Ok(p),
            _ => Err(pages_err(format!("tensor {t:?} is not a paged KV tensor"))),
        }
    }

    pub(super) fn alloc_kv_paged_(&mut self, len: usize, dtype: KvType, resident: bool) -> Tensor {
        let mut kv = PagedKv {
            dtype,
            len,
            map: Vec::new(),
        };
        let pages = if len == 0 { 0 } else { kv.page_of(len - 1) + 1 };
        kv.map = (0..pages)
            .map(|p| resident.then(|| self.pool.alloc(vec![0.0; kv.page_range(p).len()])))
            .collect();
        self.push(Buf::Paged(kv))
    }

    /// Values `start..start + len` of an f32 or paged tensor (unbound pages read as zeros); a
    /// range past the tensor is an error.
    pub(super) fn values(
        &self,
        t: Tensor,
        start: usize,
        len: usize,
    ) -> Result<Cow<'_, [f32]>, ModelError> {
        let end = start.saturating_add(len);
        let Buf::Paged(kv) = &self.bufs[t.index()] else {
            let v = self.f32(t);
            return v
                .get(start..end)
                .map(Cow::Borrowed)
                .ok_or_else(|| range_err(t, start, end, v.len()));
        };
        if end > kv.len {
            return Err(range_err(t, start, end, kv.len));
        }
        let mut out = Vec::with_capacity(len);
        let mut i = start;
        while i < end {
            let p = kv.page_of(i);
            let r = kv.page_range(p);
            let stop = r.end.min(end);
            match kv.map[p] {
                Some(id) => out.extend_from_slice(
                    &self.pool.pages[id as usize].data[i - r.start..stop - r.start],
                ),
                None => out.resize(out.len() + (stop - i), 0.0),
            }
            i = stop;
        }
        Ok(Cow::Owned(out))
    }

    /// Writes `data` at value `start` of an f32 or paged tensor (into the pages it holds, shared
    /// or not); a paged tensor's unbound page is an error.
    pub(super) fn write_values(
        &mut self,
        t: Tensor,
        start: usize,
        data: &[f32],
    ) -> Result<(), ModelError> {
        let end = start.saturating_add(data.len());
        let kv = match &mut self.bufs[t.index()] {
            Buf::Paged(kv) => kv,
            Buf::F32(v) => {
                let have = v.len();
                let dst = v
                    .get_mut(start..end)
                    .ok_or_else(|| range_err(t, start, end, have))?;
                dst.copy_from_slice(data);
                return Ok(());
            }
            Buf::U32(_) => panic!("tensor {t:?} is u32, written as f32"),
        };
        if end > kv.len {
            return Err(range_err(t, start, end, kv.len));
        }
        let mut i = start;
        while i < end {
            let p = kv.page_of(i);
            let r = kv.page_range(p);
            let stop = r.end.min(end);
            let Some(id) = kv.map[p] else {
                return Err(pages_err(format!(
                    "a write to page {p} of {t:?}, which has no memory bound"
                )));
            };
            self.pool.pages[id as usize].data[i - r.start..stop - r.start]
                .copy_from_slice(&data[i - start..stop - start]);
            i = stop;
        }
        Ok(())
    }

    pub(super) fn kv_pages_(&mut self, op: KvPageOp<'_>) -> Result<usize, ModelError> {
        match op {
            KvPageOp::Share(shares) => {
                let mut n = 0;
                for s in shares {
                    self.share(s)?;
                    n += s.count;
                }
                Ok(n)
            }
            KvPageOp::Own(ranges) => {
                for r in ranges {
                    self.paged(r.t)?.check(r.t, r.first, r.count)?;
                }
                let mut n = 0;
                for r in ranges {
                    n += self.own(r.t, r.first, r.count, r.keep)?;
                }
                Ok(n)
            }
            KvPageOp::Bind(ranges) => {
                for &(t, first, count) in ranges {
                    self.paged(t)?.check(t, first, count)?;
                }
                let mut n = 0;
                for &(t, first, count) in ranges {
                    for p in first..first + count {
                        let kv = self.paged(t)?;
                        if kv.map[p].is_none() {
                            let id = self.pool.alloc(vec![0.0; kv.page_range(p).len()]);
                            self.paged_mut(t)?.map[p] = Some(id);
                            n += 1;
                        }
                    }
                }
                Ok(n)
            }
            KvPageOp::Release(ranges) => {
                let mut n = 0;
                for &(t, first, count) in ranges {
                    self.paged(t)?.check(t, first, count)?;
                    for p in first..first + count {
                        if let Some(id) = self.paged_mut(t)?.map[p].take() {
                            self.pool.release(id);
                            n += 1;
                        }
                    }
                }
                Ok(n)
            }
        }
    }

    fn share(&mut self, s: &KvPageShare) -> Result<(), ModelError> {
        let (src, dst) = (self.paged(s.src)?, self.paged(s.dst)?);
        src.check(s.src, s.src_page, s.count)?;
        dst.check(s.dst, s.dst_page, s.count)?;
        if src.dtype != dst.dtype {
            return Err(pages_err(format!(
                "sharing pages of a {:?} tensor with a {:?} one",
                src.dtype, dst.dtype
            )));
        }
        for k in 0..s.count {
            let (sp, dp) = (s.src_page + k, s.dst_page + k);
            let (src, dst) = (self.paged(s.src)?, self.paged(s.dst)?);
            if src.page_range(sp).len() != dst.page_range(dp).len() {
                return Err(pages_err(format!(
                    "page {sp} of {:?} and page {dp} of {:?} hold different values",
                    s.src, s.dst
                )));
            }
            let id = src.map[sp];
            if let Some(id) = id {
                self.pool.retain(id);
            }
            if let Some(old) = std::mem::replace(&mut self.paged_mut(s.dst)?.map[dp], id) {
                self.pool.release(old);
            }
        }
        Ok(())
    }

    fn own(
        &mut self,
        t: Tensor,
        first: usize,
        count: usize,
        keep: bool,
    ) -> Result<usize, ModelError> {
        let mut n = 0;
        for p in first..first + count {
            let Some(id) = self.paged(t)?.map[p] else {
                continue;
            };
            let page = &self.pool.pages[id as usize];
            if page.refs < 2 {
                continue;
            }
            let data = match keep {
                true => page.data.clone(),
                false => vec![0.0; page.data.len()],
            };
            let new = self.pool.alloc(data);
            self.pool.release(id);
            self.paged_mut(t)?.map[p] = Some(new);
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, KvPageOwn};

    fn vals(b: &CpuBackend, t: Tensor, start: usize, len: usize) -> Vec<f32> {
        b.values(t, start, len).unwrap().into_owned()
    }

    #[test]
    fn shared_pages_are_read_and_written_in_place_until_owned() {
        let mut b = CpuBackend::new();
        // f32: 1,024 values per page; 3,000 values are 3 pages (the last partial).
        let a = b.alloc_kv_paged(3000, KvType::F32, true).unwrap();
        let c = b.alloc_kv_paged(3000, KvType::F32, true).unwrap();
        assert_eq!(b.kv_paged_values(), 6000);
        let data: Vec<f32> = (0..3000).map(|i| i as f32).collect();
        b.write_values(a, 0, &data).unwrap();
        let share = KvPageShare {
            src: a,
            src_page: 0,
            dst: c,
            dst_page: 0,
            count: 2,
        };
        assert_eq!(b.kv_pages(KvPageOp::Share(&[share])).unwrap(), 2);
        // c's two pages are a's: one copy in memory, c's own third page still zero.
        assert_eq!(b.kv_paged_values(), 6000 - 2048);
        assert_eq!(vals(&b, c, 0, 2048), data[..2048]);
        assert_eq!(vals(&b, c, 2048, 952), vec![0.0; 952]);
        // A write through c lands where a reads it (across the page boundary).
        b.write_values(c, 1020, &[-1.0; 8]).unwrap();
        assert_eq!(
            vals(&b, a, 1019, 10),
            [
                1019.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1028.0
            ]
        );
        // Owned (kept): c's page 1 becomes a copy; writes no longer reach a.
        let own = KvPageOwn {
            t: c,
            first: 1,
            count: 2,
            keep: true,
        };
        assert_eq!(
            b.kv_pages(KvPageOp::Own(&[own])).unwrap(),
            1,
            "only the shared page is copied"
        );
        b.write_values(c, 1024, &[7.0]).unwrap();
        assert_eq!(vals(&b, a, 1024, 1), [-1.0]);
        assert_eq!(vals(&b, c, 1024, 2), [7.0, -1.0]);
        // Owned without keeping: zeroed.
        let own = KvPageOwn {
            t: a,
            first: 0,
            count: 1,
            keep: false,
        };
        assert_eq!(b.kv_pages(KvPageOp::Own(&[own])).unwrap(), 1);
        assert_eq!(vals(&b, a, 0, 4), [0.0; 4]);
        assert_eq!(vals(&b, c, 0, 4), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(b.kv_paged_values(), 6000);
        // Released pages read as zeros, refuse writes, and come back zeroed when bound.
        assert_eq!(b.kv_pages(KvPageOp::Release(&[(c, 0, 3)])).unwrap(), 3);
        assert_eq!(b.kv_paged_values(), 3000);
        assert_eq!(vals(&b, c, 5, 3), [0.0; 3]);
        assert!(b.write_values(c, 5, &[1.0]).is_err());
        assert_eq!(b.kv_pages(KvPageOp::Bind(&[(c, 1, 2)])).unwrap(), 2);
        assert_eq!(b.kv_pages(KvPageOp::Bind(&[(c, 0, 3)])).unwrap(), 1);
        assert_eq!(vals(&b, c, 1024, 3), [0.0; 3]);
        // Through the backend's ops: copy and read_f32 see the pages.
        b.copy(a, 1026, c, 0, 3).unwrap();
        let mut out = [0.0; 3];
        b.read_f32(c, 0, &mut out).unwrap();
        assert_eq!(out, [-1.0, -1.0, 1028.0]);
    }

    #[test]
    fn unbound_tensors_and_bad_ranges_are_errors() {
        let mut b = CpuBackend::new();
        let t = b.alloc_kv_paged(100, KvType::F16, false).unwrap();
        assert_eq!(b.kv_paged_values(), 0);
        assert!(b.write_values(t, 0, &[1.0]).is_err());
        assert_eq!(vals(&b, t, 0, 3), [0.0; 3]);
        let plain = b.alloc_f32(100).unwrap();
        // Ranges past a tensor, paged or plain, are errors.
        for u in [t, plain] {
            assert!(matches!(
                b.values(u, 90, 20),
                Err(ModelError::TensorShape { .. })
            ));
            assert!(b.write_values(u, 99, &[1.0, 2.0]).is_err());
        }
        for op in [
            KvPageOp::Bind(&[(t, 0, 2)]),
            KvPageOp::Release(&[(plain, 0, 1)]),
            KvPageOp::Own(&[KvPageOwn {
                t,
                first: usize::MAX,
                count: 2,
                keep: true,
            }]),
        ] {
            assert!(
                matches!(b.kv_pages(op), Err(ModelError::Config { .. })),
                "{op:?}"
            );
        }
        let q = b.alloc_kv_paged(8192, KvType::Q8_0, true).unwrap();
        let share = KvPageShare {
            src: q,
            src_page: 0,
            dst: t,
            dst_page: 0,
            count: 1,
        };
        assert!(
            b.kv_pages(KvPageOp::Share(&[share])).is_err(),
            "types differ"
        );
    }

    #[test]
    fn pages_hold_the_values_whose_bytes_they_hold() {
        // q8_0: 68 bytes per 64 values, so a 4 KiB page ends inside a unit; every value is in
        // exactly one page and the pages tile the tensor in order.
        for t in [KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            let kv = PagedKv {
                dtype: t,
                len: 20_000,
                map: Vec::new(),
            };
            let mut next = 0;
            for p in 0..=kv.page_of(kv.len - 1) {
                let r = kv.page_range(p);
                assert_eq!(r.start, next, "{t:?} page {p}");
                assert!(r.clone().all(|i| kv.page_of(i) == p), "{t:?} page {p}");
                next = r.end;
            }
            assert_eq!(next, kv.len, "{t:?}");
            let bytes = t.bytes(64 * 1000);
            let (num, den) = byte_ratio(t);
            assert_eq!(64 * 1000 * num / den, bytes, "{t:?}");
        }
    }
}
