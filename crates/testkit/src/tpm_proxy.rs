//! A TPM latency model and fault injector: a command-aware TCP proxy in front
//! of a swtpm, spoken to through tpm2-tss's `swtpm` TCTI.
//!
//! What crosses the wire (tpm2-tss 3.2.1, `src/tss2-tcti/tcti-swtpm.c`):
//!
//! - the command port P carries bare TPM commands and responses, no framing
//!   of its own: the TCTI connects, writes one command, reads the 10-byte
//!   response header, then `size - 10` more bytes, and closes the connection.
//!   So every command is a new connection. At initialisation it also opens
//!   and closes one connection without writing anything (a reachability
//!   check). Other clients may send several commands on one connection; the
//!   proxy handles both.
//! - the control port P + 1 carries swtpm's control channel: a 4-byte
//!   command code and its payload, answered by a 4-byte result and payload,
//!   one exchange per connection (`CMD_SET_LOCALITY` at initialisation).
//!   The proxy forwards it untouched.
//!
//! For each TPM command the proxy reads the whole command (header: tag,
//! size, command code), counts it by command code, either answers it itself
//! with an injected return code or forwards it and reads the whole response,
//! then holds the response until the command's total time reaches its
//! modelled latency: the [`Profile`]'s figure for that command code, with
//! uniform jitter from a seeded generator, times a scale factor. A TPM runs
//! one command at a time, so the proxy does too: a command's exchange with
//! swtpm and its modelled delay happen under one lock, and concurrent
//! clients (two tools, a soak's many connections) queue behind each other's
//! modelled time as they would on a chip. Each command gets its own
//! connection to swtpm, opened and closed under that lock, as the TCTI
//! itself does: swtpm serves one connection at a time.
//!
//! It also follows the transient handles and sessions the clients hold
//! (handles returned by CreatePrimary, Load, LoadExternal, CreateLoaded,
//! StartAuthSession and ContextLoad, minus FlushContext, emptied by
//! Startup), so that a soak can report handle growth. Sessions the TPM ends
//! by itself (continueSession clear) and a TPM reset behind the proxy's back
//! are not seen: the set can only over-count.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::bus_proxy::listener_pair;

mod jitter;
mod profile;
#[cfg(test)]
mod tests;
mod wire;

use jitter::SplitMix64;
pub use profile::{Profile, ProfileError};
use wire::{CC_CREATE_PRIMARY, CC_FLUSH_CONTEXT, CC_STARTUP, RETURNS_A_HANDLE};
pub use wire::{HEADER_LEN, Header, command_code, command_name, error_response, rc, read_message};

/// What the proxy does instead of, or besides, forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answers the next `count` commands (only those with command code
    /// `only`, when given) with the return code `rc`, without forwarding
    /// them. Several may be pending; a command takes the first, in the
    /// order injected, that applies to it.
    Answer {
        rc: u32,
        count: u64,
        only: Option<u32>,
    },
    /// Holds every response (forwarded or injected) until [`TpmProxy::release`].
    Hang,
    /// Closes every open connection now, on both ports; a command in flight
    /// gets no answer. New connections are accepted as before.
    DropConnections,
    /// Until [`TpmProxy::clear_faults`], rewrites every CreatePrimary of an
    /// ECC key with an empty `unique` (sceau's SRK template) to carry a
    /// one-byte `unique.x`: the TPM then makes another key of the same
    /// template, as an interposer on the bus would have it do, and the
    /// client sees a well-formed answer for a key it did not ask for.
    SubstitutePrimaries,
}

/// The seed [`TpmProxy::start`] uses, so two runs model the same delays.
pub const DEFAULT_SEED: u64 = 0x5CEA_u64;

struct Pending {
    rc: u32,
    remaining: u64,
    only: Option<u32>,
}

struct State {
    counts: BTreeMap<u32, u64>,
    modelled: Duration,
    injected: u64,
    scale: f64,
    rng: SplitMix64,
    answers: Vec<Pending>,
    hung: bool,
    substitute_primaries: bool,
    substituted: u64,
    /// Bumped by DropConnections: a connection that sees a newer generation
    /// than its own after a wait is gone.
    generation: u64,
    handles: BTreeSet<u32>,
    connections: HashMap<u64, TcpStream>,
    next_connection: u64,
}

