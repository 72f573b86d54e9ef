//! The unit tests of `roca` (roca.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

// Cross-check, done once while this module was written, against the
// authors' detector: roca-detect 1.2.12 (`pip install roca-detect`,
// Python 3.11.7). A throwaway test wrote 2,080 moduli made by the helpers
// below, each with this module's verdict, and `RocaFingerprinter`'s
// `has_fingerprint_dlog` (its default method) gave the same verdict for
// every one:
// - flagged by both: the 32 moduli of `rsalib_shaped_moduli_are_flagged`
//   (8 each of 1024, 2048, 3072 and 4096 bits), the two shaped moduli the
//   single-prime and disagreeing-exponent tests start from, mod03, and
//   65537^16;
// - flagged by neither: the 2,000 of `random_moduli_are_not_flagged`, the
//   39 of `leaving_the_subgroup_at_any_single_prime_is_not_flagged`, the
//   disagreeing modulus of the test after it, the suite's fake modulus,
//   the openssl modulus, mod07, and 65537^15 (the detector's floor is
//   2^256 too).
// Its residue method, `has_fingerprint_moduli`, flagged three of those
// as well: the disagreeing modulus, the fake one, and the modulus moved
// at 2 (made even; that method leaves 2 out). Its command line,
// `roca-detect --file-mod` on six of them as 0x-hex lines (a 2048-bit
// shaped modulus, the one moved at 167, the disagreeing one, openssl,
// mod03, mod07), marked exactly the shaped modulus and mod03.
//
// Each test was seen to fail, once, against a detector broken on purpose:
// - the check at 167 inverted, or the bytes read little-endian:
//   `rsalib_shaped_moduli_are_flagged`, the published-modulus,
//   leading-zero, short-input, single-prime and disagreeing-exponent tests;
// - 167 skipped, or non-members at a prime ignored: the single-prime test;
// - the exponents not compared: the disagreeing-exponent test;
// - no 2^256 floor: `empty_and_short_inputs_are_not_flagged`;
// - every input above the floor flagged: `random_moduli_are_not_flagged`,
//   `an_openssl_modulus_is_not_flagged` and four more.

use super::*;
use std::cmp::Ordering;

/// A public modulus of a throwaway key from `openssl genrsa 2048`
/// (OpenSSL 3.0.19): an ordinary RSA key.
const OPENSSL_2048: &str = concat!(
    "cc9f9606b4b7d8bcdbdbe5e5f4cae89d61ee1a3fde7a30ac60ad43dd52f14e5b",
    "c79f12ffd20c66b5db63a31e8907a50a0157a9eb89a10d3cbdf1f102a937c235",
    "c6557a8448e9956466ca094765688c1f9ce771eb9c4bc16dbe8d44e74f91b8bb",
    "6c54db13349466525531a85ef268b147fe0c02a5aeac5d0187d0e0d2b7e1590d",
    "e90f814ff510bc987de3ee86330cf34ad3ce6d17246ebf412f345d8f4fe04bce",
    "00df677b2995a9d38f8b4754a0517b51c74b3fb404e5c13517404ae294015a63",
    "50cb2a8dc38e9e4c6eeae8115cd64bf582f15a1f0cdff560881dc2eac2f5f6d1",
    "fb9f1bc1555b6f892df2bcb805e073a55aba1198c016f4321ea04e9281889671",
);

/// The 2048-bit positive sample of the authors' detector's own tests
/// (roca/tests/data/mod03.txt in roca-detect 1.2.12, MIT licence): a
/// vulnerable modulus that is not ours. Where it was made is not said.
const PUBLISHED_VULNERABLE_2048: &str = concat!(
    "9dcd7420e420c270a68060eb8b5aa7457a9f6648f86fafed2775cc1f79ae962f",
    "1e63f1b9e51c55f9ea6fdc7332e9b0058c9ff2eb1fc89855029cf6aafe21e689",
    "feb38ac9ffb12f1ce371bb5d0e9aae64161abce74b4244bf68f1edb4411f756a",
    "097c8929c14740245ea355f8332d1aa36bb50c7dcb4505da8de02e4e53d38f8d",
    "f06097da7524df0df93db48eac8cc4af2d3a16257eb2b2adca6ba464e5974fa9",
    "2550d31b1babf161e7692d00b86e3dd886ecab4abfbe1a8f8cc263ff4af55cdb",
    "45f4249a5193925f5e983d762f0b6800943eb0267b08f42ed311ce1f5c86eacb",
    "c8ce4d3cb7a2fee1ef5641423a1cf4114e5ecf50034a60a412523af9e6f4aa11",
);

