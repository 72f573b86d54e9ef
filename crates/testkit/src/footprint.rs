//! A live process's footprint as the kernel accounts it: resident memory
//! from `/proc/PID/smaps_rollup` (and, per mapping, from `/proc/PID/smaps`),
//! open file descriptors, threads, and CPU time (the process's, and each
//! thread's with its scheduling policy). The benchmark's idle-RSS figure and a
//! soak's growth checks read the same numbers, so they agree on what "RSS"
//! means: `Rss:` of smaps_rollup, which is `VmRSS` without its rounding
//! through per-thread counters.
//!
//! sceau is non-dumpable, so its smaps files and fd directory are readable
//! by root only; the tests run as root.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The totals of `/proc/PID/smaps_rollup`, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rollup {
    /// Every resident page mapped, shared ones (libc's text) included.
    pub rss_kib: u64,
    /// Resident pages divided by how many processes map each.
    pub pss_kib: u64,
    /// Pages no file backs: heap, stacks, arenas, locked DEK pages.
    pub anonymous_kib: u64,
    /// Pages this process wrote and shares with no one.
    pub private_dirty_kib: u64,
    /// Pages pinned with mlock.
    pub locked_kib: u64,
    pub swap_kib: u64,
}

impl Rollup {
    /// File-backed resident pages: program and library text and data.
    pub fn file_kib(&self) -> u64 {
        self.rss_kib.saturating_sub(self.anonymous_kib)
    }
}

/// What a soak samples over time: memory, descriptors, threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub memory: Rollup,
    pub open_fds: usize,
    pub threads: usize,
}

impl std::fmt::Display for Footprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |kib: u64| kib as f64 / 1024.0;
        write!(
            f,
            "RSS {:.1} MiB (anonymous {:.1}, file {:.1}, locked {} KiB), {} fds, {} threads",
            mib(self.memory.rss_kib),
            mib(self.memory.anonymous_kib),
            mib(self.memory.file_kib()),
            self.memory.locked_kib,
            self.open_fds,
            self.threads
        )
    }
}

/// Memory, fd count and thread count of `pid`, read one after the other.
pub fn footprint(pid: u32) -> io::Result<Footprint> {
    Ok(Footprint {
        memory: rollup(pid)?,
        open_fds: open_fds(pid)?,
        threads: threads(pid)?,
    })
}

/// `/proc/PID/smaps_rollup`.
pub fn rollup(pid: u32) -> io::Result<Rollup> {
    parse_rollup(&std::fs::read_to_string(proc_path(pid, "smaps_rollup"))?)
}

/// `Rss:` of `/proc/PID/smaps_rollup`, in KiB.
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    rollup(pid).map(|r| r.rss_kib)
}

/// Entries in `/proc/PID/fd`.
pub fn open_fds(pid: u32) -> io::Result<usize> {
    Ok(std::fs::read_dir(proc_path(pid, "fd"))?.count())
}

/// Entries in `/proc/PID/task`: one per thread, the main thread included.
pub fn threads(pid: u32) -> io::Result<usize> {
    Ok(std::fs::read_dir(proc_path(pid, "task"))?.count())
}

/// One thread of a process, as `/proc/PID/task/TID` shows it.
#[derive(Debug, Clone)]
pub struct Thread {
    pub id: u32,
    /// Its `comm`: the name the program gave it.
    pub name: String,
    /// Its scheduling policy (`SCHED_IDLE` is 5).
    pub policy: u32,
    /// Time it has run on a CPU: nanoseconds from `schedstat`, or without
    /// it, utime and stime in clock ticks.
    pub cpu: Duration,
}

/// User plus system CPU time of the whole process, from `/proc/PID/stat`,
/// in clock ticks (10 ms).
pub fn cpu_time(pid: u32) -> io::Result<Duration> {
    let fields = stat_fields(&std::fs::read_to_string(proc_path(pid, "stat"))?)?;
    ticks(&fields)
}

/// Every thread of `pid` that still runs when its files are read.
pub fn threads_of(pid: u32) -> io::Result<Vec<Thread>> {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(proc_path(pid, "task"))? {
        let Some(id) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let dir = proc_path(pid, &format!("task/{id}"));
        // A thread that ended between the listing and the reads is skipped.
        if let Ok(thread) = read_thread(id, &dir) {
            threads.push(thread);
        }
    }
    Ok(threads)
}

