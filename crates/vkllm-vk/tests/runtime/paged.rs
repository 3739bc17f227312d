//! Paged buffers: pages shared between buffers are the same memory (a write through one is read
//! through the other, by a transfer and by a kernel), made private again with or without their
//! contents, and returned to the pool when the last range lets go.

use vkllm_vk::kernels::elementwise::Copy as CopyK;
use vkllm_vk::{Device, Error, MemoryKind, PageOwn, PageShare, Recorder};

use super::common;

fn words(page: u64, seed: u32, pages: u64) -> Vec<u32> {
    (0..(page / 4 * pages) as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed))
        .collect()
}

fn read(dev: &Device, b: &vkllm_vk::Buffer, page: u64, first: u64, n: u64) -> Vec<u32> {
    let mut out = vec![0u8; (page * n) as usize];
    dev.download(b, first * page, &mut out).unwrap();
    bytemuck::cast_slice(&out).to_vec()
}

#[test]
fn shared_pages_are_read_in_place_and_copied_on_write() {
    let dev = common::device();
    let page = dev
        .page_bytes()
        .expect("the test devices (lavapipe, the H200) offer sparse aliased buffers");
    eprintln!("page: {page} bytes");
    let base = dev.pool_pages();
    let a = dev.create_paged_buffer("a", 4 * page).unwrap();
    let b = dev.create_paged_buffer("b", 3 * page - 100).unwrap();
    assert_eq!((a.page_count(), b.page_count()), (Some(4), Some(3)));
    assert_eq!(b.size(), 3 * page);
    let wa = words(page, 1, 4);
    let wb = words(page, 2, 3);
    dev.upload(&a, 0, bytemuck::cast_slice(&wa)).unwrap();
    dev.upload(&b, 0, bytemuck::cast_slice(&wb)).unwrap();

    // b's pages 0..2 become a's pages 1..3.
    dev.share_pages(&[PageShare {
        src: &a,
        src_page: 1,
        dst: &b,
        dst_page: 0,
        count: 2,
    }])
    .unwrap();
    let q = (page / 4) as usize;
    assert_eq!(read(&dev, &b, page, 0, 2), wa[q..3 * q]);
    assert_eq!(read(&dev, &b, page, 2, 1), wb[2 * q..]);
    assert_eq!(dev.shared_pages(&a, 0, 4).unwrap(), 2);
    assert_eq!(dev.shared_pages(&b, 0, 3).unwrap(), 2);

    // A kernel reading b reads a's memory; a write through a shows through b.
    let w2 = words(page, 3, 1);
    dev.upload(&a, page, bytemuck::cast_slice(&w2)).unwrap();
    let out = dev
        .create_buffer("out", 2 * page, MemoryKind::Device)
        .unwrap();
    let mut r = Recorder::new(&dev).unwrap();
    r.fill(out.all(), 0xffff_ffff).unwrap();
    let src = b.slice(0, 2 * page).unwrap();
    r.dispatch(
        CopyK {
            a: src,
            out: out.all(),
        }
        .dispatch(2 * q)
        .unwrap(),
    )
    .unwrap();
    r.finish().unwrap().submit().unwrap();
    let got: Vec<u32> = dev.read_vec(&out, 2 * q).unwrap();
    assert_eq!(got[..q], w2[..]);
    assert_eq!(got[q..], wa[2 * q..3 * q]);

    // Copy-on-write keeping the contents: b's page 0 is its own again, equal until written.
    assert_eq!(dev.own_pages(&b, 0, 1, true).unwrap(), 1);
    assert_eq!(dev.own_pages(&b, 0, 1, true).unwrap(), 0, "already private");
    assert_eq!(read(&dev, &b, page, 0, 1), w2);
    let w4 = words(page, 4, 1);
    dev.upload(&b, 0, bytemuck::cast_slice(&w4)).unwrap();
    assert_eq!(read(&dev, &a, page, 1, 1), w2, "a keeps its page");
    // Without the contents: page 1 of b is private and zeroed, a's page 2 untouched by writes
    // to it (page 2 of b was b's own all along and keeps its words).
    assert_eq!(dev.own_pages(&b, 1, 2, false).unwrap(), 1);
    assert_eq!(read(&dev, &b, page, 1, 1), vec![0; q]);
    assert_eq!(read(&dev, &b, page, 2, 1), wb[2 * q..]);
    dev.upload(&b, page, bytemuck::cast_slice(&w4)).unwrap();
    assert_eq!(read(&dev, &a, page, 2, 1), wa[2 * q..3 * q]);
    assert_eq!(dev.shared_pages(&a, 0, 4).unwrap(), 0);
    dev.check_validation().unwrap();

    drop((a, b, out));
    let after = dev.pool_pages();
    assert_eq!(
        after.total - after.free,
        base.total - base.free,
        "every page returned"
    );
}

