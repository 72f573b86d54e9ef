//! Contract test 6: tpm2-tools, an independent implementation, agrees with
//! sceau on the SRK, the key_id and the envelope contents; and `--srk-handle`
//! only accepts a persistent key that really is the SRK template.

use crate::harness::envelope::Envelope;
use crate::harness::rpc::{self, generation_and_epoch, generation_key_id};
use crate::harness::sceau::{self, START_TIMEOUT};
use crate::harness::{Fixture, Sceau, Swtpm, TempDir, Tpm2Tools, random_bytes};

#[tokio::test(flavor = "multi_thread")]
async fn tpm2_tools_derive_the_same_key_id_and_unseal_sceau_envelopes() {
    let mut fx = Fixture::start("tools-unseal", &[]);
    let (mut client, key_id) = fx.client().await;
    let mut sealed = Vec::new();
    for len in [1, 32, 128] {
        let dek = random_bytes(len);
        sealed.push((rpc::seal(&mut client, &key_id, &dek).await, dek));
    }
    // Printable, so that it survives the script's stdout capture as text.
    let script_dek = b"opened-by-scripts/open-envelope!";
    let script_envelope = rpc::seal(&mut client, &key_id, script_dek).await;
    drop(client);
    // swtpm has no resource manager: the tools only get the TPM to themselves
    // once sceau is gone.
    let status = fx.sceau.terminate();
    assert!(status.success(), "sceau exit status: {status}");

    let tools = Tpm2Tools::new(&fx.tpm, &fx.tmp.subdir("tools"));
    tools.flush_all(); // in case sceau left objects loaded
    tools.create_srk_primary("prim.ctx");
    // Generation 0 is the SRK: the key_id covers its Name.
    let (generation, epoch) = generation_and_epoch(&key_id).expect("a generation key_id");
    assert_eq!(generation, 0);
    assert_eq!(
        generation_key_id(0, epoch, &tools.read_name("prim.ctx")),
        key_id
    );

    for (envelope, dek) in &sealed {
        let parts = Envelope::parse(envelope);
        let unsealed = tools.unseal("prim.ctx", &parts.public, &parts.private);
        assert!(
            &unsealed == dek,
            "tpm2_unseal of a {}-byte DEK gave other bytes",
            dek.len()
        );
    }

    // The documented recovery script opens an envelope with tpm2-tools alone.
    std::fs::write(tools.path("envelope.bin"), &script_envelope).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/open-envelope.sh");
    let opened = tools.run("bash", &[script, "envelope.bin"]);
    assert_eq!(opened.stdout.as_bytes(), script_dek);
    tools.flush_all();

    // Same layout as tpm2_create's -u/-r output for a 32-byte secret.
    let (tools_public, tools_private) = tools.seal("prim.ctx", &random_bytes(32));
    let sceau_parts = Envelope::parse(&sealed[1].0);
    assert_eq!(
        (sceau_parts.public.len(), sceau_parts.private.len()),
        (tools_public.len(), tools_private.len())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn srk_handle_accepts_the_persisted_template_key() {
    let tmp = TempDir::new("srk-handle-ok");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
    tools.create_srk_primary("prim.ctx");
    let name = tools.read_name("prim.ctx");
    tools.persist("prim.ctx", "0x81000001");

    let sceau = Sceau::start(&tmp, &tpm, &["--srk-handle", "0x81000001"]);
    let mut client = sceau.client().await;
    let status = rpc::status(&mut client).await;
    let (_, epoch) = generation_and_epoch(&status.key_id).expect("a generation key_id");
    let expected_key_id = generation_key_id(0, epoch, &name);
    assert_eq!(status.key_id, expected_key_id);
    assert_eq!(status.healthz, "ok");
    rpc::round_trip(&mut client, &expected_key_id, &random_bytes(32)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn srk_handle_refuses_a_key_that_is_not_the_template() {
    let tmp = TempDir::new("srk-handle-bad");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
    // Plainly different: an RSA storage primary.
    tools.create_rsa_primary("rsa.ctx");
    tools.persist("rsa.ctx", "0x81000002");
    // Subtly different: the ECC template without `noda`. A check of type and
    // curve alone would accept it; comparing Names must not.
    let mut near_miss = vec![
        "-C",
        "o",
        "-g",
        "sha256",
        "-G",
        "ecc256:null:aes128cfb",
        "-a",
    ];
    near_miss.extend([
        "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|decrypt",
        "-c",
        "ecc.ctx",
    ]);
    tools.run("tpm2_createprimary", &near_miss);
    tools.flush_all();
    tools.persist("ecc.ctx", "0x81000003");

    for handle in ["0x81000002", "0x81000003"] {
        let socket = tmp.join("sceau.sock");
        let args = sceau::serve_args(&socket, Some(&tpm.tcti()), &["--srk-handle", handle]);
        let mut sceau = Sceau::spawn(&tmp, &socket, args, &[]);
        let status = sceau.wait_exit(START_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "sceau kept running with --srk-handle {handle}\n{}",
                sceau.stderr_text()
            )
        });
        assert!(!status.success(), "--srk-handle {handle}: {status}");
    }
}
