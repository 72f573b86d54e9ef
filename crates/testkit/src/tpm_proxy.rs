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

/// TPM2_CC values (TPM 2.0 Part 2, table 12; tpm2-tss 3.2.1
/// `include/tss2/tss2_tpm2_types.h`) of the commands sceau and its SPIRE
/// plugins send, and those a soak or a by-hand session is likely to see.
/// Other codes print as hex.
const COMMAND_NAMES: &[(u32, &str)] = &[
    (0x120, "EvictControl"),
    (0x126, "Clear"),
    (0x12A, "NV_DefineSpace"),
    (0x131, "CreatePrimary"),
    (0x134, "NV_Increment"),
    (0x137, "NV_Write"),
    (0x139, "DictionaryAttackLockReset"),
    (0x13E, "SequenceComplete"),
    (0x143, "SelfTest"),
    (0x144, "Startup"),
    (0x145, "Shutdown"),
    (0x147, "ActivateCredential"),
    (0x148, "Certify"),
    (0x14A, "CertifyCreation"),
    (0x14B, "Duplicate"),
    (0x14E, "NV_Read"),
    (0x151, "PolicySecret"),
    (0x153, "Create"),
    (0x154, "ECDH_ZGen"),
    (0x156, "Import"),
    (0x157, "Load"),
    (0x158, "Quote"),
    (0x159, "RSA_Decrypt"),
    (0x15D, "Sign"),
    (0x15E, "Unseal"),
    (0x160, "PolicySigned"),
    (0x161, "ContextLoad"),
    (0x162, "ContextSave"),
    (0x165, "FlushContext"),
    (0x167, "LoadExternal"),
    (0x168, "MakeCredential"),
    (0x169, "NV_ReadPublic"),
    (0x16A, "PolicyAuthorize"),
    (0x16B, "PolicyAuthValue"),
    (0x16C, "PolicyCommandCode"),
    (0x171, "PolicyOR"),
    (0x173, "ReadPublic"),
    (0x176, "StartAuthSession"),
    (0x177, "VerifySignature"),
    (0x17A, "GetCapability"),
    (0x17B, "GetRandom"),
    (0x17D, "Hash"),
    (0x17E, "PCR_Read"),
    (0x17F, "PolicyPCR"),
    (0x182, "PCR_Extend"),
    (0x186, "HashSequenceStart"),
    (0x189, "PolicyGetDigest"),
    (0x18A, "TestParms"),
    (0x191, "CreateLoaded"),
];

/// Command codes whose response handle area holds one new handle.
const RETURNS_A_HANDLE: [u32; 6] = [0x131, 0x157, 0x167, 0x191, 0x176, 0x161];
const CC_FLUSH_CONTEXT: u32 = 0x165;
const CC_STARTUP: u32 = 0x144;
const CC_CREATE_PRIMARY: u32 = 0x131;

/// tag, size, command code (or return code): the header of every command
/// and response.
pub const HEADER_LEN: usize = 10;
/// TPM_ST_NO_SESSIONS: the tag of every error response.
const TAG_NO_SESSIONS: u16 = 0x8001;
/// Far above any real command (TPM2_MAX_COMMAND_SIZE is 4096 on common
/// parts); a larger size field means the stream is out of step.
const MAX_MESSAGE: u32 = 1 << 16;

/// TPM return codes the fault matrix injects (TPM 2.0 Part 2, table 16).
pub mod rc {
    pub const OBJECT_MEMORY: u32 = 0x902;
    pub const SESSION_MEMORY: u32 = 0x903;
    pub const MEMORY: u32 = 0x904;
    pub const YIELDED: u32 = 0x908;
    pub const TESTING: u32 = 0x90A;
    pub const RETRY: u32 = 0x922;
}

/// The name of a TPM2_CC value, or `0x…` for one without a name here.
pub fn command_name(code: u32) -> Cow<'static, str> {
    match COMMAND_NAMES.iter().find(|(c, _)| *c == code) {
        Some((_, name)) => Cow::Borrowed(name),
        None => Cow::Owned(format!("{code:#x}")),
    }
}

