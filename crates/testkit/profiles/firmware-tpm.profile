# A firmware TPM (Intel PTT, AMD fTPM, an ARM TEE fTPM): the modelled time
# of each TPM command, in milliseconds, from the command's arrival at the
# TPM proxy to its answer (crates/testkit/src/tpm_proxy.rs reads this format).
#
# Sources (collected in the project's notes on TPMs, section 5):
#  [I] https://github.com/archledger/irlume/issues/246 and
#      https://github.com/archledger/irlume/issues/248: the same
#      26-command policy unseal that takes 2.70 s on an STMicro dTPM takes
#      0.20-0.36 s on a firmware TPM: 8-14 ms per command on average.
#  [W] wolfTPM's README, "TPM2 Benchmarks": the one firmware TPM in the
#      table, the NVIDIA Jetson Orin OP-TEE fTPM through /dev/tpmrm0:
#      ECC-256 key generation 120 ms, ECDSA sign 45 ms, ECDHE 90 ms, RSA
#      private 12 ms. It sits behind a TEE call and the kernel's resource
#      manager, so it is an upper bound for an x86 firmware TPM.
#
# MEASURED means the figure is one of the above; INFERRED figures say how
# they were derived. These are planning numbers, not a vendor specification.

# [I] MEASURED: the average command on a firmware TPM (8-14 ms), middle.
default 10

# INFERRED: a firmware TPM shares the CPU with the host (SMM, the PSP, a
# TEE), so its times vary more than a chip's; neither source gives a spread.
jitter 20

# INFERRED: between [I]'s average and [W]'s ECC key generation (120 ms, the
# upper bound); half of the latter.
CreatePrimary 60

# INFERRED: [W]'s ECDHE (90 ms) is the upper bound; [I]'s flow, which starts
# a session, averages 8-14 ms per command. A third of the bound.
StartAuthSession 30

# INFERRED from [I]'s average: the object commands are the heavier ones of
# its flow, so above its 10 ms mean; Import adds an ECDH like StartAuthSession.
Create 20
Load 15
Unseal 12
Import 30
# INFERRED: [W]'s ECDSA sign (45 ms) is the upper bound, as for
# StartAuthSession; a third of it.
Sign 15
ContextSave 15
ContextLoad 15

# INFERRED: commands without secret-key cryptography, well under [I]'s mean.
FlushContext 2
TestParms 2
ReadPublic 5
GetCapability 5
Hash 5