/// The first of the "fake" moduli in the same suite (`test_fake_mods`):
/// a power of 65537 modulo each prime, but not with one exponent, so
/// the residue method flags it and the discrete-log method does not.
const PUBLISHED_DISAGREEING_EXPONENTS: &str = concat!(
    "671f033425b5ae00140c5b04dbcaeada430ae348cf3bf18d6ec4621ea824c52d",
    "d2b0ac85762b28a5d39ff23da73d4fcb241bf97b696e403eca234e05db9fe9ac",
    "e2da265887c7b2ac7f9e7ed5bf6d919d43286776cf57c07d3411e15f729fa6e5",
    "63858059334d072638d9dfbfc4f32474b6c6071092f5a961a7271f3209b37d9d",
);

/// `primorial(167)` as the authors' detector's tests spell it (there in
/// decimal: 962947420735983927056946215901134429196419130606213075415963491270).
const PRIMORIAL_167: &str = "0924cba6ae99dfa084537facc54948df0c23da044d8cabe0edd75bc6";

fn hex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2));
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex digits"))
        .collect()
}

/// SplitMix64: reproducible numbers with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^ (mixed >> 31)
    }
}

// Non-negative integers as little-endian u32 limbs, with no zero limb on
// top, so that the limb count orders them by size.
type Big = Vec<u32>;

fn trimmed(mut value: Big) -> Big {
    while value.last() == Some(&0) {
        value.pop();
    }
    value
}

fn small(value: u64) -> Big {
    trimmed(vec![value as u32, (value >> 32) as u32])
}

fn bit_length(value: &[u32]) -> usize {
    value
        .last()
        .map_or(0, |top| 32 * value.len() - top.leading_zeros() as usize)
}

fn bit(value: &[u32], index: usize) -> bool {
    value
        .get(index / 32)
        .is_some_and(|limb| limb >> (index % 32) & 1 == 1)
}

fn compare(a: &[u32], b: &[u32]) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

fn add(a: &[u32], b: &[u32]) -> Big {
    let mut sum = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0u64;
    for index in 0..a.len().max(b.len()) {
        let total =
            u64::from(*a.get(index).unwrap_or(&0)) + u64::from(*b.get(index).unwrap_or(&0)) + carry;
        sum.push(total as u32);
        carry = total >> 32;
    }
    sum.push(carry as u32);
    trimmed(sum)
}

/// `a − b`, for `a ≥ b`.
fn subtract(a: &[u32], b: &[u32]) -> Big {
    let mut difference = Vec::with_capacity(a.len());
    let mut borrow = 0i64;
    for (index, &limb) in a.iter().enumerate() {
        let mut total = i64::from(limb) - i64::from(*b.get(index).unwrap_or(&0)) - borrow;
        borrow = i64::from(total < 0);
        total += borrow << 32;
        difference.push(total as u32);
    }
    assert_eq!(borrow, 0, "subtract needs a ≥ b");
    trimmed(difference)
}

fn multiply(a: &[u32], b: &[u32]) -> Big {
    let mut product = vec![0u32; a.len() + b.len()];
    for (i, &left) in a.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &right) in b.iter().enumerate() {
            let total = u64::from(left) * u64::from(right) + u64::from(product[i + j]) + carry;
            product[i + j] = total as u32;
            carry = total >> 32;
        }
        product[i + b.len()] = carry as u32;
    }
    trimmed(product)
}

/// Quotient and remainder, one bit at a time: slow, but too short to get wrong.
fn divide(dividend: &[u32], divisor: &[u32]) -> (Big, Big) {
    assert!(!divisor.is_empty());
    let mut quotient = vec![0u32; dividend.len()];
    let mut remainder = Big::new();
    for index in (0..bit_length(dividend)).rev() {
        remainder = add(
            &add(&remainder, &remainder),
            &small(bit(dividend, index).into()),
        );
        if compare(&remainder, divisor) != Ordering::Less {
            remainder = subtract(&remainder, divisor);
            quotient[index / 32] |= 1 << (index % 32);
        }
    }
    (trimmed(quotient), remainder)
}

fn power_of_generator(exponent: u64, modulus: &[u32]) -> Big {
    let mut result = small(1);
    for index in (0..64).rev() {
        result = divide(&multiply(&result, &result), modulus).1;
        if exponent >> index & 1 == 1 {
            result = divide(&multiply(&result, &small(GENERATOR.into())), modulus).1;
        }
    }
    result
}

