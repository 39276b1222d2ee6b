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

/// config.toml errors said "line 0": the mutable TOML document drops spans, so a wrong-typed
/// key could not be located. Fixed by reading the span-keeping document.
#[test]
fn config_type_error_names_its_line() {
    let t = TestDir::new();
    let cfg = t.join("config.toml");
    std::fs::write(
        &cfg,
        "# comment\n[nvidia-container-runtime]\nruntimes = \"runc\"\n",
    )
    .unwrap();
    let out = gpuctk(&["runtime", "exec", "--", "state", "x"])
        .env("GPUCTK_CONFIG", &cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}:3: nvidia-container-runtime.runtimes",
            cfg.display()
        )),
        "{err}"
    );
}

/// A default spec carried the `gpuctk/driver-version` annotation, which forced cdiVersion
/// 0.6.0, and Podman 4.3 (CDI library 0.5) refused the whole spec ("unresolvable CDI devices").
#[test]
fn default_spec_stays_at_cdi_0_5() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let r = ok(&with(&["cdi", "generate"], &h.roots()));
    assert!(r.stdout.contains("cdiVersion: 0.5.0"), "{}", r.stdout);
    assert!(!r.stdout.contains("annotations"), "{}", r.stdout);
}
