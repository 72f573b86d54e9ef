//! Lifecycle events: the records an auditor looks for (start, key_id
//! changes, KEK rotation and retirement, boot policies, membership, refused
//! calls, TPM health, the sandbox), each with a fixed journald `MESSAGE_ID`
//! and its facts as native journal fields (`SCEAU_KEY_ID=…`), so that
//! `journalctl MESSAGE_ID=…` finds every one of a kind and `journalctl -x`
//! explains it from the catalog the packages install
//! (`packaging/journald/sceau.catalog`, checked against [`Kind::ALL`] by a
//! test).
//!
//! **Where they go.** Through journald's native socket
//! (`/run/systemd/journal/socket`) when it was connected before the sandbox:
//! by `serve` when its stderr is the journal (`JOURNAL_STREAM` set, as under
//! systemd), and by the one-shot commands that change keys (`kek rotate`,
//! `kek retire`, `revoke-policy`) whenever the socket exists, since an
//! operator's shell is not the journal and these are the records an audit
//! asks for. Elsewhere (a terminal, a container) an event is an ordinary
//! log line on stderr with `message_id=` and its fields in logfmt.
//!
//! **Why a socket here, when call records stay on stderr** (`logging`):
//! events are rare, and native fields are what makes them searchable. The
//! socket is a datagram socket connected to journald alone, before the
//! sandbox, like the notify socket: after it seccomp allows `send` on it
//! and nothing can connect it elsewhere. It is non-blocking: a journal that
//! cannot take the datagram gets the event as a stderr line instead, never
//! a stalled server.
//!
//! **Priorities** place events in journald's rate-limit pools away from the
//! flood of successful call records (INFO): refused calls are WARNING, the
//! lifecycle events NOTICE, a TPM that stops answering ERR. The unit sets
//! journald's rate limit for sceau far beyond what it can answer (a unit
//! cannot turn it off), so none is dropped; docs/audit-trail.md says what
//! a lower limit costs.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::OnceLock;

/// journald's native protocol socket.
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";
/// The longest field value sent: a record stays one small datagram.
const MAX_VALUE: usize = 2048;

/// Every kind of event, with its `MESSAGE_ID` (made once with
/// `systemd-id128 new`; never change one, queries depend on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Started,
    KeyIdChanged,
    Reloaded,
    KekRotated,
    KekRetired,
    PolicyLoaded,
    PolicyMismatch,
    PolicyRevoked,
    Membership,
    CallRefused,
    TpmUnhealthy,
    TpmHealthy,
    Sandbox,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::Started,
        Kind::KeyIdChanged,
        Kind::Reloaded,
        Kind::KekRotated,
        Kind::KekRetired,
        Kind::PolicyLoaded,
        Kind::PolicyMismatch,
        Kind::PolicyRevoked,
        Kind::Membership,
        Kind::CallRefused,
        Kind::TpmUnhealthy,
        Kind::TpmHealthy,
        Kind::Sandbox,
    ];

    pub fn message_id(self) -> &'static str {
        match self {
            Kind::Started => "3166a606872f4f1da0cee51f1e993b44",
            Kind::KeyIdChanged => "007b11f8cf7643d3953737c043da158d",
            Kind::Reloaded => "9011f275aaf444f281f48e00141d9ec5",
            Kind::KekRotated => "81689816d8d54b938aa664a45d61736c",
            Kind::KekRetired => "7e3cc07aa35044ad9aada9a9991f0ef5",
            Kind::PolicyLoaded => "269c69fba39d42969a8e9d05ad25c2a1",
            Kind::PolicyMismatch => "22ed595b5dfb4ba7857f3b70b527d180",
            Kind::PolicyRevoked => "2e59a971944c42afa200a6a714a3bb93",
            Kind::Membership => "3c09fbdad2e74acaa608cf54fd1d56b0",
            Kind::CallRefused => "26aad01f05d04dbdb22b92373f70a801",
            Kind::TpmUnhealthy => "a35220b15e93458eaf75c4c9ad93c217",
            Kind::TpmHealthy => "9c6dc244b7454ad9b35bb5b98a978de3",
            Kind::Sandbox => "9d946c948cb8443fbad0acfae53d9019",
        }
    }

    /// The `SCEAU_EVENT` field and the `event=` word off the journal.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Started => "started",
            Kind::KeyIdChanged => "key-id-changed",
            Kind::Reloaded => "reloaded",
            Kind::KekRotated => "kek-rotated",
            Kind::KekRetired => "kek-retired",
            Kind::PolicyLoaded => "policy-loaded",
            Kind::PolicyMismatch => "policy-mismatch",
            Kind::PolicyRevoked => "policy-revoked",
            Kind::Membership => "membership",
            Kind::CallRefused => "call-refused",
            Kind::TpmUnhealthy => "tpm-unhealthy",
            Kind::TpmHealthy => "tpm-healthy",
            Kind::Sandbox => "sandbox",
        }
    }

    /// The syslog priority: see the module documentation.
    fn priority(self) -> u8 {
        match self {
            Kind::TpmUnhealthy => 3,
            Kind::CallRefused | Kind::PolicyMismatch => 4,
            _ => 5,
        }
    }

    fn level(self) -> log::Level {
        match self.priority() {
            0..=3 => log::Level::Error,
            4 => log::Level::Warn,
            _ => log::Level::Info,
        }
    }
}

