//! EK certificates and the keys verifiers meet, for the two verifiers of a
//! TPM that sceau has: the SPIRE server plugin and `sceau-recover enroll`.
//!
//! - `keys`: a public key in TPM form (TPMT_PUBLIC) or X.509 form
//!   (SubjectPublicKeyInfo), compared by value; X.509 signatures.
//! - `x509`: an EK certificate's chain to a manufacturer's root through
//!   intermediates, offline CRLs, and the TPM's manufacturer, model and
//!   version from its subjectAltName.
//!
//! No TPM, no I/O beyond the bytes it is given, no `unsafe`.

pub mod keys;
pub mod x509;