/// The TPM2_CC value of a command name (as in [`command_name`]) or of a hex
/// code written `0x…`.
pub fn command_code(name: &str) -> Option<u32> {
    if let Some(hex) = name.strip_prefix("0x") {
        return u32::from_str_radix(hex, 16).ok();
    }
    COMMAND_NAMES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(code, _)| *code)
}

/// The header of a command or response: tag, total size, and the command
/// code (in a command) or return code (in a response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tag: u16,
    pub size: u32,
    pub code: u32,
}

impl Header {
    /// Parses a header; refuses a size that cannot frame a TPM message.
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> Result<Header, String> {
        let header = Header {
            tag: u16::from_be_bytes([bytes[0], bytes[1]]),
            size: u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]),
            code: u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]),
        };
        if header.size < HEADER_LEN as u32 || header.size > MAX_MESSAGE {
            return Err(format!(
                "a TPM message of {} bytes (header {bytes:02x?}): not a TPM 2.0 stream",
                header.size
            ));
        }
        Ok(header)
    }
}

/// The response a TPM gives when it refuses a command with `code`:
/// `80 01 | 00 00 00 0a | code`.
pub fn error_response(code: u32) -> Vec<u8> {
    let mut response = Vec::with_capacity(HEADER_LEN);
    response.extend_from_slice(&TAG_NO_SESSIONS.to_be_bytes());
    response.extend_from_slice(&(HEADER_LEN as u32).to_be_bytes());
    response.extend_from_slice(&code.to_be_bytes());
    response
}

/// Reads one whole TPM message (command or response). `Ok(None)` when the
/// peer closed the connection before its first byte.
pub fn read_message(stream: &mut impl Read) -> std::io::Result<Option<(Header, Vec<u8>)>> {
    let mut header_bytes = [0u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        match stream.read(&mut header_bytes[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let header = Header::parse(&header_bytes)
        .map_err(|why| std::io::Error::new(ErrorKind::InvalidData, why))?;
    let mut message = header_bytes.to_vec();
    message.resize(header.size as usize, 0);
    stream.read_exact(&mut message[HEADER_LEN..])?;
    Ok(Some((header, message)))
}

/// Per-command latencies: the model of one kind of TPM.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    default: Duration,
    /// Uniform jitter, ± this fraction of the latency.
    jitter: f64,
    latencies: BTreeMap<u32, Duration>,
}

/// Why a profile could not be read: the file and line, and what to write
/// instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.source_name, self.message),
            line => write!(f, "{}:{line}: {}", self.source_name, self.message),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// The discrete-TPM profile shipped with the kit (profiles/).
    pub fn discrete_tpm() -> Profile {
        Self::parse(
            include_str!("../profiles/discrete-tpm.profile"),
            "discrete-tpm.profile",
        )
        .expect("the shipped discrete-TPM profile parses")
    }

    /// The firmware-TPM profile shipped with the kit (profiles/).
    pub fn firmware_tpm() -> Profile {
        Self::parse(
            include_str!("../profiles/firmware-tpm.profile"),
            "firmware-tpm.profile",
        )
        .expect("the shipped firmware-TPM profile parses")
    }

    /// No delay at all: the proxy only counts and injects faults.
    pub fn instant() -> Profile {
        Profile {
            default: Duration::ZERO,
            jitter: 0.0,
            latencies: BTreeMap::new(),
        }
    }

    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
            source_name: path.display().to_string(),
            line: 0,
            message: format!("cannot read the profile: {e}"),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses the profile format: one `CommandName milliseconds` per line
    /// (a TPM2_CC name as in [`command_name`], or a hex code `0x…`),
    /// `default milliseconds` for every other command (required), and
    /// optionally `jitter percent`. `#` starts a comment.
    pub fn parse(text: &str, source_name: &str) -> Result<Profile, ProfileError> {
        let error = |line: usize, message: String| ProfileError {
            source_name: source_name.to_string(),
            line,
            message,
        };
        let (mut default, mut jitter) = (None, None);
        let mut latencies = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or_default();
            let words: Vec<&str> = content.split_whitespace().collect();
            let (key, value) = match words.as_slice() {
                [] => continue,
                [key, value] => (*key, *value),
                _ => {
                    return Err(error(
                        line,
                        format!(
                            "expected `CommandName milliseconds`, `default milliseconds` or \
                             `jitter percent`, got {:?}",
                            content.trim()
                        ),
                    ));
                }
            };
            let number = value
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| {
                    error(
                        line,
                        format!("{key}: {value:?} is not a non-negative number"),
                    )
                })?;
            let repeated = || error(line, format!("{key} is given twice"));
            match key {
                "default" if default.is_some() => return Err(repeated()),
                "default" => default = Some(Duration::from_secs_f64(number / 1000.0)),
                "jitter" if jitter.is_some() => return Err(repeated()),
                "jitter" if number > 100.0 => {
                    return Err(error(
                        line,
                        format!("jitter {value}: a percentage from 0 to 100"),
                    ));
                }
                "jitter" => jitter = Some(number / 100.0),
                name => {
                    let code = command_code(name).ok_or_else(|| {
                        error(
                            line,
                            format!(
                                "unknown command {name:?}: use a TPM2_CC name such as Create \
                                 or Unseal, or the hex code (0x153)"
                            ),
                        )
                    })?;
                    let latency = Duration::from_secs_f64(number / 1000.0);
                    if latencies.insert(code, latency).is_some() {
                        return Err(repeated());
                    }
                }
            }
        }
        let default = default.ok_or_else(|| {
            error(
                0,
                "no `default milliseconds` line: say how long the commands without a line \
                 of their own take"
                    .to_string(),
            )
        })?;
        Ok(Profile {
            default,
            jitter: jitter.unwrap_or(0.0),
            latencies,
        })
    }

    /// The modelled latency of `code`, before jitter and scale.
    pub fn latency(&self, code: u32) -> Duration {
        self.latencies.get(&code).copied().unwrap_or(self.default)
    }

    /// The jitter, as a fraction (0.15 for `jitter 15`).
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
}

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

