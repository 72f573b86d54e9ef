//! tpm2-tools as an independent second implementation to check sceau against.
//!
//! swtpm has no resource manager: whatever a tool loads stays loaded after it
//! exits, and swtpm holds only 3 transient objects. So every helper here
//! flushes transient objects and sessions when it is done, and tools are only
//! run while no sceau is attached to the TPM.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::process::{Finished, run_with_timeout};
use crate::swtpm::Swtpm;

const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// The TCG ECC P-256 storage-key template sceau is specified to use as its SRK
/// (empty unique), spelled as tpm2_createprimary options.
pub const SRK_TEMPLATE_ARGS: [&str; 6] = [
    "-g",
    "sha256",
    "-G",
    "ecc256:null:aes128cfb",
    "-a",
    "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda|restricted|decrypt",
];

pub struct Tpm2Tools {
    tcti: String,
    dir: PathBuf,
}

impl Tpm2Tools {
    /// Tools talking to `tpm`, with their files kept in `dir`.
    pub fn new(tpm: &Swtpm, dir: &Path) -> Tpm2Tools {
        Tpm2Tools {
            tcti: tpm.tcti(),
            dir: dir.to_path_buf(),
        }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Runs one tool in `dir`; the tool must succeed.
    pub fn run(&self, tool: &str, args: &[&str]) -> Finished {
        let finished = self.try_run(tool, args);
        assert!(
            finished.status.success(),
            "{tool} {args:?} failed with {}:\n{}",
            finished.status,
            finished.all_output()
        );
        finished
    }

    /// TPM_PT_FIRMWARE_VERSION_1 and _2 as `tpm2_getcap` reads them (the
    /// TPM's answer through another TSS), written as sceau writes them.
    pub fn firmware_version(&self) -> String {
        let fixed = self.run("tpm2_getcap", &["properties-fixed"]).stdout;
        let raw = |property: &str| {
            let at = fixed
                .find(&format!("{property}:"))
                .unwrap_or_else(|| panic!("{property} missing:\n{fixed}"));
            let line = fixed[at..].lines().nth(1).expect("its raw line");
            let hex = line.trim().trim_start_matches("raw: 0x");
            u32::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("{line}"))
        };
        sceau_format::tpm_info::firmware_version(
            raw("TPM2_PT_FIRMWARE_VERSION_1"),
            raw("TPM2_PT_FIRMWARE_VERSION_2"),
        )
    }

    pub fn try_run(&self, tool: &str, args: &[&str]) -> Finished {
        let mut cmd = Command::new(tool);
        cmd.args(args)
            .current_dir(&self.dir)
            .env("TPM2TOOLS_TCTI", &self.tcti);
        run_with_timeout(&mut cmd, &self.dir, TOOL_TIMEOUT)
    }

    /// Frees every transient object and session slot, whoever left them.
    pub fn flush_all(&self) {
        for kind in ["-t", "-l", "-s"] {
            self.run("tpm2_flushcontext", &[kind]);
        }
    }

    /// Creates the SRK-template primary under the owner hierarchy and saves its
    /// context to `ctx`. Deterministic: the same TPM always yields the same key.
    pub fn create_srk_primary(&self, ctx: &str) {
        let mut args = vec!["-C", "o"];
        args.extend(SRK_TEMPLATE_ARGS);
        args.extend(["-c", ctx]);
        self.run("tpm2_createprimary", &args);
        self.flush_all();
    }

    /// A primary that is deliberately NOT the SRK template.
    pub fn create_rsa_primary(&self, ctx: &str) {
        self.run(
            "tpm2_createprimary",
            &["-C", "o", "-G", "rsa2048", "-c", ctx],
        );
        self.flush_all();
    }

    /// The TPM Name (name-alg id ‖ digest) of the key in `ctx`.
    pub fn read_name(&self, ctx: &str) -> Vec<u8> {
        self.run("tpm2_readpublic", &["-c", ctx, "-n", "name.bin"]);
        self.flush_all();
        self.read("name.bin")
    }

    /// Makes the key in `ctx` persistent at `handle` (e.g. "0x81000001").
    pub fn persist(&self, ctx: &str, handle: &str) {
        self.run("tpm2_evictcontrol", &["-C", "o", "-c", ctx, handle]);
        self.flush_all();
    }

    /// Seals `data` under `parent_ctx` the way tpm2-tools does; returns the
    /// TPM2B_PUBLIC and TPM2B_PRIVATE files' contents.
    pub fn seal(&self, parent_ctx: &str, data: &[u8]) -> (Vec<u8>, Vec<u8>) {
        self.write("seal.in", data);
        self.run(
            "tpm2_create",
            &[
                "-C",
                parent_ctx,
                "-i",
                "seal.in",
                "-u",
                "seal.pub",
                "-r",
                "seal.priv",
            ],
        );
        self.flush_all();
        (self.read("seal.pub"), self.read("seal.priv"))
    }

    /// Loads a TPM2B_PUBLIC/TPM2B_PRIVATE pair under `parent_ctx` as the
    /// context file `ctx`.
    pub fn load(&self, parent_ctx: &str, public: &[u8], private: &[u8], ctx: &str) {
        self.write("obj.pub", public);
        self.write("obj.priv", private);
        self.run(
            "tpm2_load",
            &[
                "-C", parent_ctx, "-u", "obj.pub", "-r", "obj.priv", "-c", ctx,
            ],
        );
    }

    /// Loads a TPM2B_PUBLIC/TPM2B_PRIVATE pair under `parent_ctx` and unseals it.
    pub fn unseal(&self, parent_ctx: &str, public: &[u8], private: &[u8]) -> Vec<u8> {
        self.load(parent_ctx, public, private, "obj.ctx");
        self.run("tpm2_unseal", &["-c", "obj.ctx", "-o", "unsealed.bin"]);
        self.flush_all();
        self.read("unsealed.bin")
    }

    pub fn write(&self, file: &str, data: &[u8]) {
        std::fs::write(self.path(file), data).unwrap_or_else(|e| panic!("write {file}: {e}"));
    }

    fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).unwrap_or_else(|e| panic!("read {file}: {e}"))
    }
}
