//! One test per fixed bug, each headed by what it fixes.

use crate::util::*;

/// A library whose name merely starts with a catalogue name (`libnvidia-mlx` vs `libnvidia-ml`)
/// must not be taken for it.
#[test]
fn prefix_lookalike_is_not_a_driver_library() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let r = ok(&with(&["info", "--json"], &h.roots()));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    for l in v["libraries"].as_array().unwrap() {
        let path = l["path"].as_str().unwrap();
        let file = path.rsplit('/').next().unwrap();
        let name = l["name"].as_str().unwrap();
        assert!(
            file.starts_with(&format!("{name}.")),
            "{file} filed under {name}"
        );
    }
}
