use gpuctk_cdi::{apply_edits, Registry};
use serde_json::{json, Value};

use crate::{compile_schema, read_test_file, reference_spec_text};

const OCI_FILES: &[&str] = &[
    "config-schema.json",
    "config-linux.json",
    "config-solaris.json",
    "config-windows.json",
    "config-vm.json",
    "config-zos.json",
    "config-freebsd.json",
    "defs.json",
    "defs-linux.json",
    "defs-windows.json",
    "defs-vm.json",
    "defs-zos.json",
    "defs-freebsd.json",
];

fn oci_check(v: &Value) -> Result<(), String> {
    let (schemas, idx) = compile_schema(
        "oci-schema",
        OCI_FILES,
        "config-schema.json",
        boon::Draft::V4,
    );
    schemas.validate(v, idx).map_err(|e| format!("{e:#}"))
}

fn depth(d: &str) -> usize {
    d.split('/').filter(|c| !c.is_empty()).count()
}

/// Every object of `before` reachable through object keys has its keys, in order, as a prefix of
/// the same object in `after`.
fn assert_key_order_kept(before: &Value, after: &Value, at: &str) {
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        return;
    };
    let bk: Vec<&String> = b.keys().collect();
    let ak: Vec<&String> = a.keys().take(bk.len()).collect();
    assert_eq!(bk, ak, "key order changed at {at}");
    for (k, v) in b {
        assert_key_order_kept(v, &a[k], &format!("{at}.{k}"));
    }
}

fn resolved_edits(names: &[&str]) -> gpuctk_cdi::ContainerEdits {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("nvidia.yaml"), reference_spec_text()).unwrap();
    let reg = Registry::load(&[d.path().to_path_buf()]);
    assert!(reg.errors().is_empty(), "{:?}", reg.errors());
    let mut edits = reg.resolve(names).unwrap().edits;
    // What fill_from_host would find on the host: every NVIDIA node is a char device.
    for n in &mut edits.device_nodes {
        n.r#type = Some("c".into());
    }
    edits
}

#[test]
fn apply_to_runc_config() {
    let mut original: Value =
        serde_json::from_str(&read_test_file("data/original-config.json")).unwrap();
    // Fields a newer runtime-spec may add, and docker's hook: all must survive.
    original["x-vendor-extension"] = json!({"keep": [1, 2, 3]});
    original["process"]["futureField"] = json!("kept");
    original["hooks"] = json!({"prestart": [{"path": "/usr/bin/dockerd", "args": ["libnetwork-setkey", "-exec-root=/var/run/docker", "abc"]}]});
    oci_check(&original).unwrap();

    let edits = resolved_edits(&["nvidia.com/gpu=0", "nvidia.com/gpu=1"]);
    let mut config = original.clone();
    apply_edits(&mut config, &edits).unwrap();

    assert_key_order_kept(&original, &config, "config");
    assert_eq!(config["x-vendor-extension"], original["x-vendor-extension"]);
    assert_eq!(config["process"]["futureField"], "kept");
    assert_eq!(config["process"]["terminal"], false);

    let env: Vec<&str> = config["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        env,
        [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TERM=xterm",
            "NVIDIA_VISIBLE_DEVICES=void",
            "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu",
        ]
    );

    let rules = config["linux"]["resources"]["devices"].as_array().unwrap();
    assert_eq!(
        rules[0],
        json!({"allow": false, "access": "rwm"}),
        "deny-all stays first"
    );
    let mut allowed: Vec<(i64, i64)> = rules[1..]
        .iter()
        .map(|r| {
            assert_eq!(r["allow"], true);
            assert_eq!(r["type"], "c");
            assert_eq!(r["access"], "rwm");
            (r["major"].as_i64().unwrap(), r["minor"].as_i64().unwrap())
        })
        .collect();
    allowed.sort();
    assert_eq!(
        allowed,
        [
            (195, 0),
            (195, 1),
            (195, 254),
            (195, 255),
            (508, 0),
            (508, 1)
        ]
    );

    // Same device entries and cgroup rules as NVIDIA's runtime, in any order.
    let nvidia: Value =
        serde_json::from_str(&read_test_file("data/nvidia-runtime-config.json")).unwrap();
    let sorted = |v: &Value| {
        let mut a: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect();
        a.sort();
        a
    };
    assert_eq!(
        sorted(&config["linux"]["devices"]),
        sorted(&nvidia["linux"]["devices"])
    );
    assert_eq!(
        sorted(&config["linux"]["resources"]["devices"]),
        sorted(&nvidia["linux"]["resources"]["devices"])
    );

    let prestart = config["hooks"]["prestart"].as_array().unwrap();
    assert_eq!(prestart.len(), 1);
    assert_eq!(prestart[0]["args"][0], "libnetwork-setkey");
    let cc = config["hooks"]["createContainer"].as_array().unwrap();
    assert_eq!(cc.len(), 5);
    assert_eq!(
        cc[2]["args"],
        json!([
            "nvidia-cdi-hook",
            "update-ldcache",
            "--folder",
            "/usr/lib/x86_64-linux-gnu"
        ])
    );

    let dests: Vec<&str> = config["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap())
        .collect();
    for w in dests.windows(2) {
        assert!(depth(w[0]) <= depth(w[1]), "{} before {}", w[0], w[1]);
    }
    let pos = |d: &str| dests.iter().position(|x| *x == d).unwrap();
    assert!(pos("/sys") < pos("/dev/pts"));
    assert!(pos("/sys") < pos("/sys/fs/cgroup"));
    assert!(
        pos("/proc") < pos("/dev"),
        "equal depth keeps the original order"
    );
    assert_eq!(dests.len(), 7 + 8);
    // In the order NVIDIA's runtime gave them (its CDI library's stable sort by depth).
    let theirs: Vec<&str> = nvidia["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap())
        .collect();
    assert_eq!(dests, theirs);
    let smi = &config["mounts"][pos("/usr/bin/nvidia-smi")];
    assert_eq!(
        smi,
        &json!({"destination": "/usr/bin/nvidia-smi", "type": "bind", "source": "/hostroot/usr/bin/nvidia-smi",
                "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]})
    );

    oci_check(&config).unwrap();

    // Applying the same edits again changes nothing but the hooks (which are always appended).
    let mut again = config.clone();
    apply_edits(&mut again, &edits).unwrap();
    assert_eq!(again["process"]["env"], config["process"]["env"]);
    assert_eq!(again["linux"], config["linux"]);
    assert_eq!(again["mounts"], config["mounts"]);
}

#[test]
fn oci_schema_is_really_checked() {
    let mut config: Value =
        serde_json::from_str(&read_test_file("data/original-config.json")).unwrap();
    config["linux"]["devices"] = json!([{"path": "/dev/x", "type": "q"}]);
    assert!(oci_check(&config).is_err());
}
