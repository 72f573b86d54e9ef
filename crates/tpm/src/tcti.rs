//! The TPM connection (`--tcti`, `$SCEAU_TCTI`), parsed once at the command
//! line into [`Tcti`]. The TPM opener, the Landlock rules, the pinning of the
//! TCTI library and the resource-manager check all read this type, so they
//! cannot disagree about what a string means.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::str::FromStr;

use tss_esapi::tcti_ldr::{DeviceConfig, NetworkTPMConfig, TabrmdConfig, TctiNameConf};

/// The port a network TPM listens on when the TCTI names none.
const DEFAULT_PORT: u16 = 2321;
const DEFAULT_HOST: &str = "localhost";
/// What tpm2-tss opens for a bare `device`.
const DEFAULT_DEVICE: &str = "/dev/tpm0";

/// A validated TCTI: what sceau needs to know about the connection, and the
/// tpm2-tss configuration made from the same text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tcti {
    transport: Transport,
    name_conf: TctiNameConf,
}

/// How sceau reaches the TPM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// `device:PATH`: a character device (`/dev/tpmrm0`, `/dev/tpm0`).
    Device { path: PathBuf },
    /// `swtpm:host=H,port=P`: a software TPM; its control channel is on P+1.
    Swtpm { host: String, port: u16 },
    /// `mssim:host=H,port=P`: the Microsoft simulator, ports as swtpm's.
    Mssim { host: String, port: u16 },
    /// `tabrmd[:CONF]`: the access broker, over D-Bus.
    Tabrmd { conf: String },
}

/// Every form sceau accepts, for the error that refuses any other.
pub const EXPECTED_FORMS: &str = "device:/dev/tpmrm0 (or another TPM device path), \
     swtpm:host=HOST,port=PORT, mssim:host=HOST,port=PORT, tabrmd or \
     tabrmd:bus_type=system|session";

/// Why a TCTI string was refused: what is wrong, then the forms that work,
/// so that the one line is enough to write a correct `--tcti`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}; expected {EXPECTED_FORMS}")]
pub struct InvalidTcti(String);

impl FromStr for Tcti {
    type Err = InvalidTcti;

    fn from_str(text: &str) -> Result<Self, InvalidTcti> {
        // tss-esapi's parser refused these (its patterns stop at a line
        // break); the parts parsed below must refuse them too.
        if text.contains(char::is_control) {
            return Err(InvalidTcti(format!(
                "{text:?} contains a control character"
            )));
        }
        let (kind, conf) = text.split_once(':').unwrap_or((text, ""));
        let transport = match kind {
            "device" => Transport::Device {
                path: PathBuf::from(match conf {
                    "" => DEFAULT_DEVICE,
                    path => path,
                }),
            },
            "swtpm" | "mssim" => {
                let (host, port) = network(conf)?;
                match kind {
                    "swtpm" => Transport::Swtpm { host, port },
                    _ => Transport::Mssim { host, port },
                }
            }
            "tabrmd" => Transport::Tabrmd { conf: conf.into() },
            _ => return Err(InvalidTcti(format!("unknown TPM connection {kind:?}"))),
        };
        // tss-esapi's own parsers have the last word; their error is a bare
        // "invalid parameter", so the words are sceau's, from the transport.
        let name_conf = transport
            .name_conf()
            .map_err(|_| InvalidTcti(transport.refusal()))?;
        Ok(Self {
            transport,
            name_conf,
        })
    }
}

/// `host=H,port=P`, both optional, nothing else.
fn network(conf: &str) -> Result<(String, u16), InvalidTcti> {
    let (mut host, mut port) = (None, None);
    for pair in conf.split(',').filter(|pair| !pair.is_empty()) {
        let bad = || InvalidTcti(format!("{pair:?} is not host=HOST or port=PORT, once each"));
        let (key, value) = pair.split_once('=').ok_or_else(bad)?;
        let slot = match key {
            "host" => &mut host,
            "port" => &mut port,
            _ => return Err(bad()),
        };
        if slot.replace(value).is_some() || value.is_empty() {
            return Err(bad());
        }
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|port| *port < u16::MAX)
            .ok_or_else(|| {
                InvalidTcti(format!(
                    "port {port:?} is not 0 to 65534 (the control channel is on port+1)"
                ))
            })?,
    };
    Ok((host.unwrap_or(DEFAULT_HOST).into(), port))
}

