//! What one call learns about itself on its way through the layers, for its
//! log line: the request's uid (known only once the service has decoded the
//! request) and the time the TPM thread spent on it.
//!
//! The server runs each call's future inside [`CallRecord::scope`]; the
//! service and the TPM worker's async side run inside that future, on the
//! same task, and add what they know through [`note_uid`] and
//! [`add_tpm_time`]. Outside a scope (unit tests, `sceau check`) both do
//! nothing.
#![forbid(unsafe_code)]

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sceau_format::text::printable;

tokio::task_local! {
    static CALL: Arc<CallRecord>;
}

/// One call's uid, key_id, envelope and TPM time.
#[derive(Debug, Default)]
pub struct CallRecord {
    /// The request's uid, already escaped and bounded by [`printable`].
    uid: Mutex<Option<String>>,
    /// The key_id the call was answered with (Encrypt) or asked for
    /// (Decrypt, escaped and bounded), and its envelope's fingerprint
    /// (`sceau_format::envelope::fingerprint`).
    envelope: Mutex<Option<(String, String)>>,
    tpm_nanos: AtomicU64,
}

impl CallRecord {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Runs `call` with this record as the task's current call.
    pub async fn scope<F: Future>(self: Arc<Self>, call: F) -> F::Output {
        CALL.scope(self, call).await
    }

    /// The uid as it may be logged, if the service saw one.
    pub fn uid(&self) -> Option<String> {
        self.uid.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The key_id and the envelope's fingerprint, once the call named them.
    pub fn envelope(&self) -> Option<(String, String)> {
        self.envelope
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn tpm_time(&self) -> Duration {
        Duration::from_nanos(self.tpm_nanos.load(Ordering::Relaxed))
    }
}

/// Records the current call's request uid (escaped and cut to a bound here,
/// so that the log line cannot grow with the request or be forged with a
/// line feed or a quote).
pub fn note_uid(uid: &str) {
    let _ = CALL.try_with(|call| {
        *call.uid.lock().unwrap_or_else(|e| e.into_inner()) = Some(printable(uid));
    });
}

/// Records the key_id and the envelope of the current call: what Encrypt
/// returned, or what Decrypt was asked to open (the client's key_id,
/// escaped and cut like the uid).
pub fn note_envelope(key_id: &str, ciphertext: &[u8]) {
    let _ = CALL.try_with(|call| {
        *call.envelope.lock().unwrap_or_else(|e| e.into_inner()) = Some((
            printable(key_id),
            sceau_format::envelope::fingerprint(ciphertext),
        ));
    });
}

/// Adds TPM thread time to the current call.
pub fn add_tpm_time(elapsed: Duration) {
    let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    let _ = CALL.try_with(|call| call.tpm_nanos.fetch_add(nanos, Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notes_reach_the_record_only_inside_its_scope() {
        note_uid("outside");
        add_tpm_time(Duration::from_secs(1));
        let record = CallRecord::new();
        record
            .clone()
            .scope(async {
                note_uid("a\"b\nc");
                add_tpm_time(Duration::from_millis(2));
                add_tpm_time(Duration::from_millis(3));
            })
            .await;
        assert_eq!(record.uid().as_deref(), Some("a\\\"b\\nc"));
        assert_eq!(record.tpm_time(), Duration::from_millis(5));
    }
}
