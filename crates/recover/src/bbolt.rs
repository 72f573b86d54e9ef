//! A read-only walk of a bbolt database file (etcd's backend), enough to list
//! every key/value pair of one top-level bucket.
//!
//! The on-disk layout, from go.etcd.io/bbolt v1.5.0 `internal/common`
//! (page.go, meta.go, bucket.go, types.go) and `db.go` (`DB.meta`):
//!
//! * the file is an array of pages of `meta.pageSize` bytes; every page starts
//!   with a 16-byte header `{id u64, flags u16, count u16, overflow u32}` and
//!   spans `1 + overflow` pages (`Page`);
//! * pages 0 and 1 hold a `Meta` after the header: `{magic u32 = 0xED0CDAED,
//!   version u32 = 2, pageSize u32, flags u32, root {pgid u64, sequence u64},
//!   freelist u64, pgid u64 (high-water mark), txid u64, checksum u64}`, the
//!   checksum being FNV-1a 64 of the 56 bytes before it (`Meta.Sum64`); the
//!   valid one with the higher txid is current (`DB.meta`);
//! * a branch page (flags 0x01) has `count` 16-byte elements `{pos u32,
//!   ksize u32, pgid u64}`, a leaf page (flags 0x02) `count` 16-byte elements
//!   `{flags u32, pos u32, ksize u32, vsize u32}`; `pos` counts from the
//!   element itself, the key follows at `pos` and the value right after it;
//! * a leaf element with flag 0x01 (`BucketLeafFlag`) is a nested bucket whose
//!   value is `{root pgid u64, sequence u64}` (`InBucket`); root 0 means an
//!   inline bucket, whose single leaf page follows in the value itself.
//!
//! Integers are in the writer's native byte order: little-endian here, as on
//! every platform etcd supports but s390x (not supported here). Every offset
//! is checked against the file, each page is visited at most once and the
//! tree depth is bounded, so a corrupt or hostile file yields an error, never
//! a panic or an endless walk. The freelist is not read: only pages reachable
//! from the current meta page are, which is exactly the committed state.
//!
//! A walk also never hands out a byte of the file twice, because callers copy
//! what it yields: bbolt writes a leaf's keys and values one after the other
//! behind its element array, so elements whose bytes overlap are refused, and
//! so is a page reached inside another page's overflow. Hostile files built
//! of overlapping elements otherwise made a 1 MB snapshot cost gigabytes. As
//! a second bound, the bytes one walk yields are counted and may not exceed
//! the file's (or the inline page's) length; `for_each` returns the count.

use std::collections::HashSet;

const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
const PAGE_HEADER: usize = 16;
const ELEMENT: usize = 16;
const META_LEN: usize = 64;
const BRANCH_PAGE: u16 = 0x01;
const LEAF_PAGE: u16 = 0x02;
const BUCKET_LEAF: u32 = 0x01;
/// Far deeper than any real B+tree (a 4 KiB-page tree of depth 16 holds more
/// keys than any etcd ever stores).
const MAX_DEPTH: usize = 32;
/// Page sizes tried when meta page 0 is unreadable (bbolt's own fallback
/// probes for the second meta page the same way).
const PAGE_SIZES: [usize; 7] = [4096, 8192, 16384, 32768, 65536, 1024, 2048];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoltError {
    #[error("not a bbolt database (no valid meta page)")]
    NoValidMeta,
    #[error("page {0} lies outside the file or above the high-water mark")]
    PageOutOfRange(u64),
    #[error("page {pgid} has unexpected type flags {flags:#x}")]
    BadPageType { pgid: u64, flags: u16 },
    #[error("element {index} of page {pgid} points outside the page")]
    ElementOutOfRange { pgid: u64, index: usize },
    #[error(
        "page {0} is reached twice (directly or inside another page's overflow): the tree is corrupt"
    )]
    PageCycle(u64),
    #[error("element {index} of page {pgid} overlaps another element's bytes: the page is corrupt")]
    OverlappingElements { pgid: u64, index: usize },
    #[error("the walk yields more bytes than the file holds: the tree is corrupt")]
    TooManyBytes,
    #[error("the B+tree is deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("bucket {0:?} has a malformed header")]
    BadBucket(String),
}

/// Where a bucket's tree starts.
#[derive(Debug, Clone, Copy)]
pub enum BucketRoot<'a> {
    Page(u64),
    /// An inline bucket's page, carried in its parent's leaf value.
    Inline(&'a [u8]),
}

/// One leaf element: a key and either a value or a nested bucket.
pub struct Entry<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub is_bucket: bool,
}