impl Transport {
    /// tss-esapi's configuration, made by the parser of this transport's
    /// kind from the canonical text. `TctiNameConf::from_str` would pick the
    /// kind by trying one regular expression after another, compiling each
    /// (five for swtpm, one for a device), which cost about a millisecond
    /// and a 320 KB allocation at every start, twice with the re-exec; the
    /// per-kind parsers are the ones it ends in.
    fn name_conf(&self) -> Result<TctiNameConf, tss_esapi::Error> {
        Ok(match self {
            Self::Device { path } => {
                TctiNameConf::Device(DeviceConfig::from_str(&path.to_string_lossy())?)
            }
            Self::Swtpm { host, port } => TctiNameConf::Swtpm(NetworkTPMConfig::from_str(
                &format!("host={host},port={port}"),
            )?),
            Self::Mssim { host, port } => TctiNameConf::Mssim(NetworkTPMConfig::from_str(
                &format!("host={host},port={port}"),
            )?),
            Self::Tabrmd { conf } => TctiNameConf::Tabrmd(TabrmdConfig::from_str(conf)?),
        })
    }

    /// What tpm2-tss's parser objects to, given that sceau's own accepted it.
    fn refusal(&self) -> String {
        match self {
            Self::Device { path } => format!("{:?} is not a usable device path", path.display()),
            Self::Swtpm { host, .. } | Self::Mssim { host, .. } => {
                format!("host {host:?} is neither an IP address nor a host name")
            }
            Self::Tabrmd { conf } => format!(
                "tabrmd options {conf:?} are not bus_type=system|session and \
                 bus_name=A.DOTTED.NAME"
            ),
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Device { path } => write!(f, "device:{}", path.display()),
            Self::Swtpm { host, port } => write!(f, "swtpm:host={host},port={port}"),
            Self::Mssim { host, port } => write!(f, "mssim:host={host},port={port}"),
            Self::Tabrmd { conf } if conf.is_empty() => f.write_str("tabrmd"),
            Self::Tabrmd { conf } => write!(f, "tabrmd:{conf}"),
        }
    }
}

/// The canonical text, which parses back to the same value.
impl std::fmt::Display for Tcti {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.transport.fmt(f)
    }
}

impl Tcti {
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// What tpm2-tss opens.
    pub fn name_conf(&self) -> TctiNameConf {
        self.name_conf.clone()
    }

    /// The TCTI library's name: `libtss2-tcti-{kind}.so.0`.
    pub fn kind(&self) -> &'static str {
        match self.transport {
            Transport::Device { .. } => "device",
            Transport::Swtpm { .. } => "swtpm",
            Transport::Mssim { .. } => "mssim",
            Transport::Tabrmd { .. } => "tabrmd",
        }
    }

    /// The file name tpm2-tss loads for this TCTI.
    pub fn library(&self) -> String {
        format!("libtss2-tcti-{}.so.0", self.kind())
    }

    /// The Debian package that ships [`Tcti::library`] (tpm2-tss names
    /// them all alike: `libtss2-tcti-device0`, `libtss2-tcti-swtpm0`, …).
    pub fn debian_package(&self) -> String {
        format!("libtss2-tcti-{}0", self.kind())
    }

    /// The kernel's /dev/tpmrm* and tpm2-abrmd give each client its own view
    /// of the TPM's handles; anything else is the raw TPM, shared with every
    /// user.
    pub fn has_resource_manager(&self) -> bool {
        match &self.transport {
            Transport::Device { path } => is_tpmrm(path),
            Transport::Tabrmd { .. } => true,
            Transport::Swtpm { .. } | Transport::Mssim { .. } => false,
        }
    }

    /// The command and control ports of a network TPM.
    pub fn tcp_ports(&self) -> Option<[u16; 2]> {
        match self.transport {
            Transport::Swtpm { port, .. } | Transport::Mssim { port, .. } => {
                Some([port, port.checked_add(1)?])
            }
            _ => None,
        }
    }
}