fn remainder_by(value: &[u32], divisor: u32) -> u32 {
    value.iter().rev().fold(0u64, |remainder, &limb| {
        ((remainder << 32) | u64::from(limb)) % u64::from(divisor)
    }) as u32
}

fn from_big_endian(bytes: &[u8]) -> Big {
    trimmed(
        bytes
            .rchunks(4)
            .map(|chunk| {
                chunk
                    .iter()
                    .fold(0u32, |limb, &byte| limb << 8 | u32::from(byte))
            })
            .collect(),
    )
}

fn to_big_endian(value: &[u32]) -> Vec<u8> {
    let bytes: Vec<u8> = value
        .iter()
        .rev()
        .flat_map(|limb| limb.to_be_bytes())
        .collect();
    let first_nonzero = bytes
        .iter()
        .position(|&byte| byte != 0)
        .unwrap_or(bytes.len());
    bytes[first_nonzero..].to_vec()
}

fn flagged(value: &[u32]) -> bool {
    has_roca_fingerprint(&to_big_endian(value))
}

fn product_of_primes_except(excluded: Option<u32>) -> Big {
    PRIMES
        .iter()
        .filter(|&&prime| Some(prime) != excluded)
        .fold(small(1), |product, &prime| {
            multiply(&product, &small(prime.into()))
        })
}

/// `bits` random bits with the top two set, so that two of them multiply
/// to exactly twice as many bits.
fn random_with_top_bits(rng: &mut Rng, bits: usize) -> Big {
    assert!(bits.is_multiple_of(32));
    let mut value: Big = (0..bits / 32).map(|_| rng.next() as u32).collect();
    *value.last_mut().expect("bits > 0") |= 0b11 << 30;
    value
}

/// `k·M + (65537^a mod M)` near a random `bits`-bit number, k and a random.
fn rsalib_shaped_factor(rng: &mut Rng, bits: usize) -> Big {
    let primorial = product_of_primes_except(None);
    let (multiplier, _) = divide(&random_with_top_bits(rng, bits), &primorial);
    let offset = power_of_generator(rng.next(), &primorial);
    add(&multiply(&multiplier, &primorial), &offset)
}

// P and Q need not be prime: the fingerprint sees only N mod p for the
// primes p of M, and N mod p = (65537^a1 · 65537^a2) mod p =
// 65537^(a1+a2) mod p, one exponent for every p, whatever k1 and k2 are.
// Primality testing 1024-bit candidates here would add time and code and
// change nothing the detector can see.
fn rsalib_shaped_modulus(rng: &mut Rng, bits: usize) -> Big {
    let modulus = multiply(
        &rsalib_shaped_factor(rng, bits / 2),
        &rsalib_shaped_factor(rng, bits / 2),
    );
    assert_eq!(bit_length(&modulus), bits);
    modulus
}

/// The powers of 65537 modulo `prime`, found apart from the module's own walk.
fn subgroup(prime: u32) -> Vec<u32> {
    let mut members = vec![1];
    let mut power = GENERATOR % prime;
    while power != 1 {
        members.push(power);
        power = power * (GENERATOR % prime) % prime;
    }
    members
}

/// `value + t·(M/prime)`, with the t in `0..prime` that makes it
/// `target` modulo `prime`. M/prime is a multiple of every other prime of
/// the list, so the residues at those stay as they were; and it is a unit
/// modulo `prime`, so some t reaches every target.
fn with_residue(value: &[u32], prime: u32, target: u32) -> Big {
    let cofactor = product_of_primes_except(Some(prime));
    let step = remainder_by(&cofactor, prime);
    let current = remainder_by(value, prime);
    let t = (0..prime)
        .find(|t| (current + t * step) % prime == target)
        .expect("M/prime is invertible modulo prime");
    add(value, &multiply(&cofactor, &small(t.into())))
}

#[test]
fn the_constructed_m_is_the_detectors_primorial() {
    assert_eq!(
        to_big_endian(&product_of_primes_except(None)),
        hex(PRIMORIAL_167)
    );
}

#[test]
fn rsalib_shaped_moduli_are_flagged() {
    let mut rng = Rng(0x524f_4341);
    for bits in [1024, 2048, 3072, 4096] {
        for _ in 0..8 {
            let modulus = rsalib_shaped_modulus(&mut rng, bits);
            assert!(flagged(&modulus), "{bits}-bit {modulus:x?}");
        }
    }
}

#[test]
fn random_moduli_are_not_flagged() {
    let mut rng = Rng(0x6e6f_7420_524f_4341);
    for _ in 0..2000 {
        let mut modulus = random_with_top_bits(&mut rng, 2048);
        modulus[0] |= 1;
        assert!(!flagged(&modulus), "{modulus:x?}");
    }
}

