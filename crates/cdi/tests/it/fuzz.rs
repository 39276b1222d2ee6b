use gpuctk_cdi::{names, validate, Format, Spec};

use crate::reference_spec_text;

/// Small deterministic PRNG (xorshift64*), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Whatever parses must validate without panicking and survive a round trip unchanged.
fn check(bytes: &[u8]) {
    for format in [None, Some(Format::Json), Some(Format::Yaml)] {
        if let Ok(spec) = Spec::from_bytes(bytes, format) {
            let _ = validate(&spec);
            let _ = gpuctk_cdi::minimum_version(&spec);
            for text in [spec.to_json_pretty(), spec.to_yaml()] {
                let back = Spec::from_bytes(text.as_bytes(), None)
                    .unwrap_or_else(|e| panic!("re-parse failed: {e}\n{text}"));
                assert_eq!(back, spec);
            }
        }
    }
}

#[test]
fn truncations_never_panic() {
    let yaml = reference_spec_text();
    let spec = Spec::from_bytes(yaml.as_bytes(), None).unwrap();
    let json = spec.to_json_pretty();
    for text in [yaml.as_bytes(), json.as_bytes()] {
        // Every cut near the start and end, and a stride through the middle.
        let n = text.len();
        let cuts = (0..n.min(200))
            .chain((200..n).step_by(7))
            .chain(n.saturating_sub(200)..n);
        for cut in cuts {
            check(&text[..cut]);
        }
    }
}

#[test]
fn mutations_never_panic() {
    let yaml = reference_spec_text();
    let spec = Spec::from_bytes(yaml.as_bytes(), None).unwrap();
    let json = spec.to_json_pretty();
    let alphabet = b"{}[]:,\"'-=/. \n\t#&*!|>%@`0aZ\\\xff\x00";
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..1500 {
        let base = if round % 2 == 0 {
            yaml.as_bytes()
        } else {
            json.as_bytes()
        };
        let mut b = base.to_vec();
        for _ in 0..=rng.below(4) {
            let at = rng.below(b.len());
            match rng.below(4) {
                0 => b[at] = alphabet[rng.below(alphabet.len())],
                1 => b.insert(at, alphabet[rng.below(alphabet.len())]),
                2 => {
                    let end = (at + rng.below(40)).min(b.len());
                    b.drain(at..end);
                }
                _ => {
                    // Duplicate a slice: repeated keys and devices.
                    let end = (at + rng.below(80)).min(b.len());
                    let chunk = b[at..end].to_vec();
                    let to = rng.below(b.len());
                    b.splice(to..to, chunk);
                }
            }
        }
        check(&b);
    }
}

#[test]
fn names_never_panic() {
    let mut rng = Rng(42);
    let alphabet: Vec<char> = "ab0Z.-_:/=é ".chars().collect();
    for _ in 0..5000 {
        let s: String = (0..rng.below(12))
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        if let Ok(q) = names::parse_qualified_name(&s) {
            assert_eq!(q.to_string(), s);
            assert_eq!(names::parse_qualified_name(&q.to_string()).unwrap(), q);
        }
    }
}
