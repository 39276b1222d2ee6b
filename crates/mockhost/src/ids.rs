//! Deterministic GPU identities, computed exactly as the C side
//! (csrc/mock_common.h) does, so host metadata and what NVML reports agree.

/// 64-bit FNV-1a over `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// UUID of the GPU with device minor `minor` on a host seeded with `seed`:
/// `GPU-` and the 16 bytes `fnv1a64("{seed}/{minor}/a")` ++
/// `fnv1a64("{seed}/{minor}/b")` (both big-endian) in 8-4-4-4-12 form.
pub fn gpu_uuid(seed: &str, minor: u32) -> String {
    uuid_of("GPU", &format!("{seed}/{minor}"))
}

/// UUID of the MIG device `gi`/`ci` of the GPU with minor `minor`: `MIG-` and the 16 bytes
/// `fnv1a64("{seed}/{minor}/gi{gi}/ci{ci}/a")` ++ `.../b`, as csrc/mock_common.h derives it.
pub fn mig_uuid(seed: &str, minor: u32, gi: u32, ci: u32) -> String {
    uuid_of("MIG", &format!("{seed}/{minor}/gi{gi}/ci{ci}"))
}

fn uuid_of(prefix: &str, key: &str) -> String {
    let a = fnv1a64(format!("{key}/a").as_bytes());
    let b = fnv1a64(format!("{key}/b").as_bytes());
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_be_bytes());
    bytes[8..].copy_from_slice(&b.to_be_bytes());
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{prefix}-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// PCI bus id (`domain:bus:device.function`) of GPU `index`; spaced three
/// buses apart starting at 0x17 like a typical 8-GPU server.
pub fn gpu_bus_id(index: u32) -> String {
    format!("0000:{:02x}:00.0", 0x17 + 3 * index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_reference_vectors() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn uuid_shape_and_determinism() {
        let u = gpu_uuid("gpuctk", 0);
        assert_eq!(u.len(), 40);
        assert!(u.starts_with("GPU-"));
        assert_eq!(u, gpu_uuid("gpuctk", 0));
        assert_ne!(u, gpu_uuid("gpuctk", 1));
        assert_ne!(u, gpu_uuid("other", 0));
    }

    #[test]
    fn bus_ids() {
        assert_eq!(gpu_bus_id(0), "0000:17:00.0");
        assert_eq!(gpu_bus_id(1), "0000:1a:00.0");
        assert_eq!(gpu_bus_id(63), "0000:d4:00.0");
    }
}