struct Shared {
    tpm_port: u16,
    profile: Profile,
    /// Held while the modelled TPM executes a command.
    chip: Mutex<()>,
    state: Mutex<State>,
    released: Condvar,
    closed: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not take the test down with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps a clone of `stream` so DropConnections and Drop can close it.
    fn register(&self, stream: &TcpStream) -> Option<(u64, u64)> {
        let clone = stream.try_clone().ok()?;
        let mut state = self.lock();
        let id = state.next_connection;
        state.next_connection += 1;
        state.connections.insert(id, clone);
        Some((id, state.generation))
    }

    fn unregister(&self, id: u64) {
        self.lock().connections.remove(&id);
    }

    fn drop_connections(&self, state: &mut State) {
        state.generation += 1;
        for (_, stream) in state.connections.drain() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.released.notify_all();
    }

    /// Counts the command, takes an injected answer if one applies, and
    /// draws its modelled latency.
    fn admit(&self, code: u32) -> (Option<u32>, Duration) {
        let mut state = self.lock();
        *state.counts.entry(code).or_default() += 1;
        let applies = |pending: &Pending| pending.only.is_none_or(|only| only == code);
        let injected = state.answers.iter().position(applies).map(|index| {
            let pending = &mut state.answers[index];
            pending.remaining -= 1;
            let rc = pending.rc;
            if pending.remaining == 0 {
                state.answers.remove(index);
            }
            rc
        });
        if injected.is_some() {
            state.injected += 1;
        }
        let jitter = self.profile.jitter() * (2.0 * state.rng.next_unit() - 1.0);
        let seconds = self.profile.latency(code).as_secs_f64() * (1.0 + jitter) * state.scale;
        let latency = Duration::from_secs_f64(seconds.max(0.0));
        state.modelled += latency;
        (injected, latency)
    }

    /// Follows the handles the clients hold, from a successful exchange.
    fn track_handles(&self, code: u32, command: &[u8], response: &[u8]) {
        let word = |bytes: &[u8]| -> Option<u32> {
            Some(u32::from_be_bytes(bytes.get(10..14)?.try_into().ok()?))
        };
        let mut state = self.lock();
        if code == CC_STARTUP {
            state.handles.clear();
        } else if code == CC_FLUSH_CONTEXT {
            // FlushContext has no handle area: flushHandle is its parameter.
            if let Some(handle) = word(command) {
                state.handles.remove(&handle);
            }
        } else if RETURNS_A_HANDLE.contains(&code)
            && let Some(handle) = word(response)
        {
            state.handles.insert(handle);
        }
    }

    /// Waits while the proxy hangs; false if this connection was dropped
    /// (or the proxy closed) meanwhile.
    fn wait_released(&self, generation: u64) -> bool {
        let mut state = self.lock();
        while state.hung && state.generation == generation && !self.closed.load(Ordering::Relaxed) {
            state = self
                .released
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        state.generation == generation && !self.closed.load(Ordering::Relaxed)
    }
}

/// The proxy: listens on a loopback pair Q, Q + 1 in front of a swtpm's
/// P, P + 1. Stops (closing every connection) when dropped.
pub struct TpmProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl TpmProxy {
    /// In front of the swtpm whose command port is `tpm_port`, with the
    /// jitter seeded by [`DEFAULT_SEED`], at scale 1.
    pub fn start(tpm_port: u16, profile: Profile) -> TpmProxy {
        Self::start_seeded(tpm_port, profile, DEFAULT_SEED)
    }

