//! Who may call: the caller's uid, from SO_PEERCRED on its connection.
//!
//! The socket's mode already keeps others out; this check also holds when an
//! operator widens the mode or group, or when a process inherits a connected
//! fd it should not have. It runs at accept (src/server/accept.rs), which
//! closes a refused connection at once; the interceptor here repeats it for
//! each call as a second line.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::idle::ConnectionInfo;

/// Root, plus the uids given with `--allow-uid`.
#[derive(Clone, Debug)]
pub struct AllowedCallers(Arc<[u32]>);

impl AllowedCallers {
    pub fn root_and(extra: &[u32]) -> Self {
        let mut uids = vec![0];
        uids.extend_from_slice(extra);
        Self(uids.into())
    }

    pub fn allows(&self, uid: u32) -> bool {
        self.0.contains(&uid)
    }
}

impl fmt::Display for AllowedCallers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Interceptor for AllowedCallers {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let credentials = request
            .extensions()
            .get::<ConnectionInfo>()
            .and_then(|info| info.peer_cred);
        match credentials {
            Some(cred) if self.allows(cred.uid()) => Ok(request),
            Some(cred) => {
                log::warn!(
                    "refused a call from uid {} (pid {:?}); allowed uids: {:?}",
                    cred.uid(),
                    cred.pid(),
                    self.0
                );
                Err(Status::permission_denied("this uid may not call sceau"))
            }
            None => {
                log::warn!("refused a call whose peer credentials are unknown");
                Err(Status::permission_denied("caller credentials unknown"))
            }
        }
    }
}
