//! Who may call: the caller's uid, from SO_PEERCRED on its connection.
//!
//! The socket's mode already keeps others out; this check also holds when an
//! operator widens the mode or group, or when a process inherits a connected
//! fd it should not have.
#![forbid(unsafe_code)]

use std::sync::Arc;

use tonic::service::Interceptor;
use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Status};

/// Root, plus the uids given with `--allow-uid`.
#[derive(Clone, Debug)]
pub struct AllowedCallers(Arc<[u32]>);

impl AllowedCallers {
    pub fn root_and(extra: &[u32]) -> Self {
        let mut uids = vec![0];
        uids.extend_from_slice(extra);
        Self(uids.into())
    }

    fn allows(&self, uid: u32) -> bool {
        self.0.contains(&uid)
    }
}

impl Interceptor for AllowedCallers {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let credentials = request
            .extensions()
            .get::<UdsConnectInfo>()
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