/// One event: its kind, the human line (journald's `MESSAGE`) and its
/// facts, each a `SCEAU_`-prefixed field.
#[derive(Debug, Clone)]
pub struct Event {
    kind: Kind,
    message: String,
    fields: Vec<(&'static str, String)>,
    /// The message already says the facts: off the journal, the line is
    /// the message and the event's name and ID alone.
    facts_in_message: bool,
}

impl Event {
    pub fn new(kind: Kind, message: impl Into<String>) -> Event {
        Event {
            kind,
            message: message.into(),
            fields: Vec::new(),
            facts_in_message: false,
        }
    }

    /// See the field of that name.
    pub fn facts_in_message(mut self) -> Event {
        self.facts_in_message = true;
        self
    }

    /// A fact: `name` is the field's name after `SCEAU_`, uppercase
    /// letters, digits and `_` (journald's rule), checked in tests.
    pub fn field(mut self, name: &'static str, value: impl std::fmt::Display) -> Event {
        debug_assert!(
            name.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            "{name}: journald field names are uppercase letters, digits and _"
        );
        self.fields.push((name, value.to_string()));
        self
    }

    /// The datagram journald's native protocol takes: `KEY=value` lines,
    /// every value on one line (line feeds become spaces) and bounded.
    fn datagram(&self) -> Vec<u8> {
        let mut out = String::new();
        let mut line = |key: &str, value: &str| {
            let _ = writeln!(out, "{key}={}", one_line(value));
        };
        line("MESSAGE", &self.message);
        line("MESSAGE_ID", self.kind.message_id());
        line("PRIORITY", &self.kind.priority().to_string());
        line("SYSLOG_IDENTIFIER", "sceau");
        line("SCEAU_EVENT", self.kind.name());
        for (name, value) in &self.fields {
            line(&format!("SCEAU_{name}"), value);
        }
        out.into_bytes()
    }

    /// The stderr line off the journal: the message, then the same facts
    /// in logfmt.
    fn log_line(&self) -> String {
        let mut line = format!(
            "{} event={} message_id={}",
            one_line(&self.message),
            self.kind.name(),
            self.kind.message_id()
        );
        for (name, value) in self.fields.iter().filter(|_| !self.facts_in_message) {
            let _ = write!(
                line,
                " {}=\"{}\"",
                name.to_ascii_lowercase(),
                one_line(value).escape_debug()
            );
        }
        line
    }
}

fn one_line(value: &str) -> String {
    value
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_VALUE)
        .collect()
}

/// The connected journal socket, once; `None`: events are log lines.
static JOURNAL: OnceLock<Option<UnixDatagram>> = OnceLock::new();

/// For `serve`, before the sandbox: the journal's native socket when
/// stderr is the journal already.
pub fn connect_for_daemon() {
    connect(std::env::var_os("JOURNAL_STREAM").is_some());
}

/// For the commands that change keys: the journal whenever there is one.
pub fn connect_for_command() {
    connect(true);
}

fn connect(wanted: bool) {
    JOURNAL.get_or_init(|| {
        if !wanted || !Path::new(JOURNAL_SOCKET).exists() {
            return None;
        }
        let socket = UnixDatagram::unbound().ok()?;
        socket.connect(JOURNAL_SOCKET).ok()?;
        socket.set_nonblocking(true).ok()?;
        Some(socket)
    });
}

/// Whether events go to the journal's socket.
pub fn native() -> bool {
    matches!(JOURNAL.get(), Some(Some(_)))
}

/// Records `event`: on the journal's socket if connected, else (or if the
/// journal cannot take it now) as a log line at the kind's level.
pub fn emit(event: Event) {
    if let Some(Some(socket)) = JOURNAL.get() {
        let datagram = event.datagram();
        if matches!(socket.send(&datagram), Ok(sent) if sent == datagram.len()) {
            return;
        }
    }
    log::log!(event.kind.level(), "{}", event.log_line());
}

#[cfg(test)]
mod tests {
    use super::*;

    const CATALOG: &str = include_str!("../packaging/journald/sceau.catalog");

    #[test]
    fn every_kind_has_its_own_id_and_a_catalog_entry_and_nothing_else_does() {
        let mut ids: Vec<&str> = Kind::ALL.iter().map(|k| k.message_id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Kind::ALL.len(), "a MESSAGE_ID is used twice");
        let mut catalog: Vec<&str> = CATALOG
            .lines()
            .filter_map(|l| l.strip_prefix("-- "))
            .map(|id| id.trim())
            .collect();
        catalog.sort_unstable();
        assert_eq!(catalog, ids, "the catalog and Kind::ALL differ");
        for id in ids {
            assert!(
                id.len() == 32
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                "{id}: a MESSAGE_ID is 32 lowercase hex digits"
            );
        }
    }

    #[test]
    fn a_datagram_is_one_field_a_line_whatever_the_values_hold() {
        let event = Event::new(Kind::KeyIdChanged, "key_id changed\nMESSAGE_ID=forged")
            .field("KEY_ID", "sceau-1.2-00")
            .field("FORMER_KEY_ID", "a\nPRIORITY=0");
        let text = String::from_utf8(event.datagram()).unwrap();
        let keys: Vec<&str> = text.lines().map(|l| l.split('=').next().unwrap()).collect();
        assert_eq!(
            keys,
            [
                "MESSAGE",
                "MESSAGE_ID",
                "PRIORITY",
                "SYSLOG_IDENTIFIER",
                "SCEAU_EVENT",
                "SCEAU_KEY_ID",
                "SCEAU_FORMER_KEY_ID"
            ]
        );
        assert!(text.contains("MESSAGE_ID=007b11f8cf7643d3953737c043da158d\n"));
        let line = event.log_line();
        assert!(!line.contains('\n'));
        assert!(line.contains("former_key_id=\"a PRIORITY=0\""), "{line}");
    }
}
