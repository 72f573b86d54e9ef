//! The unit tests of `bbolt` (bbolt.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

use super::*;

const PS: usize = 4096;

fn header(page: &mut [u8], id: u64, flags: u16, count: u16, overflow: u32) {
    page[0..8].copy_from_slice(&id.to_le_bytes());
    page[8..10].copy_from_slice(&flags.to_le_bytes());
    page[10..12].copy_from_slice(&count.to_le_bytes());
    page[12..16].copy_from_slice(&overflow.to_le_bytes());
}

fn meta(page: &mut [u8], id: u64, root: u64, high_water: u64, txid: u64) {
    header(page, id, 0x04, 0, 0);
    let m = &mut page[PAGE_HEADER..PAGE_HEADER + META_LEN];
    m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    m[4..8].copy_from_slice(&VERSION.to_le_bytes());
    m[8..12].copy_from_slice(&(PS as u32).to_le_bytes());
    m[16..24].copy_from_slice(&root.to_le_bytes());
    m[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
    m[40..48].copy_from_slice(&high_water.to_le_bytes());
    m[48..56].copy_from_slice(&txid.to_le_bytes());
    let sum = fnv1a64(&m[..56]);
    m[56..64].copy_from_slice(&sum.to_le_bytes());
}

/// Writes a leaf page of (flags, key, value) elements.
fn leaf(page: &mut [u8], id: u64, items: &[(u32, &[u8], &[u8])]) {
    header(page, id, LEAF_PAGE, items.len() as u16, 0);
    let mut data = PAGE_HEADER + items.len() * ELEMENT;
    for (i, (flags, k, v)) in items.iter().enumerate() {
        let e = PAGE_HEADER + i * ELEMENT;
        page[e..e + 4].copy_from_slice(&flags.to_le_bytes());
        page[e + 4..e + 8].copy_from_slice(&((data - e) as u32).to_le_bytes());
        page[e + 8..e + 12].copy_from_slice(&(k.len() as u32).to_le_bytes());
        page[e + 12..e + 16].copy_from_slice(&(v.len() as u32).to_le_bytes());
        page[data..data + k.len()].copy_from_slice(k);
        page[data + k.len()..data + k.len() + v.len()].copy_from_slice(v);
        data += k.len() + v.len();
    }
}

/// Root bucket at page 2 holding bucket "b" (root page 3) and an inline
/// bucket "i"; page 3 is a leaf with "k1" => "v1".
fn small_db() -> Vec<u8> {
    let mut file = vec![0u8; 4 * PS];
    meta(&mut file[..PS], 0, 2, 4, 6);
    meta(&mut file[PS..2 * PS], 1, 2, 4, 5);
    let mut inline = vec![0u8; 16 + PAGE_HEADER + ELEMENT + 4];
    leaf(&mut inline[16..], 0, &[(0, b"ik", b"iv")]);
    let mut b = vec![0u8; 16];
    b[..8].copy_from_slice(&3u64.to_le_bytes());
    leaf(
        &mut file[2 * PS..3 * PS],
        2,
        &[(1, b"b", &b), (1, b"i", &inline)],
    );
    leaf(&mut file[3 * PS..], 3, &[(0, b"k1", b"v1")]);
    file
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn entries(db: &Db<'_>, bucket: &[u8]) -> Result<Pairs, BoltError> {
    let root = db.bucket(db.root(), bucket)?.expect("bucket");
    let mut out = Vec::new();
    db.for_each(root, &mut |e| out.push((e.key.to_vec(), e.value.to_vec())))?;
    Ok(out)
}

#[test]
fn walks_page_and_inline_buckets() {
    let file = small_db();
    let db = Db::open(&file).unwrap();
    assert_eq!(
        entries(&db, b"b").unwrap(),
        vec![(b"k1".to_vec(), b"v1".to_vec())]
    );
    assert_eq!(
        entries(&db, b"i").unwrap(),
        vec![(b"ik".to_vec(), b"iv".to_vec())]
    );
    assert!(db.bucket(db.root(), b"missing").unwrap().is_none());
}

#[test]
fn falls_back_to_the_other_meta_page() {
    let mut file = small_db();
    file[PAGE_HEADER + 20] ^= 1; // breaks meta 0's checksum
    let db = Db::open(&file).unwrap();
    assert_eq!(entries(&db, b"b").unwrap().len(), 1);
    file[PS + PAGE_HEADER + 20] ^= 1;
    assert_eq!(Db::open(&file).err(), Some(BoltError::NoValidMeta));
}

#[test]
fn refuses_out_of_range_elements_and_pages() {
    let mut file = small_db();
    // k1's pos now points past the page.
    file[3 * PS + PAGE_HEADER + 4..3 * PS + PAGE_HEADER + 8]
        .copy_from_slice(&5000u32.to_le_bytes());
    let db = Db::open(&file).unwrap();
    assert_eq!(
        entries(&db, b"b").err(),
        Some(BoltError::ElementOutOfRange { pgid: 3, index: 0 })
    );

    let mut file = small_db();
    file[3 * PS + 12..3 * PS + 16].copy_from_slice(&u32::MAX.to_le_bytes()); // overflow
    let db = Db::open(&file).unwrap();
    assert_eq!(entries(&db, b"b").err(), Some(BoltError::PageOutOfRange(3)));
}

/// A file of `pages` pages: metas, then a root leaf at page 2 holding
/// bucket `name` with its root at page 3, which the caller fills in.
fn db_with_bucket(name: &[u8], pages: usize) -> Vec<u8> {
    let mut file = vec![0u8; pages * PS];
    meta(&mut file[..PS], 0, 2, pages as u64, 6);
    meta(&mut file[PS..2 * PS], 1, 2, pages as u64, 5);
    let mut b = vec![0u8; 16];
    b[..8].copy_from_slice(&3u64.to_le_bytes());
    leaf(&mut file[2 * PS..3 * PS], 2, &[(1, name, &b)]);
    file
}

/// Page 3 as a leaf of `count` elements that all point at the same key
/// (`key`) and value (the rest of the page).
fn overlapping_leaf(file: &mut [u8], count: usize, key: &[u8], value: &[u8]) {
    let page = &mut file[3 * PS..4 * PS];
    header(page, 3, LEAF_PAGE, count as u16, 0);
    let data = PAGE_HEADER + count * ELEMENT;
    page[data..data + key.len()].copy_from_slice(key);
    page[data + key.len()..data + key.len() + value.len()].copy_from_slice(value);
    for i in 0..count {
        let e = PAGE_HEADER + i * ELEMENT;
        page[e + 4..e + 8].copy_from_slice(&((data - e) as u32).to_le_bytes());
        page[e + 8..e + 12].copy_from_slice(&(key.len() as u32).to_le_bytes());
        page[e + 12..e + 16].copy_from_slice(&(value.len() as u32).to_le_bytes());
    }
}

/// Many elements pointing at one value would hand the same bytes out
/// again and again (the caller copies each): refused at the second.
/// Without the overlap check and the byte budget, this fails with
/// `left: Ok(176000)`: eleven times the file, from one 4 KiB page.
#[test]
fn refuses_overlapping_elements() {
    let mut file = db_with_bucket(b"b", 4);
    overlapping_leaf(&mut file, 200, b"k", &[b'v'; 879]);
    let db = Db::open(&file).unwrap();
    let bucket = db.bucket(db.root(), b"b").unwrap().unwrap();
    assert_eq!(
        db.for_each(bucket, &mut |_| {}),
        Err(BoltError::OverlappingElements { pgid: 3, index: 1 })
    );
    // Two elements sharing only their last and first byte overlap too.
    let mut file = small_db();
    let page = &mut file[3 * PS..];
    leaf(page, 3, &[(0, b"k1", b"v1"), (0, b"k2", b"v2")]);
    let pos1 = u32_at(page, PAGE_HEADER + ELEMENT + 4);
    page[PAGE_HEADER + ELEMENT + 4..PAGE_HEADER + ELEMENT + 8]
        .copy_from_slice(&(pos1 - 1).to_le_bytes());
    let db = Db::open(&file).unwrap();
    assert_eq!(
        entries(&db, b"b").err(),
        Some(BoltError::OverlappingElements { pgid: 3, index: 1 })
    );
}

/// The same through `sceau-recover recover --etcd-snapshot`'s reader: a `key`
/// bucket whose 200 elements are one valid revision and KeyValue.
/// Without the overlap check, this fails with `left: Ok([StoredValue ..`
/// (the copies were made, then merged as one key).
#[test]
fn a_snapshot_of_overlapping_values_is_refused() {
    let mut revision = [0u8; 17];
    revision[7] = 2;
    revision[8] = b'_';
    let mut kv = vec![0x0a, 2, b'/', b'k', 0x18, 2, 0x2a, 0x80, 0x06];
    kv.extend_from_slice(&[b'x'; 0x300]);
    let mut file = db_with_bucket(b"key", 4);
    overlapping_leaf(&mut file, 200, &revision, &kv[..]);
    assert_eq!(
        crate::etcd::values_from_snapshot(&file),
        Err(crate::etcd::EtcdError::Bolt(
            BoltError::OverlappingElements { pgid: 3, index: 1 }
        ))
    );
}

/// A leaf whose overflow covers page 5, and page 5 reached again from
/// the branch: the same bytes would be read twice. Without marking
/// overflow pages as seen, this fails with `left: Ok(8)`.
#[test]
fn refuses_a_page_inside_another_pages_overflow() {
    let mut file = db_with_bucket(b"b", 6);
    let page = &mut file[3 * PS..4 * PS];
    header(page, 3, BRANCH_PAGE, 2, 0);
    for (i, child) in [4u64, 5].into_iter().enumerate() {
        let e = PAGE_HEADER + i * ELEMENT;
        page[e..e + 4].copy_from_slice(&((2 * ELEMENT - i * ELEMENT) as u32).to_le_bytes());
        page[e + 8..e + 16].copy_from_slice(&child.to_le_bytes());
    }
    leaf(&mut file[4 * PS..6 * PS], 4, &[(0, b"k1", b"v1")]);
    file[4 * PS + 12..4 * PS + 16].copy_from_slice(&1u32.to_le_bytes()); // overflow
    leaf(&mut file[5 * PS..], 5, &[(0, b"k2", b"v2")]);
    let db = Db::open(&file).unwrap();
    let bucket = db.bucket(db.root(), b"b").unwrap().unwrap();
    assert_eq!(
        db.for_each(bucket, &mut |_| {}),
        Err(BoltError::PageCycle(5))
    );
}

/// The second bound: a walk that would hand out more bytes than its
/// budget stops with an error before visiting anything. Without the
/// budget, this fails with `left: Ok(())`, `right: Err(TooManyBytes)`.
#[test]
fn the_byte_budget_bounds_a_walk() {
    let file = small_db();
    let page = &file[3 * PS..];
    let mut visited = 0;
    let mut budget = 3;
    assert_eq!(
        leaf_entries(page, 3, &mut budget, &mut |_| visited += 1),
        Err(BoltError::TooManyBytes)
    );
    assert_eq!(visited, 0);
    let mut budget = 4;
    leaf_entries(page, 3, &mut budget, &mut |_| visited += 1).unwrap();
    assert_eq!((visited, budget), (1, 0));
}

/// Over a real etcd database with bytes flipped all over it, no walk
/// hands out more bytes than the file holds.
#[test]
fn walks_of_corrupt_databases_hand_out_at_most_the_file() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/recovery/snapshot.db"
    );
    let file = std::fs::read(path).unwrap();
    let bare = &file[..file.len() - 32];
    let walk = |bytes: &[u8]| -> Result<usize, BoltError> {
        let db = Db::open(bytes)?;
        match db.bucket(db.root(), b"key")? {
            Some(bucket) => db.for_each(bucket, &mut |_| {}),
            None => Ok(0),
        }
    };
    let whole = walk(bare).unwrap();
    assert!(whole > 0 && whole <= bare.len());
    for at in (0..bare.len()).step_by(31) {
        let mut corrupt = bare.to_vec();
        corrupt[at] ^= 0xff;
        if let Ok(n) = walk(&corrupt) {
            assert!(n <= corrupt.len(), "{n} bytes from {}", corrupt.len());
        }
    }
}

#[test]
fn refuses_cycles() {
    let mut file = small_db();
    // Page 3 becomes a branch pointing back at itself.
    let page = &mut file[3 * PS..];
    header(page, 3, BRANCH_PAGE, 1, 0);
    page[PAGE_HEADER..PAGE_HEADER + 4].copy_from_slice(&16u32.to_le_bytes());
    page[PAGE_HEADER + 4..PAGE_HEADER + 8].copy_from_slice(&1u32.to_le_bytes());
    page[PAGE_HEADER + 8..PAGE_HEADER + 16].copy_from_slice(&3u64.to_le_bytes());
    let db = Db::open(&file).unwrap();
    assert_eq!(entries(&db, b"b").err(), Some(BoltError::PageCycle(3)));
}
