//! The inverse of parsing: each command's options back to the arguments
//! that give them (`Command::to_args`), which the flag table's tests and
//! the man page's examples check against `parse`.

use super::*;

impl Command {
    /// Arguments that parse back to this command, every flag explicit (the
    /// inverse of [`parse`], which the unit tests and the `cli` fuzz target
    /// check). `None` for help, version and generated text.
    pub fn to_args(&self) -> Option<Vec<String>> {
        let args = match self {
            Self::RecoveryKeygen(o) => {
                let args = Args::command(RECOVERY_KEYGEN.name).flag(&PUBLIC, path_arg(&o.public));
                let args = match &o.private {
                    RecoveryPrivate::Identity { path, protection } => {
                        protection_args(args.flag(&IDENTITY, path_arg(path)), protection)
                    }
                    RecoveryPrivate::Shares {
                        threshold,
                        dir,
                        custodians,
                    } => {
                        let mut args = args
                            .flag(&CUSTODIANS, custodians.len().to_string())
                            .flag(&THRESHOLD, threshold.to_string())
                            .flag(&SHARES_OUT, path_arg(dir));
                        for custodian in custodians {
                            args = args.flag(&CUSTODIAN, custodian.spec());
                        }
                        args
                    }
                };
                args.optional(&PASSPHRASE_FD, o.passphrase_fd.map(|fd| fd.to_string()))
            }
            Self::Recover(o) => {
                let (flag, file) = match &o.input {
                    RecoverInput::Envelope(file) => (&ENVELOPE, file),
                    RecoverInput::EtcdSnapshot(file) => (&ETCD_SNAPSHOT, file),
                    RecoverInput::EtcdJson(file) => (&ETCD_JSON, file),
                };
                let mut args = match &o.key {
                    RecoveryKey::Identity(identity) => {
                        Args::command(RECOVER.name).flag(&IDENTITY, path_arg(identity))
                    }
                    RecoveryKey::Shares(shares) => shares
                        .iter()
                        .fold(Args::command(RECOVER.name), |args, share| {
                            args.flag(&SHARE, path_arg(share))
                        }),
                };
                args = unlock_args(args, &o.unlock).flag(flag, path_arg(file));
                for dir in &o.members {
                    args = args.flag(&MEMBERS, path_arg(dir));
                }
                args.switch(&FORCE, o.force)
            }
            Self::Inventory(o) => {
                let (flag, file) = match &o.input {
                    RecoverInput::EtcdSnapshot(file) => (&ETCD_SNAPSHOT, file),
                    RecoverInput::EtcdJson(file) | RecoverInput::Envelope(file) => {
                        (&ETCD_JSON, file)
                    }
                };
                Args::command(INVENTORY.name)
                    .flag(flag, path_arg(file))
                    .switch(&JSON, o.json)
                    .switch(&LIST_VALUES, o.values)
                    .optional(&REQUIRE_CURRENT, o.require_current.clone())
                    .optional(&KEK_LEDGER, o.kek_ledger.as_deref().map(path_arg))
                    .optional(&CURRENT_MEMBERS, o.current_members.as_deref().map(path_arg))
                    .optional(
                        &CURRENT_RECOVERY_KEY,
                        o.current_recovery_key.as_deref().map(path_arg),
                    )
            }
            Self::Enroll(EnrollStep::Challenge {
                request,
                challenge_out,
                expected_out,
                ek_trust,
            }) => ek_trust_args(
                Args::command("enroll challenge")
                    .flag(&REQUEST, path_arg(request))
                    .flag(&CHALLENGE_OUT, path_arg(challenge_out))
                    .flag(&EXPECTED_OUT, path_arg(expected_out)),
                ek_trust,
            ),
            Self::Enroll(EnrollStep::Verify {
                request,
                expected,
                response,
                member_out,
                enrollment_identity,
                unlock,
                ek_trust,
            }) => ek_trust_args(
                unlock_args(
                    Args::command("enroll verify")
                        .flag(&REQUEST, path_arg(request))
                        .flag(&EXPECTED, path_arg(expected))
                        .flag(&RESPONSE, path_arg(response))
                        .flag(&MEMBER_OUT, path_arg(member_out))
                        .optional(
                            &ENROLLMENT_IDENTITY,
                            enrollment_identity.as_deref().map(path_arg),
                        ),
                    unlock,
                ),
                ek_trust,
            ),
            Self::EnrollmentKeygen(o) => protection_args(
                Args::command(ENROLLMENT_KEYGEN.name)
                    .flag(&ENROLLMENT_IDENTITY, path_arg(&o.identity))
                    .flag(&ENROLLMENT_PUBLIC, path_arg(&o.public)),
                &o.protection,
            )
            .optional(&PASSPHRASE_FD, o.passphrase_fd.map(|fd| fd.to_string())),
            Self::Policy(PolicyStep::Keygen {
                private,
                public,
                protection,
                passphrase_fd,
            }) => protection_args(
                Args::command("policy keygen")
                    .flag(&POLICY_PRIVATE, path_arg(private))
                    .flag(&POLICY_KEY, path_arg(public)),
                protection,
            )
            .optional(&PASSPHRASE_FD, passphrase_fd.map(|fd| fd.to_string())),
            Self::Policy(PolicyStep::Sign {
                private,
                pcrs,
                values,
                serial,
                accept_policies_another_os_can_meet,
                out,
                unlock,
            }) => unlock_args(
                Args::command("policy sign")
                    .flag(&POLICY_PRIVATE, path_arg(private))
                    .flag(&PCRS, pcrs.clone())
                    .flag(&VALUES, path_arg(values))
                    .flag(&SERIAL, serial.to_string())
                    .switch(
                        &ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET,
                        *accept_policies_another_os_can_meet,
                    )
                    .flag(&POLICY_OUT, path_arg(out)),
                unlock,
            ),
            Self::Policy(PolicyStep::Show { policy, key }) => Args::command("policy show")
                .flag(&POLICY, path_arg(policy))
                .optional(&POLICY_KEY, key.as_deref().map(path_arg)),
            Self::ShareVerify(o) => unlock_args(
                o.shares
                    .iter()
                    .fold(Args::command("share verify"), |args, share| {
                        args.flag(&SHARE, path_arg(share))
                    }),
                &o.unlock,
            )
            .optional(&PUBLIC, o.public.as_deref().map(path_arg)),
            Self::Help(_) | Self::Version | Self::Generate(_) => return None,
        };
        Some(args.0)
    }
}

fn protection_args(args: Args, protection: &Protection) -> Args {
    match protection {
        Protection::Unencrypted => args.switch(&UNENCRYPTED_PRIVATE_KEY, true),
        other => args.flag(&PROTECT, other.spec()),
    }
}

fn unlock_args(args: Args, unlock: &Unlock) -> Args {
    unlock
        .age_identities
        .iter()
        .fold(args, |args, file| args.flag(&AGE_IDENTITY, path_arg(file)))
        .optional(
            &PASSPHRASE_FD,
            unlock.passphrase_fd.map(|fd| fd.to_string()),
        )
}

fn ek_trust_args(args: Args, trust: &EkTrust) -> Args {
    let args = args
        .optional(&EK_ROOTS, trust.roots.as_deref().map(path_arg))
        .optional(
            &EK_INTERMEDIATES,
            trust.intermediates.as_deref().map(path_arg),
        );
    trust
        .crls
        .iter()
        .fold(args, |args, crl| args.flag(&CRL, path_arg(crl)))
        .optional(&EK_CERTIFICATE, trust.certificate.as_deref().map(path_arg))
        .switch(&ACCEPT_ANY_EK, trust.accept_any_ek)
}
