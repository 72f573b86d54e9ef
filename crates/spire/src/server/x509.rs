//! EK certificates and the manufacturer CAs they chain to: the validator
//! `sceau-recover`'s enrollment shares (`sceau_ekcert::x509`).

pub use sceau_ekcert::x509::*;
