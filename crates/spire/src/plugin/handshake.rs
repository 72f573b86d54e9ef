//! The process side of go-plugin's handshake (../shared/notes/spire.md
//! §1.3-1.4): the magic cookie, the protocol version, the unix socket the
//! host dials, and the one line on stdout that tells the host where it is.
//!
//! The socket is made so that no other user can reach it at any moment: it
//! is bound inside a directory only this user can enter, given its mode
//! (0600, or 0660 for `PLUGIN_UNIX_SOCKET_GROUP`) there, and only then
//! moved to its place when the host named a socket directory. Its name is
//! random, so that nothing can be planted in its place beforehand.

use std::ffi::{OsStr, OsString};
use std::fs::{DirBuilder, Permissions};
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The cookie SPIRE sets for a NodeAttestor plugin: the variable
/// `NodeAttestor` with the value `NodeAttestor` (the plugin type).
pub const MAGIC_COOKIE_KEY: &str = "NodeAttestor";
/// The value of [`MAGIC_COOKIE_KEY`] a SPIRE host sets.
pub const MAGIC_COOKIE_VALUE: &str = "NodeAttestor";
/// The application protocol version SPIRE speaks (and go-plugin's core
/// protocol version, which is also 1).
pub const PROTOCOL_VERSION: &str = "1";

/// Where the host wants the socket (go-plugin's environment).
pub const SOCKET_DIR_VARIABLE: &str = "PLUGIN_UNIX_SOCKET_DIR";
/// Which group may dial the socket besides this user.
pub const SOCKET_GROUP_VARIABLE: &str = "PLUGIN_UNIX_SOCKET_GROUP";
/// The application protocol versions the host speaks, comma-separated.
pub const PROTOCOL_VERSIONS_VARIABLE: &str = "PLUGIN_PROTOCOL_VERSIONS";

/// A handshake step that failed: one line saying what to change.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error(
        "the host offers plugin protocol versions {0:?}, and this plugin speaks version 1 only; use a SPIRE release that loads go-plugin protocol 1"
    )]
    ProtocolVersion(String),
    #[error(
        "{PLUGIN_UNIX_SOCKET_GROUP}={0:?} names no group in /etc/group; give a group name or a numeric gid"
    )]
    UnknownGroup(String),
    #[error(
        "{0} is not valid UTF-8 (or holds `|` or a newline), which the handshake line cannot carry; use a plain path"
    )]
    UnusablePath(String),
    #[error("cannot make the plugin socket: {what} {path}: {source}")]
    Socket {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read random bytes for the socket name from /dev/urandom: {0}")]
    Random(std::io::Error),
}

// The variable's name in messages.
const PLUGIN_UNIX_SOCKET_GROUP: &str = SOCKET_GROUP_VARIABLE;

/// Whether the process was started by a SPIRE host: the cookie is set.
pub fn has_magic_cookie(value: Option<&OsStr>) -> bool {
    value == Some(OsStr::new(MAGIC_COOKIE_VALUE))
}

/// Checks that the host speaks protocol version 1. go-plugin hosts set the
/// list; an absent or empty one means the host's single version, which for
/// SPIRE is 1.
pub fn check_protocol_versions(offered: Option<&OsStr>) -> Result<(), HandshakeError> {
    let Some(offered) = offered.filter(|o| !o.is_empty()) else {
        return Ok(());
    };
    let Some(text) = offered.to_str() else {
        return Err(HandshakeError::ProtocolVersion(
            offered.to_string_lossy().into_owned(),
        ));
    };
    if text.split(',').any(|v| v.trim() == PROTOCOL_VERSION) {
        Ok(())
    } else {
        Err(HandshakeError::ProtocolVersion(text.to_owned()))
    }
}

/// The line the host reads on stdout: core protocol 1, app protocol 1, the
/// unix socket, gRPC, and an empty certificate field, as go-plugin's own
/// servers print it.
pub fn handshake_line(socket: &Path) -> Result<String, HandshakeError> {
    let path = socket
        .to_str()
        .filter(|p| !p.contains(['|', '\n', '\r']))
        .ok_or_else(|| HandshakeError::UnusablePath(socket.to_string_lossy().into_owned()))?;
    Ok(format!("1|{PROTOCOL_VERSION}|unix|{path}|grpc|\n"))
}

/// Where and for whom to make the socket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// `PLUGIN_UNIX_SOCKET_DIR`; `None` makes a private directory in the
    /// system's temporary directory.
    pub dir: Option<PathBuf>,
    /// The gid from `PLUGIN_UNIX_SOCKET_GROUP`, which may dial the socket.
    pub group: Option<u32>,
}

