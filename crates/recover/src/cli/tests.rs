//! The unit tests of `cli` (cli.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

use super::*;

use sceau_cli::words as args;

#[test]
fn recover_defaults_to_standard_input() {
    assert_eq!(
        parse(&args("recover --identity id")),
        Ok(Command::Recover(RecoverOptions {
            key: RecoveryKey::Identity("id".into()),
            unlock: Unlock::default(),
            input: RecoverInput::Envelope("-".into()),
            members: Vec::new(),
            force: false,
        }))
    );
}

#[test]
fn rejects_what_it_cannot_run() {
    for line in [
        "recover",
        "recover --identity id --envelope a --etcd-json b",
        "recover --identity id --etcd-json a --etcd-json b",
        "recover --identity",
        "recover --force=yes --identity id",
        "recovery-keygen --identity id",
        "recovery-keygen --public p --identity i --protect passphrase:hunter2",
        "recovery-keygen --public p --identity i --protect passphrase --unencrypted-private-key",
        "recovery-keygen --public p --custodians 2 --threshold 2 --shares-out d --custodian a=passphrase",
        "recovery-keygen --public p --custodians 1 --threshold 2 --shares-out d --custodian a=passphrase",
        "recovery-keygen --public p --custodians 2 --threshold 1 --shares-out d --custodian a=passphrase --custodian a=passphrase",
        "recovery-keygen --public p --custodians 1 --threshold 1 --shares-out d --custodian a=passphrase --identity i",
        "recover --identity i --share s",
        "recover --passphrase-fd x --share s",
        "share verify",
        "share frobnicate --share s",
        "enrollment-keygen --enrollment-identity k",
        "enroll challenge --request r --challenge-out c --expected-out e --enrollment-identity k",
        "enroll challenge --request r --challenge-out c",
        "enroll verify --request r --expected e --response s --member-out m --expected-out x",
        "enroll frobnicate",
        "enroll --request r challenge",
        "policy keygen --policy-private k",
        "policy sign --policy-private k --values v --policy-out o",
        "policy show --policy p --pcrs 7",
        "policy frobnicate",
        "frobnicate",
    ] {
        let error = parse(&args(line)).unwrap_err();
        let usage = PROGRAM.usage_line(error.command);
        let command = line.split(' ').next().unwrap();
        if PROGRAM.command(command).is_some() {
            assert!(
                usage.starts_with(&format!("Usage: sceau-recover {command}")),
                "{line}"
            );
        }
    }
}

/// The table is the list: every flag of every command is in its help and
/// in the inverse of some command, and `help CMD` is `CMD --help`.
#[test]
fn every_flag_is_in_the_help_and_the_inverse() {
    let examples: Vec<Command> = [
            "recovery-keygen --identity i --public p",
            "recovery-keygen --identity i --public p --unencrypted-private-key --passphrase-fd 3",
            "recovery-keygen --public p --custodians 3 --threshold 2 --shares-out d --custodian a=passphrase --custodian b=age:age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p --custodian c=ssh:c.pub",
            "recover --identity i --force",
            "recover --share a --share b --age-identity k --passphrase-fd 0 --etcd-json j",
            "share verify --share a --share b --public p --age-identity k",
            "share verify --share a --passphrase-fd 5",
            "recover --identity i --etcd-snapshot s --members m --members f",
            "recover --identity i --etcd-json=j",
            "inventory --etcd-snapshot s",
            "inventory --etcd-json j --json --list-values --require-current sceau-0123456789abcdef",
            "inventory --etcd-json j --kek-ledger l --current-members m --current-recovery-key r",
            "enroll challenge --request q --challenge-out c --expected-out e --accept-any-ek",
            "enroll challenge --request q --challenge-out c --expected-out e --ek-roots r --ek-intermediates i --crl c1 --crl c2 --ek-certificate x",
            "enroll verify --request q --expected e --response r --member-out m --accept-any-ek",
            "enroll verify --request q --expected e --response r --member-out m --enrollment-identity k --ek-roots r",
            "enroll verify --request q --expected e --response r --member-out m --enrollment-identity k --age-identity a --passphrase-fd 3 --accept-any-ek",
            "enrollment-keygen --enrollment-identity k --enrollment-public p",
            "enrollment-keygen --enrollment-identity k --enrollment-public p --unencrypted-private-key",
            "enrollment-keygen --enrollment-identity k --enrollment-public p --protect age:age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p --passphrase-fd 0",
            "policy keygen --policy-private k --policy-key p",
            "policy keygen --policy-private k --policy-key p --unencrypted-private-key",
            "policy sign --policy-private k --pcrs 7,11 --values v --serial 0 --policy-out o",
            "policy sign --policy-private k --pcrs 11 --values v --serial 65535 --accept-policies-another-os-can-meet --policy-out o --age-identity i --passphrase-fd 4",
            "policy show --policy o",
            "policy show --policy o --policy-key p",
        ]
        .iter()
        .map(|line| parse(&args(line)).unwrap())
        .collect();
    let inverses: Vec<Vec<String>> = examples.iter().filter_map(Command::to_args).collect();
    sceau_cli::check_table(
        &PROGRAM,
        |a| match parse(a) {
            Ok(Command::Help(text)) => Some(text),
            _ => None,
        },
        &inverses,
    );
    for (example, again) in examples.iter().zip(&inverses) {
        assert_eq!(parse(again).as_ref(), Ok(example), "{again:?}");
    }
}