    pub fn start_seeded(tpm_port: u16, profile: Profile, seed: u64) -> TpmProxy {
        let shared = Arc::new(Shared {
            tpm_port,
            profile,
            chip: Mutex::new(()),
            state: Mutex::new(State {
                counts: BTreeMap::new(),
                modelled: Duration::ZERO,
                injected: 0,
                scale: 1.0,
                rng: SplitMix64(seed),
                answers: Vec::new(),
                hung: false,
                substitute_primaries: false,
                substituted: 0,
                generation: 0,
                handles: BTreeSet::new(),
                connections: HashMap::new(),
                next_connection: 0,
            }),
            released: Condvar::new(),
            closed: AtomicBool::new(false),
        });
        let (command, control) = listener_pair();
        let port = command.local_addr().expect("the proxy's address").port();
        let accept = |listener: TcpListener, serve: fn(Arc<Shared>, TcpStream)| {
            let shared = shared.clone();
            std::thread::spawn(move || accept_all(listener, shared, serve));
        };
        accept(command, serve_commands);
        accept(control, serve_control);
        TpmProxy { port, shared }
    }

    /// The command port; the control channel is on port + 1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TCTI string that reaches the TPM through the proxy.
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }

    /// Commands seen since the start or the last [`TpmProxy::reset_counts`],
    /// by name (injected answers included).
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.shared
            .lock()
            .counts
            .iter()
            .map(|(code, n)| (command_name(*code).into_owned(), *n))
            .collect()
    }

    /// All commands seen since the start or the last reset.
    pub fn total_commands(&self) -> u64 {
        self.shared.lock().counts.values().sum()
    }

    /// Zeroes the command counts and the modelled delay (the handles stay).
    pub fn reset_counts(&self) {
        let mut state = self.shared.lock();
        state.counts.clear();
        state.modelled = Duration::ZERO;
    }

    /// The sum of the modelled latencies of the commands counted.
    pub fn modelled_delay(&self) -> Duration {
        self.shared.lock().modelled
    }

    /// Multiplies every latency from now on (0 turns the delays off).
    pub fn set_scale(&self, scale: f64) {
        assert!(
            scale.is_finite() && scale >= 0.0,
            "scale {scale}: a non-negative number"
        );
        self.shared.lock().scale = scale;
    }

    pub fn inject(&self, fault: Fault) {
        let mut state = self.shared.lock();
        match fault {
            Fault::Answer { count: 0, .. } => {}
            Fault::Answer { rc, count, only } => state.answers.push(Pending {
                rc,
                remaining: count,
                only,
            }),
            Fault::Hang => state.hung = true,
            Fault::DropConnections => self.shared.drop_connections(&mut state),
            Fault::SubstitutePrimaries => state.substitute_primaries = true,
        }
    }

    /// How many CreatePrimary commands [`Fault::SubstitutePrimaries`]
    /// rewrote.
    pub fn substituted(&self) -> u64 {
        self.shared.lock().substituted
    }

    /// Lets held responses go and stops holding new ones.
    pub fn release(&self) {
        self.shared.lock().hung = false;
        self.shared.released.notify_all();
    }

    /// Cancels pending injected answers, stops substituting primaries and
    /// releases a hang.
    pub fn clear_faults(&self) {
        let mut state = self.shared.lock();
        state.answers.clear();
        state.substitute_primaries = false;
        drop(state);
        self.release();
    }

    /// How many commands the proxy answered itself.
    pub fn injected(&self) -> u64 {
        self.shared.lock().injected
    }

    /// Injected answers not yet given (saturating: `u64::MAX` means endless).
    pub fn pending_answers(&self) -> u64 {
        self.shared
            .lock()
            .answers
            .iter()
            .fold(0u64, |sum, pending| sum.saturating_add(pending.remaining))
    }

    /// The transient object and session handles the clients hold, as far as
    /// the proxy saw them created and flushed.
    pub fn held_handles(&self) -> Vec<u32> {
        self.shared.lock().handles.iter().copied().collect()
    }
}

impl Drop for TpmProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        {
            let mut state = self.shared.lock();
            self.shared.drop_connections(&mut state);
        }
        // Wakes the accept loops, which then see `closed` and return.
        for port in [self.port, self.port + 1] {
            let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, port));
        }
    }
}

fn accept_all(listener: TcpListener, shared: Arc<Shared>, serve: fn(Arc<Shared>, TcpStream)) {
    for client in listener.incoming() {
        if shared.closed.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        let _ = client.set_nodelay(true);
        let shared = shared.clone();
        std::thread::spawn(move || serve(shared, client));
    }
}