fn read_thread(id: u32, dir: &Path) -> io::Result<Thread> {
    let name = std::fs::read_to_string(dir.join("comm"))?;
    let fields = stat_fields(&std::fs::read_to_string(dir.join("stat"))?)?;
    let policy = stat_field(&fields, 41)? as u32;
    let run_ns = std::fs::read_to_string(dir.join("schedstat"))
        .ok()
        .and_then(|s| s.split(' ').next()?.parse().ok());
    let cpu = match run_ns {
        Some(ns) => Duration::from_nanos(ns),
        None => ticks(&fields)?,
    };
    Ok(Thread {
        id,
        name: name.trim().to_string(),
        policy,
        cpu,
    })
}

/// The fields of a `stat` file after "PID (COMM) ", whose COMM may itself
/// hold spaces and parentheses: field N of proc(5) is at N - 3.
fn stat_fields(stat: &str) -> io::Result<Vec<String>> {
    let (_, rest) = stat
        .rsplit_once(") ")
        .ok_or_else(|| io::Error::other(format!("not a stat line: {stat:?}")))?;
    Ok(rest.split(' ').map(str::to_string).collect())
}

/// Field `n` of proc(5)'s numbering (state is 3), as a number.
fn stat_field(fields: &[String], n: usize) -> io::Result<u64> {
    fields
        .get(n - 3)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::other(format!("stat field {n} missing")))
}

/// utime plus stime (fields 14 and 15), in clock ticks: USER_HZ is 100 on
/// every Linux architecture.
fn ticks(fields: &[String]) -> io::Result<Duration> {
    Ok(Duration::from_millis(
        10 * (stat_field(fields, 14)? + stat_field(fields, 15)?),
    ))
}

/// Resident KiB per mapped object, largest first: a library or the program
/// by file name (text, data and relro together), `[heap]`, `[stack]`, and
/// each anonymous mapping on its own as `[anon] SIZE KiB PERMS`, because
/// thread stacks and malloc arenas are told apart by their size.
pub fn rss_by_mapping(pid: u32) -> io::Result<Vec<(String, u64)>> {
    parse_smaps(&std::fs::read_to_string(proc_path(pid, "smaps"))?)
}

fn proc_path(pid: u32, file: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{file}"))
}

fn parse_rollup(text: &str) -> io::Result<Rollup> {
    let mut rollup = Rollup::default();
    let mut seen_rss = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "Rss" => {
                seen_rss = true;
                &mut rollup.rss_kib
            }
            "Pss" => &mut rollup.pss_kib,
            "Anonymous" => &mut rollup.anonymous_kib,
            "Private_Dirty" => &mut rollup.private_dirty_kib,
            "Locked" => &mut rollup.locked_kib,
            "Swap" => &mut rollup.swap_kib,
            _ => continue,
        };
        *slot = kib(value).ok_or_else(|| malformed(line))?;
    }
    match seen_rss {
        true => Ok(rollup),
        false => Err(malformed("no Rss: line")),
    }
}

fn parse_smaps(text: &str) -> io::Result<Vec<(String, u64)>> {
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = mapping_name(line) {
            current = Some(name);
        } else if let Some(value) = line.strip_prefix("Rss:") {
            let name = current.take().ok_or_else(|| malformed(line))?;
            *by_name.entry(name).or_default() += kib(value).ok_or_else(|| malformed(line))?;
        }
    }
    let mut rows: Vec<(String, u64)> = by_name.into_iter().filter(|(_, k)| *k > 0).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(rows)
}

/// The name a mapping's header line (`START-END PERMS OFFSET DEV INODE
/// [PATH]`) is counted under, or `None` for any other line.
fn mapping_name(line: &str) -> Option<String> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    let _offset = fields.next()?;
    let _device = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.collect::<Vec<&str>>().join(" ");
    if path.is_empty() {
        return Some(format!("[anon] {} KiB {perms}", (end - start) / 1024));
    }
    Some(match path.rsplit_once('/') {
        Some((_, file)) => file.to_string(),
        None => path,
    })
}