/// An opened database: the file bytes and its current meta page.
pub struct Db<'a> {
    file: &'a [u8],
    page_size: usize,
    root: u64,
    high_water: u64,
}

struct Meta {
    page_size: usize,
    root: u64,
    high_water: u64,
    txid: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The meta page at `offset`, if its magic, version and checksum hold.
fn meta_at(file: &[u8], offset: usize) -> Option<Meta> {
    let m = file.get(offset + PAGE_HEADER..offset + PAGE_HEADER + META_LEN)?;
    let valid =
        u32_at(m, 0) == MAGIC && u32_at(m, 4) == VERSION && u64_at(m, 56) == fnv1a64(&m[..56]);
    let page_size = u32_at(m, 8) as usize;
    // bbolt takes any page size; sizes outside this range or not a power of
    // two are treated as corruption rather than trusted.
    let sane = page_size.is_power_of_two() && (1024..=65536).contains(&page_size);
    (valid && sane).then(|| Meta {
        page_size,
        root: u64_at(m, 16),
        high_water: u64_at(m, 40),
        txid: u64_at(m, 48),
    })
}

impl<'a> Db<'a> {
    /// Picks the current meta page as bbolt does: of the two, the valid one
    /// with the higher transaction id.
    pub fn open(file: &'a [u8]) -> Result<Self, BoltError> {
        let meta0 = meta_at(file, 0);
        let meta1 = match &meta0 {
            Some(m) => meta_at(file, m.page_size).filter(|m1| m1.page_size == m.page_size),
            None => PAGE_SIZES
                .iter()
                .find_map(|&size| meta_at(file, size).filter(|m| m.page_size == size)),
        };
        let meta = match (meta0, meta1) {
            (Some(a), Some(b)) => {
                if b.txid > a.txid {
                    b
                } else {
                    a
                }
            }
            (Some(m), None) | (None, Some(m)) => m,
            (None, None) => return Err(BoltError::NoValidMeta),
        };
        Ok(Self {
            file,
            page_size: meta.page_size,
            root: meta.root,
            high_water: meta.high_water,
        })
    }

    /// The root bucket, whose entries are the top-level buckets.
    pub fn root(&self) -> BucketRoot<'a> {
        BucketRoot::Page(self.root)
    }

    /// The whole span of page `pgid`, overflow pages included.
    fn page(&self, pgid: u64) -> Result<&'a [u8], BoltError> {
        let out = || BoltError::PageOutOfRange(pgid);
        // Pages 0 and 1 are the meta pages, never part of a tree.
        if pgid < 2 || pgid >= self.high_water {
            return Err(out());
        }
        let start = usize::try_from(pgid)
            .ok()
            .and_then(|p| p.checked_mul(self.page_size))
            .ok_or_else(out)?;
        let header = start
            .checked_add(PAGE_HEADER)
            .and_then(|e| self.file.get(start..e))
            .ok_or_else(out)?;
        let span = (u32_at(header, 12) as usize + 1)
            .checked_mul(self.page_size)
            .ok_or_else(out)?;
        let end = start.checked_add(span).ok_or_else(out)?;
        self.file.get(start..end).ok_or_else(out)
    }

    /// Finds the top-level or nested bucket `name` among the entries of
    /// `parent`.
    pub fn bucket(
        &self,
        parent: BucketRoot<'a>,
        name: &[u8],
    ) -> Result<Option<BucketRoot<'a>>, BoltError> {
        let mut found = None;
        self.for_each(parent, &mut |entry| {
            if entry.is_bucket && entry.key == name {
                found = Some(entry.value);
            }
        })?;
        found.map(|value| bucket_root(name, value)).transpose()
    }

    /// Calls `visit` for every leaf element of the bucket, in key order, and
    /// returns how many key and value bytes it handed out (at most the
    /// length of the file, or of the inline bucket's page).
    pub fn for_each(
        &self,
        bucket: BucketRoot<'a>,
        visit: &mut dyn FnMut(Entry<'a>),
    ) -> Result<usize, BoltError> {
        let mut seen = HashSet::new();
        let limit = match bucket {
            BucketRoot::Page(_) => self.file.len(),
            BucketRoot::Inline(page) => page.len(),
        };
        let mut budget = limit;
        match bucket {
            BucketRoot::Page(pgid) => self.walk(pgid, 0, &mut seen, &mut budget, visit)?,
            BucketRoot::Inline(page) => leaf_entries(page, 0, &mut budget, visit)?,
        }
        Ok(limit - budget)
    }

    fn walk(
        &self,
        pgid: u64,
        depth: usize,
        seen: &mut HashSet<u64>,
        budget: &mut usize,
        visit: &mut dyn FnMut(Entry<'a>),
    ) -> Result<(), BoltError> {
        if depth > MAX_DEPTH {
            return Err(BoltError::TooDeep);
        }
        let page = self.page(pgid)?;
        // The page and each of its overflow pages: none may be reached again,
        // on its own or inside another page's span.
        let span = (page.len() / self.page_size) as u64;
        for id in pgid..pgid + span {
            if !seen.insert(id) {
                return Err(BoltError::PageCycle(id));
            }
        }
        match u16_at(page, 8) {
            LEAF_PAGE => leaf_entries(page, pgid, budget, visit),
            BRANCH_PAGE => {
                for child in branch_children(page, pgid)? {
                    self.walk(child, depth + 1, seen, budget, visit)?;
                }
                Ok(())
            }
            flags => Err(BoltError::BadPageType { pgid, flags }),
        }
    }
}

/// The root of a nested bucket from its leaf value (`InBucket`).
fn bucket_root<'a>(name: &[u8], value: &'a [u8]) -> Result<BucketRoot<'a>, BoltError> {
    let bad = || BoltError::BadBucket(String::from_utf8_lossy(name).into_owned());
    if value.len() < 16 {
        return Err(bad());
    }
    match u64_at(value, 0) {
        0 => {
            let page = &value[16..];
            if page.len() < PAGE_HEADER || u16_at(page, 8) != LEAF_PAGE {
                return Err(bad());
            }
            Ok(BucketRoot::Inline(page))
        }
        pgid => Ok(BucketRoot::Page(pgid)),
    }
}