#[test]
fn an_openssl_modulus_is_not_flagged() {
    assert!(!has_roca_fingerprint(&hex(OPENSSL_2048)));
}

#[test]
fn the_published_vulnerable_modulus_is_flagged_and_one_byte_off_is_not() {
    assert!(has_roca_fingerprint(&hex(PUBLISHED_VULNERABLE_2048)));
    // The same suite's negative sample, mod07.txt: the last byte 0x11
    // turned into 0x21.
    let mut one_byte_off = hex(PUBLISHED_VULNERABLE_2048);
    *one_byte_off.last_mut().unwrap() = 0x21;
    assert!(!has_roca_fingerprint(&one_byte_off));
}

#[test]
fn leaving_the_subgroup_at_any_single_prime_is_not_flagged() {
    let modulus = rsalib_shaped_modulus(&mut Rng(0x6f6e_6520_7072_696d), 2048);
    assert!(flagged(&modulus));
    for prime in PRIMES {
        let members = subgroup(prime);
        // 0 only where 65537 generates all of Z_p* and no unit is left:
        // for 2, that makes the modulus even.
        let outsider = (1..prime)
            .find(|residue| !members.contains(residue))
            .unwrap_or(0);
        let moved = with_residue(&modulus, prime, outsider);
        assert!(!flagged(&moved), "residue {outsider} modulo {prime}");
    }
}

#[test]
fn powers_of_65537_at_every_prime_with_disagreeing_exponents_are_not_flagged() {
    let modulus = rsalib_shaped_modulus(&mut Rng(0x6469_7361_6772_6565), 2048);
    assert!(flagged(&modulus));
    // 65537 has order 2 modulo 3 and modulo 11, so both residues carry
    // the exponent's parity; one more factor of 65537 modulo 11 alone
    // flips it there and nowhere else.
    let next_power = remainder_by(&modulus, 11) * (GENERATOR % 11) % 11;
    let disagreeing = with_residue(&modulus, 11, next_power);
    for prime in PRIMES {
        assert!(subgroup(prime).contains(&remainder_by(&disagreeing, prime)));
    }
    assert!(!flagged(&disagreeing));

    let published = from_big_endian(&hex(PUBLISHED_DISAGREEING_EXPONENTS));
    for prime in PRIMES {
        assert!(subgroup(prime).contains(&remainder_by(&published, prime)));
    }
    assert!(!flagged(&published));
}

#[test]
fn empty_and_short_inputs_are_not_flagged() {
    assert!(!has_roca_fingerprint(&[]));
    assert!(!has_roca_fingerprint(&[0; 300]));
    assert!(!has_roca_fingerprint(&[1]));
    // 65537^15 (241 bits) passes the test but stays under the floor;
    // 65537^16 (257 bits) is the first power above it.
    let mut power = small(1);
    for _ in 0..15 {
        power = multiply(&power, &small(GENERATOR.into()));
    }
    assert!(!flagged(&power));
    assert!(flagged(&multiply(&power, &small(GENERATOR.into()))));
}

#[test]
fn leading_zero_bytes_change_nothing() {
    let vulnerable = rsalib_shaped_modulus(&mut Rng(0x7a65_726f), 2048);
    for (modulus, expected) in [
        (to_big_endian(&vulnerable), true),
        (hex(PUBLISHED_VULNERABLE_2048), true),
        (hex(OPENSSL_2048), false),
    ] {
        for zeros in [0, 1, 3, 8] {
            let mut padded = vec![0; zeros];
            padded.extend_from_slice(&modulus);
            assert_eq!(has_roca_fingerprint(&padded), expected, "{zeros} zeros");
        }
    }
}

#[test]
fn the_big_integer_helpers_agree_with_known_values() {
    let a = from_big_endian(&hex("0123456789abcdef0011223344556677"));
    let b = from_big_endian(&hex("fedcba9876543210"));
    let (quotient, remainder) = divide(&a, &b);
    assert_eq!(add(&multiply(&quotient, &b), &remainder), a);
    assert_eq!(compare(&remainder, &b), Ordering::Less);
    assert_eq!(to_big_endian(&subtract(&a, &a)), Vec::<u8>::new());
    // 65537^3 = 281487861809153.
    assert_eq!(
        power_of_generator(3, &small(u64::MAX)),
        small(281_487_861_809_153)
    );
    assert_eq!(
        remainder_by(&small(281_487_861_809_153), 167),
        (281_487_861_809_153u64 % 167) as u32
    );
}