fn is_tpmrm(path: &std::path::Path) -> bool {
    path.to_str().is_some_and(|p| p.starts_with("/dev/tpmrm"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Tcti, InvalidTcti> {
        text.parse()
    }

    #[test]
    fn parses_what_sceau_documents() {
        let device = parse("device:/dev/tpmrm0").unwrap();
        assert_eq!(
            device.transport(),
            &Transport::Device {
                path: "/dev/tpmrm0".into()
            }
        );
        assert!(device.has_resource_manager());
        assert_eq!(device.kind(), "device");
        let swtpm = parse("swtpm:host=127.0.0.1,port=2421").unwrap();
        assert_eq!(swtpm.tcp_ports(), Some([2421, 2422]));
        assert!(!swtpm.has_resource_manager());
        assert_eq!(parse("mssim").unwrap().tcp_ports(), Some([2321, 2322]));
        assert!(
            parse("tabrmd:bus_type=system")
                .unwrap()
                .has_resource_manager()
        );
        assert!(!parse("device").unwrap().has_resource_manager());
    }

    #[test]
    fn the_canonical_text_parses_back_to_the_same_value() {
        for text in [
            "device",
            "device:/dev/tpm0",
            "swtpm",
            "swtpm:port=2321",
            "mssim:host=::1",
            "tabrmd",
            "tabrmd:bus_type=session",
        ] {
            let tcti = parse(text).unwrap();
            assert_eq!(parse(&tcti.to_string()), Ok(tcti), "{text}");
        }
    }

    /// The configuration built from the parts is the one tss-esapi's own
    /// parser makes from the canonical text.
    #[test]
    fn builds_the_configuration_tss_esapi_would_parse() {
        for text in [
            "device",
            "device:/dev/tpmrm0",
            "swtpm:host=127.0.0.1,port=2421",
            "swtpm",
            "mssim:host=::1",
            "mssim:host=tpm.example",
            "tabrmd",
            "tabrmd:bus_type=session",
            "tabrmd:bus_name=com.example.Tabrmd,bus_type=system",
        ] {
            let tcti = parse(text).unwrap();
            let by_tss_esapi = TctiNameConf::from_str(&tcti.to_string()).unwrap();
            assert_eq!(tcti.name_conf(), by_tss_esapi, "{text}");
        }
    }

    /// An invalid TCTI is refused at the command line, not when the TPM is
    /// first opened (or, for the sandbox, silently left unconfined).
    #[test]
    fn refuses_what_would_fail_later() {
        for text in [
            "",
            "tpm",
            "devicex:/dev/tpm0",
            "swtpm:port=65535",
            "swtpm:port=http",
            "swtpm:host=",
            "swtpm:port=1,port=2",
            "swtpm:colour=blue",
            "swtpm:host=-bad-",
            "tabrmd:bus_type=nowhere",
            "device:/dev/tpm\n0",
        ] {
            assert!(parse(text).is_err(), "{text:?}");
        }
    }

    /// Every refusal names what is wrong and lists the forms that work,
    /// in sceau's words (tss-esapi's is "the provided parameter is invalid
    /// for that type.").
    #[test]
    fn every_refusal_lists_the_expected_forms() {
        for (text, says) in [
            ("tpm", "unknown TPM connection \"tpm\""),
            (
                "swtpm:host=-bad-",
                "host \"-bad-\" is neither an IP address",
            ),
            ("tabrmd:bus_type=nowhere", "bus_type=system|session"),
            (
                "swtpm:colour=blue",
                "\"colour=blue\" is not host=HOST or port=PORT",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
            assert!(error.ends_with(EXPECTED_FORMS), "{text}: {error}");
            assert!(!error.contains("provided parameter"), "{text}: {error}");
        }
    }

    #[test]
    fn names_the_library_and_its_debian_package() {
        let swtpm = parse("swtpm").unwrap();
        assert_eq!(swtpm.library(), "libtss2-tcti-swtpm.so.0");
        assert_eq!(swtpm.debian_package(), "libtss2-tcti-swtpm0");
        assert_eq!(
            parse("device").unwrap().debian_package(),
            "libtss2-tcti-device0"
        );
    }
}