/// One client connection on the command port: command by command until the
/// client closes it, the TPM goes away, or the proxy drops it.
fn serve_commands(shared: Arc<Shared>, mut client: TcpStream) {
    let Some((id, generation)) = shared.register(&client) else {
        return;
    };
    // The TCTI's reachability check closes before sending anything.
    while let Ok(Some((header, command))) = read_message(&mut client) {
        let Some(response) = execute(&shared, header.code, &command) else {
            break;
        };
        if !shared.wait_released(generation) || client.write_all(&response).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    shared.unregister(id);
}

/// The modelled TPM runs one command: answers it or has swtpm answer it,
/// and takes the command's modelled time. None if swtpm could not answer.
fn execute(shared: &Shared, code: u32, command: &[u8]) -> Option<Vec<u8>> {
    let _chip = shared
        .chip
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let started = Instant::now();
    let (injected, latency) = shared.admit(code);
    let response = match injected {
        Some(rc) => error_response(rc),
        None => {
            let substitute = code == CC_CREATE_PRIMARY && shared.lock().substitute_primaries;
            let rewritten = substitute.then(|| substituted_primary(command)).flatten();
            if rewritten.is_some() {
                shared.lock().substituted += 1;
            }
            let command = rewritten.as_deref().unwrap_or(command);
            let response = exchange(shared.tpm_port, command).ok()?;
            if response.get(6..10) == Some(&[0, 0, 0, 0]) {
                shared.track_handles(code, command, &response);
            }
            response
        }
    };
    std::thread::sleep(latency.saturating_sub(started.elapsed()));
    Some(response)
}

/// A CreatePrimary command whose inPublic is an ECC template with an
/// empty `unique` (its last four bytes, two empty TPM2Bs), rewritten with
/// `unique.x` one byte long: the sizes of inPublic and of the command grow
/// by one. None for any other CreatePrimary, left as it is.
fn substituted_primary(command: &[u8]) -> Option<Vec<u8>> {
    const TPM_ALG_ECC: [u8; 2] = [0x00, 0x23];
    let u16_at = |at: usize| -> Option<usize> {
        Some(u16::from_be_bytes(command.get(at..at + 2)?.try_into().ok()?) as usize)
    };
    // Header (10), primaryHandle (4), the authorization area's size (4).
    let auth_size = u32::from_be_bytes(command.get(14..18)?.try_into().ok()?) as usize;
    let sensitive_at = 18 + auth_size;
    let public_at = sensitive_at + 2 + u16_at(sensitive_at)?;
    let public_size = u16_at(public_at)?;
    let public = command.get(public_at + 2..public_at + 2 + public_size)?;
    if public.get(..2)? != TPM_ALG_ECC || !public.ends_with(&[0, 0, 0, 0]) {
        return None;
    }
    let mut rewritten = Vec::with_capacity(command.len() + 1);
    rewritten.extend_from_slice(&command[..public_at]);
    rewritten.extend_from_slice(&(public_size as u16 + 1).to_be_bytes());
    rewritten.extend_from_slice(&public[..public_size - 4]);
    rewritten.extend_from_slice(&[0, 1, 0x5A, 0, 0]);
    rewritten.extend_from_slice(&command[public_at + 2 + public_size..]);
    let size = rewritten.len() as u32;
    rewritten[2..6].copy_from_slice(&size.to_be_bytes());
    Some(rewritten)
}

/// Sends one command to swtpm on a connection of its own and reads its
/// whole response.
fn exchange(tpm_port: u16, command: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, tpm_port))?;
    let _ = stream.set_nodelay(true);
    stream.write_all(command)?;
    match read_message(&mut stream)? {
        Some((_, response)) => Ok(response),
        None => Err(ErrorKind::UnexpectedEof.into()),
    }
}

/// One connection on the control port, forwarded byte for byte.
fn serve_control(shared: Arc<Shared>, client: TcpStream) {
    let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, shared.tpm_port + 1)) else {
        return;
    };
    let Some((id, _)) = shared.register(&client) else {
        return;
    };
    let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone()) else {
        shared.unregister(id);
        return;
    };
    let up = std::thread::spawn(move || pump(client_read, server));
    pump(server_read, client);
    let _ = up.join();
    shared.unregister(id);
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
