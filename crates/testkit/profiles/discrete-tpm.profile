# A discrete TPM on SPI (ST33 / Infineon SLB967x class): the modelled time of
# each TPM command, in milliseconds, from the command's arrival at the TPM
# proxy to its answer (crates/testkit/src/tpm_proxy.rs reads this format).
#
# Sources (collected in the project's notes on TPMs, section 5):
#  [W] wolfTPM's README, "TPM2 Benchmarks" (examples/bench/bench.c), averages
#      over 11 discrete parts: Infineon SLB9670/9672/9673, ST33KTPM2XSPI,
#      ST33TPHF2XSPI, Microchip ATTPM20, Nations Z32H330/NS350, Nuvoton
#      NPCT650/NPCT750, SealSQ QVault. Medians over those 11 parts:
#        ECC-256 key generation (TPM2_Create + TPM2_Load of a child key, then
#          an unload): 148 ms (range 52-311);
#        ECDHE agree (the TPM-side cost of an ECC-salted StartAuthSession or
#          ECC-parent Import): 66 ms (range 27-247);
#        ECDSA sign: 56 ms (range 17-190).
#  [I] https://github.com/archledger/irlume/issues/246 and
#      https://github.com/archledger/irlume/issues/248: a policy unseal
#      of 26 TPM commands (ReadPublic, StartAuthSession, Load, 15 policy
#      commands, an NV read, Unseal...) takes 2.70 s on an STMicro dTPM,
#      about 100 ms per command on average.
#
# MEASURED means the figure is one of the above; INFERRED figures say how
# they were derived. No source times sceau's exact commands on a chip, so
# the inferred figures are planning numbers, not a vendor specification.

# [I] MEASURED: the average command on an STMicro dTPM.
default 100

# INFERRED: [W] gives averages only. A uniform +-15% keeps runs from being
# lock-step; the long tail of real parts (a Chrome study of ECDSA P-256
# signing: p50 200 ms, p95 600 ms, stiankri.substack.com/p/tpm-performance)
# is what the fault matrix's "20x slower" row is for.
jitter 15

# INFERRED from [W]: an ECC P-256 primary is derived from the seed (no prime
# search); about one ECC key generation (median 148 ms, which includes a
# Load) plus the creation data and ticket, rounded up. (An RSA-2048 primary
# takes seconds: [W] 1.5-7.5 s for RSA key generation; sceau uses ECC.)
CreatePrimary 200

# MEASURED [W]: ECDHE agree, median 66 ms: the salt is ECDH with the SRK.
StartAuthSession 70

# INFERRED from [W]: a sealed-data Create generates no key; the ECC
# Create+Load median (148 ms) minus a Load (60, below) is an upper bound
# that still includes key generation; the session's parameter decryption
# and HMAC keep it near that. 80.
Create 80

# INFERRED from [W]: Load unwraps and integrity-checks the private area
# (symmetric work) and computes the Name; set to about one ECDSA signature
# (median 56 ms), below [I]'s 100 ms average, which includes heavier
# commands.
Load 60

# INFERRED: Unseal decrypts a sealed value of at most 128 bytes and applies
# the session's HMAC and parameter encryption: a little under Load.
Unseal 50

# MEASURED [W]: Import to an ECC parent is an ECDH (66 ms) plus an unwrap
# and integrity check like Load's; INFERRED sum, rounded.
Import 120

# MEASURED [W]: ECDSA sign, median 56 ms: cluster mode's envelope signature.
Sign 56

# INFERRED: no cryptography, a short command and answer over SPI; a tenth of
# [I]'s average.
FlushContext 10
TestParms 10

# INFERRED: small answers, no secret-key cryptography (Hash: SHA-256 of
# 160 bytes); a fifth of [I]'s average.
ReadPublic 20
GetCapability 20
Hash 20

# INFERRED: boot-state binding's per-Decrypt commands. PolicyPCR hashes the
# selected PCRs into the session; PolicyAuthorize checks a ticket (an HMAC)
# and hashes; neither does asymmetric cryptography: like ReadPublic. PCR_Read
# (after a PCR change) answers a few digests.
PolicyPCR 20
PolicyAuthorize 20
PCR_Read 20

# INFERRED: a revocable policy's PolicySecret on an NV index with an empty
# authValue in a password session: an authorization check and two hashes,
# no asymmetric cryptography; NV_ReadPublic answers a public area. Like
# ReadPublic. Writing NV (define, write: revocation only, never per call)
# is left at the default: NV writes are the slow part of a TPM.
PolicySecret 20
NV_ReadPublic 20

# INFERRED from [W]: once per start and policy, VerifySignature of an ECDSA
# signature costs about a signature (56 ms; an RSA-2048 verification is
# cheaper); LoadExternal of a public key parses it and computes its Name.
VerifySignature 60
LoadExternal 30

# INFERRED: the TPM encrypts or decrypts and integrity-checks a saved
# context, like Load.
ContextSave 60
ContextLoad 60