/// "  1234 kB" → 1234.
fn kib(value: &str) -> Option<u64> {
    value.trim().strip_suffix("kB")?.trim().parse().ok()
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected smaps text: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    const ROLLUP: &str = "\
55d0c0000000-7ffd5e5fe000 ---p 00000000 00:00 0                          [rollup]
Rss:               12184 kB
Pss:                9001 kB
Pss_Anon:           2400 kB
Shared_Clean:       5620 kB
Private_Dirty:      2404 kB
Anonymous:          2400 kB
Locked:                4 kB
Swap:                  0 kB
";

    #[test]
    fn reads_the_rollup_fields() {
        let rollup = parse_rollup(ROLLUP).unwrap();
        assert_eq!(
            rollup,
            Rollup {
                rss_kib: 12184,
                pss_kib: 9001,
                anonymous_kib: 2400,
                private_dirty_kib: 2404,
                locked_kib: 4,
                swap_kib: 0,
            }
        );
        assert_eq!(rollup.file_kib(), 12184 - 2400);
        assert!(parse_rollup("Pss: 1 kB\n").is_err(), "no Rss line");
        assert!(parse_rollup("Rss: many\n").is_err(), "not a number");
    }

    #[test]
    fn groups_mappings_by_file_and_keeps_anonymous_ones_apart() {
        let smaps = "\
5600aa000000-5600aa100000 r-xp 00001000 08:01 42   /usr/bin/sceau
Rss:                 600 kB
5600aa100000-5600aa120000 r--p 00101000 08:01 42   /usr/bin/sceau
Rss:                 100 kB
5600ab000000-5600ab080000 rw-p 00000000 00:00 0    [heap]
Rss:                 300 kB
7f0000000000-7f0000200000 rw-p 00000000 00:00 0 
Rss:                 120 kB
7f0000200000-7f0000201000 ---p 00000000 00:00 0 
Rss:                   0 kB
7f1000000000-7f1000010000 r-xp 00000000 08:01 7    /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                  64 kB
";
        assert_eq!(
            parse_smaps(smaps).unwrap(),
            vec![
                ("sceau".to_string(), 700),
                ("[heap]".to_string(), 300),
                ("[anon] 2048 KiB rw-p".to_string(), 120),
                ("libc.so.6".to_string(), 64),
            ]
        );
    }

    /// This process with three threads held open, and a child with a known
    /// set of descriptors, as a soak reads sceau from outside.
    #[test]
    fn counts_threads_and_fds_of_live_processes() {
        let pid = std::process::id();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = std::sync::Arc::new(std::sync::Mutex::new(wait));
        let held: Vec<_> = (0..3)
            .map(|_| {
                let wait = wait.clone();
                std::thread::spawn(move || {
                    let _ = wait.lock().unwrap().recv();
                })
            })
            .collect();
        let own = footprint(pid).unwrap();
        assert!(own.threads >= 4, "{own}");
        assert!(own.memory.rss_kib > 0 && own.memory.pss_kib > 0, "{own}");
        drop(release);
        for thread in held {
            thread.join().unwrap();
        }

        // Two sleeps that differ by two redirections: the fds they inherit
        // from the test runner (cargo's jobserver pipes, say) are the same.
        let (mut plain, plain_pid) = sleeping_child("");
        let (mut redirected, redirected_pid) = sleeping_child("exec 7</dev/null 8</dev/null; ");
        let plain_footprint = footprint(plain_pid).unwrap();
        let counted = footprint(redirected_pid).unwrap();
        assert_eq!(counted.open_fds, plain_footprint.open_fds + 2, "{counted}");
        assert_eq!(counted.threads, 1, "{counted}");
        let mappings = rss_by_mapping(redirected_pid).unwrap();
        let summed: u64 = mappings.iter().map(|(_, kib)| kib).sum();
        let rss = rss_kib(redirected_pid).unwrap();
        assert!(
            summed.abs_diff(rss) <= rss / 10,
            "mappings {summed} KiB against Rss {rss} KiB: {mappings:?}"
        );
        for child in [&mut plain, &mut redirected] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert!(
            footprint(plain_pid).is_err(),
            "a reaped process has no footprint"
        );
    }

    /// `bash -c "{setup}exec sleep 30"`, returned once bash has become sleep
    /// and the loader has mapped libc.
    fn sleeping_child(setup: &str) -> (std::process::Child, u32) {
        let child = Command::new("bash")
            .args(["-c", &format!("{setup}exec sleep 30")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let settled = || {
            let comm = std::fs::read_to_string(proc_path(pid, "comm")).unwrap_or_default();
            let libc_mapped = rss_by_mapping(pid)
                .is_ok_and(|m| m.iter().any(|(name, _)| name.starts_with("libc.so")));
            comm.trim() == "sleep" && libc_mapped
        };
        assert!(crate::process::poll_until(
            std::time::Duration::from_secs(5),
            settled
        ));
        (child, pid)
    }
}