impl SocketOptions {
    /// The options go-plugin's environment gives. A group name is looked up
    /// in `/etc/group` (groups from other sources need a numeric gid).
    pub fn from_environment() -> Result<Self, HandshakeError> {
        let dir = std::env::var_os(SOCKET_DIR_VARIABLE)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        let group = match std::env::var_os(SOCKET_GROUP_VARIABLE).filter(|g| !g.is_empty()) {
            None => None,
            Some(group) => {
                let group = group.into_string().map_err(|g: OsString| {
                    HandshakeError::UnknownGroup(g.to_string_lossy().into_owned())
                })?;
                let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
                Some(parse_group(&group, &groups)?)
            }
        };
        Ok(SocketOptions { dir, group })
    }
}

/// A numeric gid as it is, or a group name looked up in `group_file` (the
/// text of /etc/group: `name:password:gid:members`).
pub fn parse_group(group: &str, group_file: &str) -> Result<u32, HandshakeError> {
    let group = group.trim();
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    group_file
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let gid = fields.nth(1)?;
            (name == group).then(|| gid.parse::<u32>().ok()).flatten()
        })
        .next()
        .ok_or_else(|| HandshakeError::UnknownGroup(group.to_owned()))
}

/// A bound, listening socket and the files it occupies, which are removed
/// when it is dropped.
#[derive(Debug)]
pub struct PluginSocket {
    pub(crate) listener: UnixListener,
    pub(crate) place: SocketPlace,
}

/// The socket file and the private directory made for it, removed on drop.
#[derive(Debug)]
pub(crate) struct SocketPlace {
    path: PathBuf,
    made_dir: Option<PathBuf>,
}

impl Drop for SocketPlace {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = &self.made_dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl PluginSocket {
    /// Binds a new socket with an unpredictable name, as `options` say.
    /// It listens at once: a host that dials before the server runs waits
    /// in the backlog.
    pub fn bind(options: &SocketOptions) -> Result<Self, HandshakeError> {
        let name = random_name()?;
        let (dir_mode, socket_mode) = match options.group {
            None => (0o700, 0o600),
            // The group must be able to enter the private directory too.
            Some(_) => (0o750, 0o660),
        };
        match &options.dir {
            None => {
                let dir = std::env::temp_dir().join(format!("sceau-spire-{name}"));
                make_private_dir(&dir, dir_mode, options.group)?;
                let place = SocketPlace {
                    path: dir.join("plugin.sock"),
                    made_dir: Some(dir),
                };
                let listener = bind_with_mode(&place.path, socket_mode, options.group)?;
                Ok(PluginSocket { listener, place })
            }
            Some(dir) => {
                // Bound and given its mode where only this user can reach,
                // then moved into the host's directory, so that it is never
                // reachable with the mode the umask gave it.
                let staging = dir.join(format!(".sceau-spire-{name}"));
                make_private_dir(&staging, 0o700, None)?;
                let staged = SocketPlace {
                    path: staging.join("plugin.sock"),
                    made_dir: Some(staging),
                };
                let listener = bind_with_mode(&staged.path, socket_mode, options.group)?;
                let path = dir.join(format!("sceau-spire-{name}.sock"));
                std::fs::rename(&staged.path, &path).map_err(|source| HandshakeError::Socket {
                    what: "moving the socket to",
                    path: path.clone(),
                    source,
                })?;
                // Removes the now empty staging directory.
                drop(staged);
                Ok(PluginSocket {
                    listener,
                    place: SocketPlace {
                        path,
                        made_dir: None,
                    },
                })
            }
        }
    }

    /// Where the host dials.
    pub fn path(&self) -> &Path {
        &self.place.path
    }
}

fn make_private_dir(dir: &Path, mode: u32, group: Option<u32>) -> Result<(), HandshakeError> {
    let failed = |what| {
        move |source| HandshakeError::Socket {
            what,
            path: dir.to_owned(),
            source,
        }
    };
    // `create` refuses an existing path, so the directory is surely ours.
    DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(failed("creating the directory"))?;
    let finish = || {
        if let Some(gid) = group {
            std::os::unix::fs::chown(dir, None, Some(gid))
                .map_err(failed("giving the directory its group"))?;
        }
        std::fs::set_permissions(dir, Permissions::from_mode(mode))
            .map_err(failed("setting the mode of"))
    };
    finish().inspect_err(|_| {
        let _ = std::fs::remove_dir(dir);
    })
}

fn bind_with_mode(
    path: &Path,
    mode: u32,
    group: Option<u32>,
) -> Result<UnixListener, HandshakeError> {
    let failed = |what| {
        move |source| HandshakeError::Socket {
            what,
            path: path.to_owned(),
            source,
        }
    };
    let listener = UnixListener::bind(path).map_err(failed("binding"))?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(failed("giving the socket its group"))?;
    }
    std::fs::set_permissions(path, Permissions::from_mode(mode))
        .map_err(failed("setting the mode of"))?;
    Ok(listener)
}

