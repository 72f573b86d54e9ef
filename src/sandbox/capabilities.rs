//! Capabilities: sceau needs none. Under its systemd unit it starts with
//! none; run by hand as root it has them all, so it drops every set.
#![forbid(unsafe_code)]

use caps::{CapSet, CapsHashSet};

use super::SandboxError;

/// Dropping from the bounding set needs CAP_SETPCAP, so the bounding set goes
/// before the effective and permitted sets. capset is only called when a set
/// is non-empty, which keeps it unused under the unit.
const DROP_ORDER: [CapSet; 5] = [
    CapSet::Ambient,
    CapSet::Bounding,
    CapSet::Inheritable,
    CapSet::Effective,
    CapSet::Permitted,
];

pub fn drop_all() -> Result<(), SandboxError> {
    for set in DROP_ORDER {
        if !read(set)?.is_empty() {
            caps::clear(None, set)
                .map_err(|e| SandboxError::Capabilities(format!("clearing {set:?}: {e}")))?;
        }
    }
    assert_none()
}

/// Checks every set of the calling thread is empty.
pub fn assert_none() -> Result<(), SandboxError> {
    for set in DROP_ORDER {
        let left = read(set)?;
        if !left.is_empty() {
            return Err(SandboxError::Capabilities(format!(
                "{set:?} still holds {left:?}"
            )));
        }
    }
    Ok(())
}

fn read(set: CapSet) -> Result<CapsHashSet, SandboxError> {
    caps::read(None, set).map_err(|e| SandboxError::Capabilities(format!("reading {set:?}: {e}")))
}