/// A small seeded generator, SplitMix64 (Steele, Lea and Flood, 2014; the
/// generator behind Java's SplittableRandom): the jitter must be
/// reproducible from a seed, and the kit needs nothing more.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
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
        let jitter = self.profile.jitter * (2.0 * state.rng.next_unit() - 1.0);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        assert_eq!(command_name(0x153), "Create");
        assert_eq!(command_name(0x15E), "Unseal");
        assert_eq!(command_name(0x1FF), "0x1ff");
        assert_eq!(command_code("Load"), Some(0x157));
        assert_eq!(command_code("0x1ff"), Some(0x1FF));
        assert_eq!(command_code("Nonsense"), None);
        for (code, name) in COMMAND_NAMES {
            assert_eq!(command_code(name), Some(*code), "{name}");
        }
    }

    #[test]
    fn frames_a_command_split_across_reads() {
        // TPM2_GetRandom(16), delivered one byte per read.
        let command = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0x01, 0x7B, 0, 16, 0xAA, 0xBB];
        struct OneByte<'a>(&'a [u8]);
        impl Read for OneByte<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let Some((first, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                buf[0] = *first;
                self.0 = rest;
                Ok(1)
            }
        }
        let mut stream = OneByte(&command);
        let (header, message) = read_message(&mut stream).unwrap().unwrap();
        assert_eq!(
            header,
            Header {
                tag: 0x8001,
                size: 12,
                code: 0x17B
            }
        );
        assert_eq!(message, command[..12]);
        // The next message starts where this one ended.
        assert_eq!(stream.0, [0xAA, 0xBB]);
    }

    #[test]
    fn tells_a_clean_close_from_a_cut_message() {
        assert!(read_message(&mut &[][..]).unwrap().is_none());
        let cut = [0x80, 0x01, 0, 0, 0, 20, 0, 0, 1];
        assert_eq!(
            read_message(&mut &cut[..]).unwrap_err().kind(),
            ErrorKind::UnexpectedEof
        );
        let short_body = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 1, 0x7B, 0];
        assert!(read_message(&mut &short_body[..]).is_err());
    }

    #[test]
    fn refuses_sizes_that_cannot_frame_a_message() {
        for size in [0u32, 9, MAX_MESSAGE + 1] {
            let mut bytes = [0u8; HEADER_LEN];
            bytes[2..6].copy_from_slice(&size.to_be_bytes());
            assert!(Header::parse(&bytes).is_err(), "{size}");
        }
    }

    #[test]
    fn an_injected_answer_is_a_bare_error_response() {
        assert_eq!(
            error_response(rc::RETRY),
            [0x80, 0x01, 0, 0, 0, 0x0A, 0, 0, 0x09, 0x22]
        );
    }

    #[test]
    fn parses_a_profile() {
        let profile = Profile::parse(
            "# a TPM\n\
             default 100\n\
             jitter 10   # percent\n\
             \n\
             Create 80.5\n\
             0x1ff 3\n",
            "test",
        )
        .unwrap();
        assert_eq!(profile.latency(0x153), Duration::from_micros(80_500));
        assert_eq!(profile.latency(0x1FF), Duration::from_millis(3));
        assert_eq!(profile.latency(0x157), Duration::from_millis(100));
        assert!((profile.jitter() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn profile_errors_name_the_line_and_the_fix() {
        let cases = [
            ("default 1\nCreat 5\n", "test:2: unknown command \"Creat\""),
            ("default 1\nCreate -5\n", "test:2: Create: \"-5\" is not"),
            ("default 1\nCreate 5 ms\n", "test:2: expected `CommandName"),
            ("default 1\ndefault 2\n", "test:2: default is given twice"),
            ("default 1\nLoad 1\nLoad 2\n", "test:3: Load is given twice"),
            (
                "default 1\njitter 150\n",
                "test:2: jitter 150: a percentage",
            ),
            ("Create 5\n", "test: no `default milliseconds` line"),
        ];
        for (text, expected) in cases {
            let error = Profile::parse(text, "test").unwrap_err().to_string();
            assert!(error.starts_with(expected), "{text:?} gave {error:?}");
        }
    }

    #[test]
    fn the_shipped_profiles_parse_and_order_the_chips() {
        let (discrete, firmware) = (Profile::discrete_tpm(), Profile::firmware_tpm());
        for code in [0x131, 0x153, 0x157, 0x15E, 0x165, 0x176] {
            assert!(
                discrete.latency(code) > firmware.latency(code),
                "{}",
                command_name(code)
            );
        }
    }

    /// A stand-in for swtpm on a port pair: answers every command with
    /// success, and CreatePrimary with a fresh transient handle.
    fn fake_tpm() -> u16 {
        let (command, control) = listener_pair();
        let port = command.local_addr().unwrap().port();
        std::thread::spawn(move || {
            // Bound for as long as the fake answers; never used.
            let _control_port = control;
            let mut next_handle = 0x8000_0000u32;
            for mut stream in command.incoming().flatten() {
                while let Ok(Some((header, _))) = read_message(&mut stream) {
                    let mut response = error_response(0);
                    if header.code == 0x131 {
                        response[5] = 14;
                        response.extend_from_slice(&next_handle.to_be_bytes());
                        next_handle += 1;
                    }
                    let _ = stream.write_all(&response);
                }
            }
        });
        port
    }

    /// One command on its own connection, as the swtpm TCTI sends it.
    fn send(proxy: &TpmProxy, code: u32, parameter: Option<u32>) -> Vec<u8> {
        let mut command = vec![0x80, 0x01, 0, 0, 0, 10];
        command.extend_from_slice(&code.to_be_bytes());
        if let Some(word) = parameter {
            command.extend_from_slice(&word.to_be_bytes());
            command[5] = 14;
        }
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port())).unwrap();
        stream.write_all(&command).unwrap();
        read_message(&mut stream).unwrap().unwrap().1
    }

    fn return_code(response: &[u8]) -> u32 {
        u32::from_be_bytes(response[6..10].try_into().unwrap())
    }

    #[test]
    fn concurrent_commands_queue_behind_each_other_s_modelled_time() {
        let profile = Profile::parse("default 0\nCreate 60\n", "test").unwrap();
        let proxy = Arc::new(TpmProxy::start(fake_tpm(), profile));
        let started = Instant::now();
        let clients: Vec<_> = (0..3)
            .map(|_| {
                let proxy = proxy.clone();
                std::thread::spawn(move || return_code(&send(&proxy, 0x153, None)))
            })
            .collect();
        for client in clients {
            assert_eq!(client.join().unwrap(), 0);
        }
        assert!(started.elapsed() >= Duration::from_millis(180));
        let modelled = proxy.modelled_delay().as_secs_f64();
        assert!((modelled - 0.18).abs() < 1e-6, "{modelled}");
        assert_eq!(proxy.counts(), BTreeMap::from([("Create".to_string(), 3)]));
        proxy.set_scale(0.0);
        let started = Instant::now();
        send(&proxy, 0x153, None);
        assert!(started.elapsed() < Duration::from_millis(60));
    }

    #[test]
    fn injected_answers_go_to_the_chosen_command_only() {
        let proxy = TpmProxy::start(fake_tpm(), Profile::instant());
        proxy.inject(Fault::Answer {
            rc: rc::RETRY,
            count: 2,
            only: command_code("Create"),
        });
        assert_eq!(return_code(&send(&proxy, 0x157, None)), 0);
        assert_eq!(send(&proxy, 0x153, None), error_response(rc::RETRY));
        assert_eq!(return_code(&send(&proxy, 0x153, None)), rc::RETRY);
        assert_eq!(proxy.pending_answers(), 0);
        assert_eq!(return_code(&send(&proxy, 0x153, None)), 0);
        assert_eq!(proxy.injected(), 2);
        assert_eq!(proxy.total_commands(), 4);
        proxy.reset_counts();
        assert!(proxy.counts().is_empty());
    }

    #[test]
    fn follows_the_handles_created_and_flushed() {
        let proxy = TpmProxy::start(fake_tpm(), Profile::instant());
        send(&proxy, 0x131, None);
        send(&proxy, 0x131, None);
        assert_eq!(proxy.held_handles(), [0x8000_0000, 0x8000_0001]);
        send(&proxy, CC_FLUSH_CONTEXT, Some(0x8000_0000));
        assert_eq!(proxy.held_handles(), [0x8000_0001]);
        send(&proxy, CC_STARTUP, None);
        assert!(proxy.held_handles().is_empty());
    }

    #[test]
    fn a_hang_holds_answers_until_released_and_a_drop_cuts_them() {
        let proxy = Arc::new(TpmProxy::start(fake_tpm(), Profile::instant()));
        proxy.inject(Fault::Hang);
        let held = {
            let proxy = proxy.clone();
            std::thread::spawn(move || send(&proxy, 0x17A, None))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!held.is_finished());
        proxy.release();
        assert_eq!(return_code(&held.join().unwrap()), 0);

        proxy.inject(Fault::Hang);
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port())).unwrap();
        stream
            .write_all(&[0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x01, 0x7A])
            .unwrap();
        while proxy.total_commands() < 2 {
            std::thread::sleep(Duration::from_millis(5));
        }
        proxy.inject(Fault::DropConnections);
        assert!(!matches!(read_message(&mut stream), Ok(Some(_))));
        proxy.clear_faults();
        assert_eq!(return_code(&send(&proxy, 0x17A, None)), 0);
    }

    #[test]
    fn jitter_stays_within_its_bounds_and_follows_the_seed() {
        let draw = |seed| {
            let mut rng = SplitMix64(seed);
            (0..1000).map(|_| rng.next_unit()).collect::<Vec<f64>>()
        };
        let first = draw(7);
        assert!(first.iter().all(|u| (0.0..1.0).contains(u)));
        assert_eq!(first, draw(7));
        assert_ne!(first, draw(8));
    }
}