/// 16 hex digits from the kernel's random source.
fn random_name() -> Result<String, HandshakeError> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(HandshakeError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn only_the_exact_cookie_passes() {
        assert!(has_magic_cookie(Some(OsStr::new("NodeAttestor"))));
        for other in ["", "nodeattestor", "NodeAttestor ", "KeyManager"] {
            assert!(!has_magic_cookie(Some(OsStr::new(other))), "{other:?}");
        }
        assert!(!has_magic_cookie(None));
    }

    #[test]
    fn protocol_version_1_must_be_offered() {
        for offered in [None, Some(""), Some("1"), Some("2,1"), Some(" 1 , 3")] {
            assert!(
                check_protocol_versions(offered.map(OsStr::new)).is_ok(),
                "{offered:?}"
            );
        }
        for offered in ["2", "10", "2,3", "one"] {
            let error = check_protocol_versions(Some(OsStr::new(offered))).unwrap_err();
            assert!(
                error.to_string().contains(&format!("{offered:?}")),
                "{error}"
            );
        }
    }

    #[test]
    fn the_handshake_line_names_the_socket_and_grpc() {
        assert_eq!(
            handshake_line(Path::new("/tmp/x/plugin.sock")).unwrap(),
            "1|1|unix|/tmp/x/plugin.sock|grpc|\n"
        );
        assert!(handshake_line(Path::new("/tmp/a|b")).is_err());
        assert!(handshake_line(Path::new("/tmp/a\nb")).is_err());
    }

    #[test]
    fn groups_are_numbers_or_names_from_the_group_file() {
        let file = "root:x:0:\nspire:x:1234:alice,bob\nbroken\nodd:x:notanumber:\n";
        assert_eq!(parse_group("77", file).unwrap(), 77);
        assert_eq!(parse_group("spire", file).unwrap(), 1234);
        assert_eq!(parse_group("root", file).unwrap(), 0);
        assert!(parse_group("odd", file).is_err());
        assert!(parse_group("alice", file).is_err());
        assert!(
            parse_group("nobody-here", file)
                .unwrap_err()
                .to_string()
                .contains("\"nobody-here\"")
        );
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_private_socket_is_owner_only_and_cleaned_up() {
        let socket = PluginSocket::bind(&SocketOptions::default()).unwrap();
        let path = socket.path().to_owned();
        let dir = path.parent().unwrap().to_owned();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir), 0o700);
        assert!(
            dir.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("sceau-spire-")
        );
        let other = PluginSocket::bind(&SocketOptions::default()).unwrap();
        assert_ne!(other.path(), path, "names must not repeat");
        drop(socket);
        assert!(!path.exists() && !dir.exists());
    }

    #[test]
    fn a_socket_in_the_hosts_directory_is_moved_there_with_its_mode() {
        let host_dir =
            std::env::temp_dir().join(format!("sceau-spire-test-{}", random_name().unwrap()));
        std::fs::create_dir(&host_dir).unwrap();
        let own_gid = std::fs::metadata(&host_dir).unwrap().gid();
        let options = SocketOptions {
            dir: Some(host_dir.clone()),
            group: Some(own_gid),
        };
        let socket = PluginSocket::bind(&options).unwrap();
        let path = socket.path().to_owned();
        assert_eq!(path.parent(), Some(host_dir.as_path()));
        assert_eq!(mode(&path), 0o660);
        assert_eq!(std::fs::metadata(&path).unwrap().gid(), own_gid);
        // Only the socket is left in the host's directory: no staging.
        let entries: Vec<_> = std::fs::read_dir(&host_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(entries, std::slice::from_ref(&path));
        // The socket still answers at its new place.
        std::os::unix::net::UnixStream::connect(&path).unwrap();
        drop(socket);
        assert!(!path.exists());
        std::fs::remove_dir(&host_dir).unwrap();
    }

    #[test]
    fn a_missing_host_directory_is_a_clear_error() {
        let options = SocketOptions {
            dir: Some(PathBuf::from("/nonexistent/sceau-spire-test")),
            group: None,
        };
        let error = PluginSocket::bind(&options).unwrap_err().to_string();
        assert!(error.starts_with("cannot make the plugin socket: creating the directory /nonexistent/sceau-spire-test/.sceau-spire-"), "{error}");
    }
}
