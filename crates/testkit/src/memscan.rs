//! Reads a live process's memory, as root, to look for secrets left behind.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// One place a needle was found: which secret, the mapping's name (path,
/// `[heap]`, `[stack]` or empty for anonymous memory, thread stacks
/// included) and the address.
#[derive(Debug)]
#[allow(dead_code)] // the fields are read through Debug, in failure messages
pub struct Hit {
    pub secret: String,
    pub mapping: String,
    pub address: u64,
    /// The 48 bytes before the hit, to tell whose buffer it is.
    pub before: String,
}

/// Every place where any `window`-byte run of `secret` occurs in the
/// readable mappings of `pid`: a partial copy counts too (a freed heap chunk,
/// say, whose first bytes the allocator reused for its own bookkeeping).
pub fn find_in_process(pid: u32, secret: &[u8], window: usize) -> Vec<Hit> {
    find_all_in_process(pid, &[("secret".to_string(), secret.to_vec())], window)
}

/// [`find_in_process`] for several labelled secrets, reading memory once.
pub fn find_all_in_process(pid: u32, secrets: &[(String, Vec<u8>)], window: usize) -> Vec<Hit> {
    let needles = Needles::new(secrets, window);
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
    let mut mem = File::open(format!("/proc/{pid}/mem")).expect("open mem (needs root)");
    let mut hits = Vec::new();
    for line in maps.lines() {
        let Some((start, end, name)) = readable_range(line) else {
            continue;
        };
        let Some(bytes) = read_range(&mut mem, start, end) else {
            continue;
        };
        for (offset, label) in needles.positions(&bytes) {
            let context = &bytes[offset.saturating_sub(48)..offset];
            hits.push(Hit {
                secret: label.to_string(),
                mapping: name.to_string(),
                address: start + offset as u64,
                before: context.iter().map(|b| format!("{b:02x}")).collect(),
            });
        }
    }
    hits
}

/// `start-end perms offset dev inode [name]`, for readable, non-special maps.
fn readable_range(line: &str) -> Option<(u64, u64, &str)> {
    let mut fields = line.split_whitespace();
    let (range, perms) = (fields.next()?, fields.next()?);
    let name = fields.nth(3).unwrap_or("");
    if !perms.starts_with('r') || name == "[vvar]" || name == "[vsyscall]" {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some((
        u64::from_str_radix(start, 16).ok()?,
        u64::from_str_radix(end, 16).ok()?,
        name,
    ))
}

/// Reads a mapping page by page, so that a page the process unmaps or
/// shrinks away meanwhile costs that page only, not the whole mapping.
fn read_range(mem: &mut File, start: u64, end: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut bytes = vec![0; usize::try_from(end - start).ok()?];
    for (index, page) in bytes.chunks_mut(PAGE as usize).enumerate() {
        let at = start + index as u64 * PAGE;
        if mem.seek(SeekFrom::Start(at)).is_ok() {
            let _ = mem.read_exact(page);
        }
    }
    Some(bytes)
}

/// Every `window`-byte run of every secret, indexed by its first 8 bytes
/// read as one integer, which keeps one pass fast enough for a debug build
/// scanning tens of MiB whatever the number of secrets.
struct Needles<'a> {
    window: usize,
    by_head: HashMap<u64, Vec<(&'a [u8], &'a str)>>,
}

impl<'a> Needles<'a> {
    fn new(secrets: &'a [(String, Vec<u8>)], window: usize) -> Self {
        let mut by_head: HashMap<u64, Vec<(&[u8], &str)>> = HashMap::new();
        for (label, secret) in secrets {
            for run in secret.windows(window) {
                by_head
                    .entry(head(run))
                    .or_default()
                    .push((run, label.as_str()));
            }
        }
        Self { window, by_head }
    }

    /// Positions where some run starts, with the secret it belongs to.
    fn positions(&self, haystack: &[u8]) -> Vec<(usize, &'a str)> {
        let mut found = Vec::new();
        let mut i = 0;
        while i + self.window <= haystack.len() {
            let candidate = &haystack[i..i + self.window];
            let matched = self.by_head.get(&head(candidate)).and_then(|runs| {
                runs.iter()
                    .find(|(run, _)| *run == candidate)
                    .map(|(_, label)| *label)
            });
            match matched {
                Some(label) => {
                    found.push((i, label));
                    i += self.window;
                }
                None => i += 1,
            }
        }
        found
    }
}

fn head(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("windows are at least 8 bytes"))
}