/// The byte range of element `index`'s `len` bytes at `pos` past the element
/// start, checked against the page.
fn element_range(
    page: &[u8],
    pgid: u64,
    index: usize,
    pos: u32,
    len: usize,
) -> Result<&[u8], BoltError> {
    let start = (PAGE_HEADER + index * ELEMENT).checked_add(pos as usize);
    let range = start.and_then(|s| Some(s..s.checked_add(len)?));
    range
        .and_then(|r| page.get(r))
        .ok_or(BoltError::ElementOutOfRange { pgid, index })
}

fn element_headers(page: &[u8], pgid: u64) -> Result<usize, BoltError> {
    let count = usize::from(u16_at(page, 10));
    if PAGE_HEADER + count * ELEMENT > page.len() {
        return Err(BoltError::ElementOutOfRange { pgid, index: count });
    }
    Ok(count)
}

/// Visits a leaf page's elements after checking that no two share a byte
/// and that none reaches into the element array, then takes their length
/// from `budget`.
fn leaf_entries<'a>(
    page: &'a [u8],
    pgid: u64,
    budget: &mut usize,
    visit: &mut dyn FnMut(Entry<'a>),
) -> Result<(), BoltError> {
    let count = element_headers(page, pgid)?;
    let mut entries = Vec::with_capacity(count);
    // (start, end, index) of each element's key and value within the page.
    let mut spans = Vec::with_capacity(count);
    for index in 0..count {
        let e = PAGE_HEADER + index * ELEMENT;
        let (flags, pos) = (u32_at(page, e), u32_at(page, e + 4));
        let (ksize, vsize) = (u32_at(page, e + 8) as usize, u32_at(page, e + 12) as usize);
        let both = element_range(page, pgid, index, pos, ksize.saturating_add(vsize))?;
        // element_range checked that this sum is inside the page.
        let start = e + pos as usize;
        spans.push((start, start + both.len(), index));
        let (key, value) = both.split_at(ksize);
        entries.push(Entry {
            key,
            value,
            is_bucket: flags & BUCKET_LEAF != 0,
        });
    }
    spans.sort_unstable();
    let mut free_from = PAGE_HEADER + count * ELEMENT;
    for &(start, end, index) in &spans {
        if start < free_from && start < end {
            return Err(BoltError::OverlappingElements { pgid, index });
        }
        free_from = free_from.max(end);
    }
    let total: usize = spans.iter().map(|(start, end, _)| end - start).sum();
    *budget = budget.checked_sub(total).ok_or(BoltError::TooManyBytes)?;
    entries.into_iter().for_each(visit);
    Ok(())
}

fn branch_children(page: &[u8], pgid: u64) -> Result<Vec<u64>, BoltError> {
    (0..element_headers(page, pgid)?)
        .map(|index| {
            let e = PAGE_HEADER + index * ELEMENT;
            // The key is only a separator; checked for range, not used.
            element_range(
                page,
                pgid,
                index,
                u32_at(page, e),
                u32_at(page, e + 4) as usize,
            )?;
            Ok(u64_at(page, e + 8))
        })
        .collect()
}

#[cfg(test)]
mod tests;