#[test]
fn page_ranges_and_plain_buffers_are_errors() {
    let dev = common::device();
    let page = dev.page_bytes().expect("sparse aliased buffers");
    let a = dev.create_paged_buffer("a", 2 * page).unwrap();
    let plain = dev
        .create_buffer("plain", page, MemoryKind::Device)
        .unwrap();
    let past = PageShare {
        src: &a,
        src_page: 1,
        dst: &a,
        dst_page: 0,
        count: 2,
    };
    assert!(matches!(dev.share_pages(&[past]), Err(Error::Shape(_))));
    assert!(matches!(
        dev.own_pages(&a, 2, 1, true),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        dev.own_pages(&plain, 0, 1, true),
        Err(Error::Shape(_))
    ));
    assert_eq!(plain.page_count(), None);
    // A page shared within one buffer.
    dev.share_pages(&[PageShare {
        src: &a,
        src_page: 0,
        dst: &a,
        dst_page: 1,
        count: 1,
    }])
    .unwrap();
    let w = words(page, 5, 1);
    dev.upload(&a, 0, bytemuck::cast_slice(&w)).unwrap();
    assert_eq!(read(&dev, &a, page, 1, 1), w);
    dev.check_validation().unwrap();
}

#[test]
fn unbound_pages_bind_on_demand_within_the_limit() {
    let dev = common::device();
    let page = dev.page_bytes().expect("sparse aliased buffers");
    let a = dev.create_paged_buffer_unbound("a", 6 * page).unwrap();
    assert_eq!(dev.bound_pages(&a, 0, 6).unwrap(), 0);
    let base = dev.pool_pages();
    let held = |p: vkllm_vk::PoolPages| p.total - p.free;
    dev.set_page_limit(Some(held(base) + 3));
    // Pages 1..3 bound, zeroed; binding them again binds nothing.
    assert_eq!(dev.bind_pages(&[(&a, 1, 2)]).unwrap(), 2);
    assert_eq!(dev.bind_pages(&[(&a, 0, 3)]).unwrap(), 1);
    assert_eq!(dev.bound_pages(&a, 0, 6).unwrap(), 3);
    assert_eq!(read(&dev, &a, page, 0, 3), vec![0; 3 * (page / 4) as usize]);
    let w = words(page, 7, 3);
    dev.upload(&a, 0, bytemuck::cast_slice(&w)).unwrap();
    assert_eq!(read(&dev, &a, page, 0, 3), w);
    // The limit: a fourth page is refused, nothing bound.
    match dev.bind_pages(&[(&a, 3, 2)]) {
        Err(Error::PageBudget {
            want: 2, free: 0, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(dev.bound_pages(&a, 0, 6).unwrap(), 3);
    // A page shared with another buffer counts once; released pages make room.
    let b = dev.create_paged_buffer_unbound("b", 2 * page).unwrap();
    dev.share_pages(&[PageShare {
        src: &a,
        src_page: 1,
        dst: &b,
        dst_page: 0,
        count: 2,
    }])
    .unwrap();
    assert_eq!(read(&dev, &b, page, 0, 2), w[(page / 4) as usize..]);
    assert_eq!(dev.release_pages(&[(&a, 0, 3)]).unwrap(), 3);
    assert_eq!(dev.bound_pages(&a, 0, 6).unwrap(), 0);
    // b still holds two; one more fits.
    assert_eq!(read(&dev, &b, page, 0, 2), w[(page / 4) as usize..]);
    assert_eq!(dev.bind_pages(&[(&a, 5, 1)]).unwrap(), 1);
    assert!(matches!(
        dev.bind_pages(&[(&a, 4, 1)]),
        Err(Error::PageBudget { .. })
    ));
    // Sharing an unbound range unbinds the destination.
    dev.share_pages(&[PageShare {
        src: &a,
        src_page: 0,
        dst: &b,
        dst_page: 0,
        count: 2,
    }])
    .unwrap();
    assert_eq!(dev.bound_pages(&b, 0, 2).unwrap(), 0);
    assert_eq!(dev.bind_pages(&[(&a, 4, 1)]).unwrap(), 1);
    dev.set_page_limit(None);
    dev.check_validation().unwrap();
    drop((a, b));
    assert_eq!(held(dev.pool_pages()), held(base));
}

#[test]
fn many_pages_bind_across_chunks() {
    let dev = common::device();
    let page = dev.page_bytes().expect("pages");
    let a = dev.create_paged_buffer_unbound("a", 3000 * page).unwrap();
    let n = dev.bind_pages(&[(&a, 0, 3000)]);
    assert_eq!(n.unwrap(), 3000);
}

/// Many ranges of several buffers made private in one op: kept pages keep their words, the
/// others are zeroed, pages named twice or not shared are left alone, and past the page limit
/// nothing changes.
#[test]
fn many_ranges_are_owned_in_one_op() {
    let dev = common::device();
    let page = dev.page_bytes().expect("sparse aliased buffers");
    let q = (page / 4) as usize;
    let a = dev.create_paged_buffer("a", 6 * page).unwrap();
    let b = dev.create_paged_buffer("b", 3 * page).unwrap();
    let c = dev.create_paged_buffer("c", 3 * page).unwrap();
    let wa = words(page, 11, 6);
    dev.upload(&a, 0, bytemuck::cast_slice(&wa)).unwrap();
    let share = |dst, src_page| PageShare {
        src: &a,
        src_page,
        dst,
        dst_page: 0,
        count: 3,
    };
    dev.share_pages(&[share(&b, 0), share(&c, 3)]).unwrap();
    assert_eq!(dev.shared_pages(&a, 0, 6).unwrap(), 6);

    // Past the limit: refused, every page still shared.
    let held = |p: vkllm_vk::PoolPages| p.total - p.free;
    let ranges = [
        PageOwn {
            b: &b,
            first: 0,
            count: 2,
            keep: true,
        },
        PageOwn {
            b: &c,
            first: 0,
            count: 3,
            keep: false,
        },
        PageOwn {
            b: &b,
            first: 1,
            count: 1,
            keep: true,
        },
    ];
    dev.set_page_limit(Some(held(dev.pool_pages()) + 4));
    assert!(matches!(
        dev.own_page_ranges(&ranges),
        Err(Error::PageBudget { want: 5, .. })
    ));
    dev.set_page_limit(None);
    assert_eq!(dev.shared_pages(&a, 0, 6).unwrap(), 6);

    assert_eq!(dev.own_page_ranges(&ranges).unwrap(), 5);
    assert_eq!(
        dev.shared_pages(&b, 0, 3).unwrap(),
        1,
        "b's page 2 stays shared"
    );
    assert_eq!(dev.shared_pages(&c, 0, 3).unwrap(), 0);
    assert_eq!(read(&dev, &b, page, 0, 3), wa[..3 * q]);
    assert_eq!(read(&dev, &c, page, 0, 3), vec![0; 3 * q]);
    // Writes to the owned pages stay there; a keeps its words.
    let w = words(page, 12, 2);
    dev.upload(&b, 0, bytemuck::cast_slice(&w)).unwrap();
    assert_eq!(read(&dev, &a, page, 0, 6), wa);
    dev.check_validation().unwrap();
}
