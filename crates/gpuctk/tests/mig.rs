//! MIG: the mock host's MIG mode (procfs, capability nodes, fake NVML, `nvidia-smi -L`), and
//! MIG devices in `cdi generate` by index (`N:M`) and UUID, each with its parent's node and
//! exactly its own capability nodes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

/// A mock host with 2 GPUs, GPU 0 in MIG mode with 1g.10gb, 1g.10gb and 2g.20gb.
pub fn mig_host(t: &TestDir) -> Host {
    let dir = t.join("host");
    ok(&[
        "mock-host",
        "create",
        dir.to_str().unwrap(),
        "--gpus",
        "2",
        "--mig",
        "0=1g.10gb,1g.10gb,2g.20gb",
    ]);
    Host::at(&dir)
}

/// GPU 0's MIG devices from the manifest: (uuid, gi, gi minor, ci minor), in index order.
pub fn migs(h: &Host) -> Vec<(String, u64, u64, u64)> {
    h.manifest["gpus"][0]["mig"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["uuid"].as_str().unwrap().to_string(),
                m["gi"].as_u64().unwrap(),
                m["gi_minor"].as_u64().unwrap(),
                m["ci_minor"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn generate(h: &Host, extra: &[&str]) -> (Value, String) {
    let mut args = vec!["cdi", "generate", "--format", "json"];
    let roots = h.roots();
    args.extend(roots.iter().map(String::as_str));
    args.extend(extra);
    let r = ok(&args);
    (serde_json::from_str(&r.stdout).unwrap(), r.stderr)
}

fn device<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name} in {spec}"))
}

fn names(spec: &Value) -> Vec<String> {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

fn node_paths(d: &Value) -> Vec<String> {
    d["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap().to_string())
        .collect()
}

/// Each node of `d` is the host's node: same major, minor and mode.
fn nodes_match_host(d: &Value, dev_root: &str) {
    for n in d["containerEdits"]["deviceNodes"].as_array().unwrap() {
        let p = n["path"].as_str().unwrap();
        let host = n["hostPath"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| format!("{dev_root}{p}"));
        let md = std::fs::metadata(&host).unwrap_or_else(|e| panic!("{host}: {e}"));
        let rdev = md.rdev();
        assert_eq!(n["major"].as_u64().unwrap(), libc_major(rdev), "{n}");
        assert_eq!(n["minor"].as_u64().unwrap(), libc_minor(rdev), "{n}");
        assert_eq!(
            n["fileMode"].as_u64().unwrap(),
            u64::from(md.mode() & 0o777)
        );
    }
}

fn libc_major(rdev: u64) -> u64 {
    ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff)
}
fn libc_minor(rdev: u64) -> u64 {
    (rdev & 0xff) | ((rdev >> 12) & !0xff)
}

/// `--mig` with a layout that has no MIG (Jetson, WSL2) is refused in one line, nothing made.
#[test]
fn mock_host_mig_needs_a_dgpu_layout() {
    let t = TestDir::new();
    for layout in ["tegra", "wsl"] {
        let dir = t.join(layout);
        let r = fails(
            &[
                "mock-host",
                "create",
                dir.to_str().unwrap(),
                "--layout",
                layout,
                "--mig",
                "0=1g.10gb",
            ],
            &["--mig: not with --layout tegra or wsl"],
        );
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(!dir.join("mock-host.json").exists());
    }
}

#[test]
fn mock_host_mig_files_are_the_drivers() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let proc_root = h.proc_root();
    let minors =
        std::fs::read_to_string(format!("{proc_root}/driver/nvidia-caps/mig-minors")).unwrap();
    assert!(minors.starts_with("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"));
    assert!(minors.ends_with("gpu31/gi14/ci7/access 4322\n"));
    let m = migs(&h);
    // NVML's order, by GPU instance id: the 2g.20gb instance (gi 3) first.
    assert_eq!(
        m.iter().map(|x| x.1).collect::<Vec<_>>(),
        [3, 7, 8],
        "{m:?}"
    );
    for (_, gi, gi_minor, ci_minor) in &m {
        let gi_file = format!("{proc_root}/driver/nvidia/capabilities/gpu0/mig/gi{gi}/access");
        assert_eq!(
            std::fs::read_to_string(&gi_file).unwrap(),
            format!("DeviceFileMinor: {gi_minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
        );
        assert!(minors.contains(&format!("gpu0/gi{gi}/access {gi_minor}\n")));
        assert!(minors.contains(&format!("gpu0/gi{gi}/ci0/access {ci_minor}\n")));
        for minor in [gi_minor, ci_minor] {
            let node = format!("{}/dev/nvidia-caps/nvidia-cap{minor}", h.dev_root());
            let md = std::fs::metadata(&node).unwrap();
            assert_eq!(libc_minor(md.rdev()), *minor);
            assert_eq!(md.mode() & 0o777, 0o444);
        }
    }
    // The driver makes every attached GPU's `mig` folder, MIG mode or not: GPU 1's is empty.
    let gpu1 = format!("{proc_root}/driver/nvidia/capabilities/gpu1/mig");
    assert_eq!(std::fs::read_dir(&gpu1).unwrap().count(), 0, "{gpu1}");
}

#[test]
fn nvidia_smi_lists_the_partitions() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let lib = format!(
        "{}{}",
        h.driver_root(),
        h.manifest["lib_dir"].as_str().unwrap()
    );
    let out = std::process::Command::new(format!("{}/usr/bin/nvidia-smi", h.driver_root()))
        .arg("-L")
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let m = migs(&h);
    let uuids = h.uuids();
    let expected = format!(
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: {})\n  MIG 2g.20gb     Device  0: (UUID: {})\n  MIG 1g.10gb     Device  1: (UUID: {})\n  MIG 1g.10gb     Device  2: (UUID: {})\nGPU 1: NVIDIA A100-SXM4-80GB (UUID: {})\n",
        uuids[0], m[0].0, m[1].0, m[2].0, uuids[1]
    );
    assert_eq!(text, expected);
}

#[test]
fn generate_names_mig_devices_by_index_and_uuid() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let (spec, stderr) = generate(&h, &[]);
    assert_cdi_schema(&spec);
    assert!(!stderr.contains("NVML"), "{stderr}");
    let m = migs(&h);
    let uuids = h.uuids();
    let mut want: Vec<String> = vec!["0:0".into(), "0:1".into(), "0:2".into(), "1".into()];
    want.extend([uuids[1].clone(), "all".into()]);
    want.extend(m.iter().map(|x| x.0.clone()));
    want.sort();
    let mut got = names(&spec);
    got.sort();
    // GPU 0 is in MIG mode: there as its MIG devices only, as NVIDIA's generator does.
    assert_eq!(got, want);
    for (i, (uuid, _, gi_minor, ci_minor)) in m.iter().enumerate() {
        let want_nodes = vec![
            "/dev/nvidia0".to_string(),
            format!("/dev/nvidia-caps/nvidia-cap{gi_minor}"),
            format!("/dev/nvidia-caps/nvidia-cap{ci_minor}"),
        ];
        for name in [format!("0:{i}"), uuid.clone()] {
            let d = device(&spec, &name);
            assert_eq!(node_paths(d), want_nodes, "{name}");
            nodes_match_host(d, &h.dev_root());
        }
    }
    let all = node_paths(device(&spec, "all"));
    assert_eq!(
        all.iter().filter(|p| *p == "/dev/nvidia0").count(),
        1,
        "{all:?}"
    );
    assert!(all.contains(&"/dev/nvidia1".to_string()));
    for (_, _, g, c) in &m {
        for minor in [g, c] {
            assert!(all.contains(&format!("/dev/nvidia-caps/nvidia-cap{minor}")));
        }
    }
}

#[test]
fn generate_selects_mig_devices_in_each_form() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let m = migs(&h);
    let uuids = h.uuids();
    let old_form = format!("MIG-{}/{}/0", uuids[0], m[1].1);
    for id in ["0:1", m[1].0.as_str(), old_form.as_str()] {
        let (spec, _) = generate(&h, &["--device-id", id]);
        let mut got = names(&spec);
        got.sort();
        assert_eq!(got, ["0:1", m[1].0.as_str(), "all"], "{id}");
        assert_eq!(
            node_paths(device(&spec, "all")),
            node_paths(device(&spec, "0:1")),
            "{id}"
        );
    }
    let mut args = vec!["cdi", "generate", "--device-id", "0:3"];
    let roots = h.roots();
    args.extend(roots.iter().map(String::as_str));
    fails(&args, &["0:3", "MIG devices 0:0, 0:1, 0:2"]);
}

#[test]
fn without_nvml_mig_devices_keep_their_index_names_and_one_line_says_why() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let lib = Path::new(&h.driver_root()).join(
        h.manifest["lib_dir"]
            .as_str()
            .unwrap()
            .trim_start_matches('/'),
    );
    for e in std::fs::read_dir(&lib).unwrap() {
        let p = e.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("libnvidia-ml.so")
        {
            std::fs::remove_file(p).unwrap();
        }
    }
    let (spec, stderr) = generate(&h, &["--allow-missing-libcuda"]);
    let mut got = names(&spec);
    got.sort();
    assert_eq!(
        got,
        ["0:0", "0:1", "0:2", "1", h.uuids()[1].as_str(), "all"]
    );
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("NVML not used"))
            .count(),
        1,
        "{stderr}"
    );
}

/// A runtime bed on the MIG host, with NVML's answers recorded where its config says, as
/// `cdi generate` run as root leaves them.
fn mig_bed(runtime: &str) -> (crate::runtime::Bed, Vec<(String, u64, u64, u64)>) {
    let t = TestDir::new();
    let host = mig_host(&t);
    let m = migs(&host);
    let bed = crate::runtime::Bed::with_host(runtime, t, host);
    let cache = bed.t.join("nvml-cache.json");
    let cfg = std::fs::read_to_string(&bed.config).unwrap().replace(
        "[gpuctk]\n",
        &format!("[gpuctk]\nnvml-cache = \"{}\"\n", cache.display()),
    );
    std::fs::write(&bed.config, cfg).unwrap();
    (bed, m)
}

fn record_nvml(bed: &crate::runtime::Bed) {
    let out = bed.t.join("spec.json");
    let mut args = vec![
        "cdi".to_string(),
        "generate".into(),
        "--config".into(),
        bed.config.display().to_string(),
        "--output".into(),
        out.display().to_string(),
    ];
    args.extend(bed.host.roots());
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let md = std::fs::metadata(bed.t.join("nvml-cache.json")).unwrap();
    assert_eq!(md.mode() & 0o777, 0o644);
}

/// The cap nodes the container has.
fn caps_in(r: &crate::runtime::Ran) -> Vec<String> {
    let mut v: Vec<String> = r
        .probe
        .devices
        .iter()
        .filter(|(p, _)| p.starts_with("/dev/nvidia-caps/"))
        .map(|(p, res)| {
            assert_eq!(res, "ENXIO", "{p}: {}", r.stdout);
            p.clone()
        })
        .collect();
    v.sort();
    v
}

fn cap_nodes(m: &[(String, u64, u64, u64)], which: &[usize]) -> Vec<String> {
    let mut v: Vec<String> = which
        .iter()
        .flat_map(|i| [m[*i].2, m[*i].3])
        .map(|n| format!("/dev/nvidia-caps/nvidia-cap{n}"))
        .collect();
    v.sort();
    v
}

fn shim_selects_mig_devices(runtime: &str) {
    let (bed, m) = mig_bed(runtime);
    let uuids = bed.host.uuids();
    // Before anything recorded NVML's answers, a MIG UUID cannot be resolved: the shim never
    // initialises NVML; the message says how to record them, and the index form.
    bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={}", m[2].0)]);
    let r = bed.run("nocache");
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("MIG UUIDs are known only from NVML") && r.stderr.contains("0:2"),
        "{}",
        r.stderr
    );
    record_nvml(&bed);
    let old_form = format!("MIG-{}/{}/0", uuids[0], m[1].1);
    // (NVIDIA_VISIBLE_DEVICES, GPU nodes, MIG devices whose cap nodes, nvidia-smi -L UUIDs)
    type Case = (String, Vec<u32>, Vec<usize>, Vec<String>);
    let cases: Vec<Case> = vec![
        (
            "0:1".into(),
            vec![0],
            vec![1],
            vec![uuids[0].clone(), m[1].0.clone()],
        ),
        (
            m[2].0.clone(),
            vec![0],
            vec![2],
            vec![uuids[0].clone(), m[2].0.clone()],
        ),
        (
            old_form,
            vec![0],
            vec![1],
            vec![uuids[0].clone(), m[1].0.clone()],
        ),
        (
            "0:0,1".into(),
            vec![0, 1],
            vec![0],
            vec![uuids[0].clone(), m[0].0.clone(), uuids[1].clone()],
        ),
        (
            "all".into(),
            vec![0, 1],
            vec![0, 1, 2],
            vec![
                uuids[0].clone(),
                m[0].0.clone(),
                m[1].0.clone(),
                m[2].0.clone(),
                uuids[1].clone(),
            ],
        ),
        // The whole GPU in MIG mode: its node, no MIG device.
        ("0".into(), vec![0], vec![], vec![uuids[0].clone()]),
    ];
    for (i, (value, gpus, mig, smi)) in cases.iter().enumerate() {
        bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")]);
        let r = bed.run(&format!("mig{i}"));
        r.ok();
        assert_eq!(&r.gpus(), gpus, "{value}: {}", r.stdout);
        // Exactly the instances' nodes: not the global MIG capabilities, not other instances.
        assert_eq!(caps_in(&r), cap_nodes(&m, mig), "{value}: {}", r.stdout);
        assert_eq!(&r.smi_uuids(), smi, "{value}: nvidia-smi -L: {}", r.smi);
    }
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0:3"]);
    let r = bed.run("unknown");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("no MIG device 0:3") && r.stderr.contains("0:0, 0:1, 0:2"),
        "{}",
        r.stderr
    );
}

#[test]
fn runc_shim_selects_mig_devices() {
    shim_selects_mig_devices("runc");
}

#[test]
fn crun_shim_selects_mig_devices() {
    shim_selects_mig_devices("crun");
}

/// Legacy mode (the prestart hook): the MIG device's nodes and exactly its two capability files
/// under `/proc/driver/nvidia/capabilities`, read-only, as libnvidia-container binds them.
#[test]
fn prestart_hook_gives_the_capability_view() {
    for runtime in ["runc", "crun"] {
        let (bed, m) = mig_bed(runtime);
        let cfg = std::fs::read_to_string(&bed.config).unwrap().replace(
            "[nvidia-container-runtime]\n",
            "[nvidia-container-runtime]\nmode = \"legacy\"\n",
        );
        std::fs::write(&bed.config, cfg).unwrap();
        record_nvml(&bed);
        let uuids = bed.host.uuids();
        for (i, value) in ["0:1", m[1].0.as_str()].iter().enumerate() {
            bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")]);
            bed.edit(|s| {
                s["process"]["args"] = serde_json::json!([
                    "/bin/sh",
                    "-c",
                    "/usr/bin/gpuctk-probe; echo ---smi---; nvidia-smi -L; echo ---view---; \
                     find /proc/driver/nvidia/capabilities -type f | sort; \
                     for f in $(find /proc/driver/nvidia/capabilities -type f); do \
                     (echo x >> $f) 2>/dev/null && echo writable || echo read-only; done"
                ]);
                // The mock driver is not in the kernel's procfs: a tmpfs on /proc/driver
                // stands for the driver's folder, where the hook binds the files.
                s["mounts"].as_array_mut().unwrap().push(serde_json::json!({
                    "destination": "/proc/driver",
                    "type": "tmpfs",
                    "source": "tmpfs",
                    "options": ["nosuid", "nodev", "noexec", "mode=755"]
                }));
            });
            let r = bed.run(&format!("legacy{i}"));
            r.ok();
            assert_eq!(r.gpus(), [0], "{value}: {}", r.stdout);
            assert_eq!(caps_in(&r), cap_nodes(&m, &[1]), "{value}: {}", r.stdout);
            let (smi, view) = r.smi.split_once("---view---\n").unwrap();
            assert_eq!(
                smi,
                format!(
                    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: {})\n  MIG 1g.10gb     Device  0: (UUID: {})\n",
                    uuids[0], m[1].0
                ),
                "{value}"
            );
            let gi = m[1].1;
            assert_eq!(
                view,
                format!(
                    "/proc/driver/nvidia/capabilities/gpu0/mig/gi{gi}/access\n/proc/driver/nvidia/capabilities/gpu0/mig/gi{gi}/ci0/access\nread-only\nread-only\n"
                ),
                "{value}"
            );
        }
    }
}

#[test]
fn info_and_nvml_query_show_what_nvml_says() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let m = migs(&h);
    let r = ok(&with(&["info"], &h.roots()));
    assert!(
        r.stdout.contains(
            "GPU 0: Brand: Nvidia, Architecture: Ampere (compute capability 8.0), MIG enabled\n"
        ) && r.stdout.contains(
            "GPU 1: Brand: Nvidia, Architecture: Ampere (compute capability 8.0), MIG disabled\n"
        ),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("MIG devices: 3\n"), "{}", r.stdout);
    for (i, (uuid, gi, g, c)) in m.iter().enumerate() {
        let line = format!("    0:{i}  {uuid}  gi {gi} ci 0  /dev/nvidia-caps/nvidia-cap{g} (",);
        assert!(r.stdout.contains(&line), "{line}\n{}", r.stdout);
        assert!(r.stdout.contains(&format!("nvidia-cap{c} (")));
    }
    let j: Value =
        serde_json::from_str(&ok(&with(&["info", "--json"], &h.roots())).stdout).unwrap();
    assert_eq!(j["nvml"]["gpus"][0]["mig_enabled"], true);
    assert_eq!(j["mig_devices"][2]["uuid"], m[2].0.as_str());
    assert_eq!(
        j["gpus"][1]["uuid"],
        h.uuids()[1].as_str(),
        "the inventory's fields stay"
    );
    let q: Value = serde_json::from_str(&ok(&with(&["nvml-query"], &h.roots())).stdout).unwrap();
    assert_eq!(q, j["nvml"]);
    assert_eq!(q["gpus"][0]["mig"][1]["gi"], m[1].1);
}

#[test]
fn nvidia_container_cli_info_has_brand_and_architecture() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let cli = t.join("nvidia-container-cli");
    std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
    let config = t.join("config.toml");
    h.write_cli_config(&config, "");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&cli)
            .args(args)
            .env("GPUCTK_CONFIG", &config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["info"]);
    let uuid = &h.uuids()[0];
    assert!(
        text.contains(&format!(
            "Device Index:   0\nDevice Minor:   0\nModel:          NVIDIA A100-SXM4-80GB\nBrand:          Nvidia\nGPU UUID:       {uuid}\nBus Location:   00000000:17:00.0\nArchitecture:   8.0\n"
        )),
        "{text}"
    );
    let csv = run(&["info", "--csv"]);
    assert!(
        csv.contains("Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n")
            && csv.contains(&format!(
                "0,0,NVIDIA A100-SXM4-80GB,Nvidia,{uuid},00000000:17:00.0,8.0\n"
            )),
        "{csv}"
    );
}

/// NVML's recorded answers are used only when root owns them, only root may write them, they
/// parse and they are for this driver's NVML file; otherwise one line says why.
#[test]
fn recorded_answers_are_trusted_only_when_sound() {
    let (bed, m) = mig_bed("runc");
    record_nvml(&bed);
    let cache = bed.t.join("nvml-cache.json");
    let good = std::fs::read(&cache).unwrap();
    let request = |id: &str| {
        bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={}", m[0].0)]);
        bed.run(id)
    };
    request("trusted").ok();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o666)).unwrap();
    let r = request("writable");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("writable by root only")
            && r.stderr.contains("MIG UUIDs are known only from NVML"),
        "{}",
        r.stderr
    );
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&cache, b"{\"key\":").unwrap();
    let r = request("corrupt");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("nvml-cache.json: not used:"),
        "{}",
        r.stderr
    );
    // A record for another NVML file (the driver changed since): not used, and not an error
    // of the record's.
    std::fs::write(&cache, &good).unwrap();
    let lib = Path::new(&bed.host.driver_root())
        .join(
            bed.host.manifest["lib_dir"]
                .as_str()
                .unwrap()
                .trim_start_matches('/'),
        )
        .join("libnvidia-ml.so.570.124.06");
    let f = std::fs::OpenOptions::new().append(true).open(&lib).unwrap();
    f.set_len(f.metadata().unwrap().len() + 1).unwrap();
    let r = request("stale");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("MIG UUIDs are known only from NVML") && !r.stderr.contains("not used"),
        "{}",
        r.stderr
    );
}

/// `arch` and `brand` requirements are checked with NVML's recorded answers; without them the
/// condition holds (libnvidia-container's rule for an unknown datum), with a warning. Under
/// runc and crun.
#[test]
fn arch_and_brand_requirements_use_the_recorded_answers() {
    for runtime in ["runc", "crun"] {
        arch_and_brand_requirements(runtime);
    }
}

fn arch_and_brand_requirements(runtime: &str) {
    let (bed, _) = mig_bed(runtime);
    let env = ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"];
    bed.set_env(&env);
    let r = bed.run("unknown");
    r.ok();
    assert!(
        r.stderr.contains("arch>=9.0"),
        "a warning names it: {}",
        r.stderr
    );
    record_nvml(&bed);
    bed.set_env(&env);
    let r = bed.run("refused");
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("arch>=9.0") && r.stderr.contains("8.0"),
        "{}",
        r.stderr
    );
    bed.set_env(&[
        "NVIDIA_VISIBLE_DEVICES=1",
        "NVIDIA_REQUIRE_ARCH=arch>=8.0 brand=nvidia",
    ]);
    bed.run("met").ok();
    bed.set_env(&[
        "NVIDIA_VISIBLE_DEVICES=0:1",
        "NVIDIA_REQUIRE_BRAND=brand=tesla",
    ]);
    let r = bed.run("brand");
    assert_ne!(
        r.code, 0,
        "a MIG device is judged by its parent: {}",
        r.stdout
    );
    assert!(r.stderr.contains("brand=tesla"), "{}", r.stderr);
}

/// Review finding: a create asking for a MIG device with a requirement read NVML's record
/// twice, once for the MIG device's UUID and once for the requirement's facts. It is read once.
#[test]
fn a_mig_create_with_requirements_reads_the_nvml_record_once() {
    let (bed, _) = mig_bed("runc");
    record_nvml(&bed);
    // The shim's own calls only: a stand-in runtime (runc's container would hold the pipes).
    crate::runtime::recording_runtime(&bed);
    bed.set_env(&[
        "NVIDIA_VISIBLE_DEVICES=0:1",
        "NVIDIA_REQUIRE_ARCH=arch>=8.0 brand=nvidia",
    ]);
    let trace = crate::runtime::traced_create(&bed, "once");
    let opens: Vec<_> = trace
        .iter()
        .filter(|l| l.starts_with("openat(") && l.contains("nvml-cache.json"))
        .collect();
    assert_eq!(opens.len(), 1, "{opens:#?}");
}

/// The names `cdi generate` gives MIG devices, asked for as CDI names through the shim.
#[test]
fn cdi_names_of_mig_devices_through_the_shim() {
    let (bed, m) = mig_bed("crun");
    let mut args = vec![
        "cdi".to_string(),
        "generate".into(),
        "--config".into(),
        bed.config.display().to_string(),
        "--nvidia-cdi-hook-path".into(),
        GPUCTK.into(),
        "--output".into(),
        bed.cdi_dir().join("nvidia.yaml").display().to_string(),
    ];
    args.extend(bed.host.roots());
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let uuids = bed.host.uuids();
    for (i, name) in [
        "nvidia.com/gpu=0:2".to_string(),
        format!("nvidia.com/gpu={}", m[2].0),
    ]
    .iter()
    .enumerate()
    {
        bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={name}")]);
        let r = bed.run(&format!("cdi{i}"));
        r.ok();
        assert_eq!(r.gpus(), [0], "{name}: {}", r.stdout);
        assert_eq!(caps_in(&r), cap_nodes(&m, &[2]), "{name}");
        assert_eq!(
            r.smi_uuids(),
            [uuids[0].clone(), m[2].0.clone()],
            "{name}: {}",
            r.smi
        );
    }
}

/// `nvidia-container-cli list --device` with MIG devices: the parent's node, then each MIG
/// device's two capability files, as libnvidia-container lists them.
#[test]
fn nvidia_container_cli_list_names_mig_devices() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let m = migs(&h);
    let cli = t.join("nvidia-container-cli");
    std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
    let config = t.join("config.toml");
    h.write_cli_config(&config, "");
    let list = |dev: &str| {
        let out = std::process::Command::new(&cli)
            .args(["list", "--device", dev, "--ipcs"])
            .env("GPUCTK_CONFIG", &config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let caps = format!("{}/driver/nvidia/capabilities/gpu0/mig", h.proc_root());
    let files = |i: usize| format!("{caps}/gi{g}/access\n{caps}/gi{g}/ci0/access\n", g = m[i].1);
    let out = std::process::Command::new(&cli)
        .args(["list", "--device", "1:0"])
        .env("GPUCTK_CONFIG", &config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--device: no MIG device 1:0"),
        "{err}"
    );
    let text = list("0:1");
    assert!(
        text.contains(&format!("{}/dev/nvidia0\n{}", h.dev_root(), files(1))),
        "{text}"
    );
    assert!(!text.contains("nvidia1\n"), "{text}");
    let all = list("all");
    assert!(
        all.contains(&format!(
            "{d}/dev/nvidia0\n{d}/dev/nvidia1\n{}{}{}",
            files(0),
            files(1),
            files(2),
            d = h.dev_root()
        )),
        "{all}"
    );
}

/// `doctor` on a MIG host: NVML, the MIG devices, and whether the runtime has a current record
/// of NVML's answers; a missing capability node is a failure naming it.
#[test]
fn doctor_checks_nvml_mig_devices_and_the_record() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let cache = t.join("nvml-cache.json");
    let config = t.join("config.toml");
    h.write_cli_config(&config, &format!("nvml-cache = \"{}\"\n", cache.display()));
    let doctor = || {
        let p = |s: &str| t.join(s).display().to_string();
        let c = config.display().to_string();
        let args = [
            "doctor",
            "--json",
            "--config",
            &c,
            "--spec-dir",
            &p("cdi"),
            "--docker-config",
            &p("daemon.json"),
            "--containerd-config",
            &p("containerd.toml"),
            "--crio-config",
            &p("crio.conf"),
        ];
        let r = run(&args);
        let v: Value =
            serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stderr));
        v
    };
    let check = |v: &Value, name: &str| -> Value {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["group"] == "devices" && c["name"] == name)
            .unwrap_or_else(|| panic!("no devices/{name} in {v:#}"))
            .clone()
    };
    let v = doctor();
    assert_eq!(check(&v, "nvml")["status"], "ok");
    assert!(check(&v, "nvml")["found"]
        .as_str()
        .unwrap()
        .contains("MIG mode on GPU 0"));
    let mig = check(&v, "mig-devices");
    assert_eq!(mig["found"], "3 MIG device(s): 0:0, 0:1, 0:2");
    let rec = check(&v, "nvml-record");
    assert_eq!(rec["status"], "warn", "{rec}");
    assert!(rec["fix"].as_str().unwrap().contains("gpuctk info"));
    // `info` as root on the runtime's roots records NVML's answers.
    let c = config.display().to_string();
    ok(&with(&["info", "--config", &c], &h.roots()));
    assert_eq!(check(&doctor(), "nvml-record")["status"], "ok");
    let m = migs(&h);
    let node = format!("{}/dev/nvidia-caps/nvidia-cap{}", h.dev_root(), m[1].3);
    std::fs::remove_file(&node).unwrap();
    let mig = check(&doctor(), "mig-devices");
    assert_eq!(mig["status"], "fail");
    assert!(
        mig["found"]
            .as_str()
            .unwrap()
            .contains(&format!("nvidia-cap{}", m[1].3))
            && mig["found"].as_str().unwrap().contains("mknod"),
        "{mig}"
    );
}

/// The device plugin's `volume-mounts` list strategy with MIG devices (its `single` and `mixed`
/// MIG strategies hand over the same ids): `/dev/null` at
/// `/var/run/nvidia-container-devices/MIG-<uuid>` gives that MIG device.
#[test]
fn device_plugin_volume_mounts_name_mig_devices() {
    let (bed, m) = mig_bed("runc");
    let cfg = std::fs::read_to_string(&bed.config).unwrap();
    std::fs::write(
        &bed.config,
        format!("accept-nvidia-visible-devices-as-volume-mounts = true\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n{cfg}"),
    )
    .unwrap();
    record_nvml(&bed);
    bed.set_env(&[]);
    bed.edit(|s| {
        for id in [m[0].0.as_str(), "0:2"] {
            s["mounts"].as_array_mut().unwrap().push(serde_json::json!({
                "destination": format!("/var/run/nvidia-container-devices/{id}"),
                "type": "bind",
                "source": "/dev/null",
                "options": ["bind", "ro"]
            }));
        }
    });
    let r = bed.run("mounts");
    r.ok();
    assert_eq!(r.gpus(), [0], "{}", r.stdout);
    assert_eq!(caps_in(&r), cap_nodes(&m, &[0, 2]), "{}", r.stdout);
    assert_eq!(
        r.smi_uuids(),
        [bed.host.uuids()[0].clone(), m[0].0.clone(), m[2].0.clone()],
        "{}",
        r.smi
    );
}

/// Repartitioning leaves the driver (the record's key) as it was: a record that lists other
/// instances than procfs shows is not used, so a UUID never names a device it no longer is.
#[test]
fn a_record_from_before_repartitioning_is_not_used() {
    let (bed, m) = mig_bed("runc");
    record_nvml(&bed);
    // The 1g.10gb instance with GPU instance id 8 is destroyed.
    let gi = format!(
        "{}/driver/nvidia/capabilities/gpu0/mig/gi{}",
        bed.host.proc_root(),
        m[2].1
    );
    std::fs::remove_dir_all(&gi).unwrap();
    bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={}", m[1].0)]);
    let r = bed.run("repartitioned");
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("repartitioned since")
            && r.stderr.contains("MIG UUIDs are known only from NVML"),
        "{}",
        r.stderr
    );
    // The index form needs no record.
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0:1"]);
    let r = bed.run("index");
    r.ok();
    assert_eq!(caps_in(&r), cap_nodes(&m, &[1]), "{}", r.stdout);
}

/// A mock host whose GPU 0 has a 2g.20gb GPU instance split into two compute instances and a
/// 1g.24gb GPU instance of a graphics profile (Blackwell's `+gfx`).
fn split_host(t: &TestDir) -> Host {
    let dir = t.join("host");
    let r = ok(&[
        "mock-host",
        "create",
        dir.to_str().unwrap(),
        "--gpus",
        "2",
        "--mig",
        "0=2g.20gb*2,1g.24gb+gfx",
    ]);
    assert!(
        r.stdout
            .contains("GPU 0 in MIG mode: 1c.2g.20gb, 1c.2g.20gb, 1g.24gb+gfx"),
        "{}",
        r.stdout
    );
    Host::at(&dir)
}

/// Two compute instances of one GPU instance are two MIG devices, each with the GPU instance's
/// node and its own compute instance's; a `+gfx` profile's device also gets its parent's DRM
/// nodes and by-path links, in `cdi generate` and through the shim (runc, crun), as NVIDIA's
/// generator gives them; not through the prestart hook (NVIDIA's legacy mode matches DRM nodes
/// to whole GPUs only).
#[test]
fn compute_instances_and_graphics_profiles() {
    let t = TestDir::new();
    let h = split_host(&t);
    let m = migs(&h);
    assert_eq!(
        m.iter().map(|x| (x.1, x.2, x.3)).collect::<Vec<_>>(),
        [(3, 30, 31), (3, 30, 32), (7, 66, 67)]
    );
    // The driver's procfs layout: one folder per compute instance.
    let caps = format!("{}/driver/nvidia/capabilities/gpu0/mig", h.proc_root());
    for (f, minor) in [
        ("gi3/access", 30),
        ("gi3/ci0/access", 31),
        ("gi3/ci1/access", 32),
        ("gi7/ci0/access", 67),
    ] {
        let text = std::fs::read_to_string(format!("{caps}/{f}")).unwrap();
        assert!(
            text.starts_with(&format!("DeviceFileMinor: {minor}\n")),
            "{f}: {text}"
        );
    }
    // nvidia-smi -L (through the fake NVML) names each compute instance.
    let smi = std::process::Command::new(format!("{}/usr/bin/nvidia-smi", h.driver_root()))
        .arg("-L")
        .env(
            "LD_LIBRARY_PATH",
            format!(
                "{}{}",
                h.driver_root(),
                h.manifest["lib_dir"].as_str().unwrap()
            ),
        )
        .output()
        .unwrap();
    let smi = String::from_utf8_lossy(&smi.stdout);
    for (i, name) in ["1c.2g.20gb", "1c.2g.20gb", "1g.24gb+gfx"]
        .iter()
        .enumerate()
    {
        assert!(
            smi.contains(&format!("MIG {name:<12}Device  {i}: (UUID: {})", m[i].0)),
            "{smi}"
        );
    }

    let (spec, _) = generate(&h, &[]);
    let bus0 = h.manifest["gpus"][0]["bus_id"]
        .as_str()
        .unwrap()
        .to_string();
    let caps_of = |d: &Value| -> Vec<String> {
        node_paths(d)
            .into_iter()
            .filter(|p| p.starts_with("/dev/nvidia-caps/"))
            .collect()
    };
    for (i, name) in ["0:0", "0:1", "0:2"].iter().enumerate() {
        for d in [device(&spec, name), device(&spec, &m[i].0)] {
            assert_eq!(
                caps_of(d),
                [
                    format!("/dev/nvidia-caps/nvidia-cap{}", m[i].2),
                    format!("/dev/nvidia-caps/nvidia-cap{}", m[i].3)
                ],
                "{name}"
            );
            let dri: Vec<String> = node_paths(d)
                .into_iter()
                .filter(|p| p.starts_with("/dev/dri/"))
                .collect();
            let hooks = d["containerEdits"]["hooks"].as_array().map_or(0, Vec::len);
            if i == 2 {
                assert_eq!(dri, ["/dev/dri/card0", "/dev/dri/renderD128"], "{d}");
                let hook = &d["containerEdits"]["hooks"][0]["args"];
                assert!(
                    hook.to_string().contains("create-symlinks")
                        && hook
                            .to_string()
                            .contains(&format!("/dev/dri/by-path/pci-{bus0}-card")),
                    "{d}"
                );
            } else {
                assert!(dri.is_empty() && hooks == 0, "{name}: {d}");
            }
            nodes_match_host(d, &h.dev_root());
        }
    }

    // nvidia-container-cli names each compute instance's files.
    let cli = t.join("nvidia-container-cli");
    std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
    let config = t.join("config.toml");
    h.write_cli_config(&config, "");
    for (dev, ci) in [("0:0", 0), ("0:1", 1)] {
        let out = std::process::Command::new(&cli)
            .args(["list", "--device", dev])
            .env("GPUCTK_CONFIG", &config)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && text.contains(&format!(
                    "/dev/nvidia0\n{caps}/gi3/access\n{caps}/gi3/ci{ci}/access\n/"
                ))
                && text.matches("/access\n").count() == 2,
            "{dev}: {text} {out:?}"
        );
    }

    for runtime in ["runc", "crun"] {
        let t = TestDir::new();
        let host = split_host(&t);
        let bed = crate::runtime::Bed::with_host(runtime, t, host);
        let cache = bed.t.join("nvml-cache.json");
        let cfg = std::fs::read_to_string(&bed.config).unwrap().replace(
            "[gpuctk]\n",
            &format!("[gpuctk]\nnvml-cache = \"{}\"\n", cache.display()),
        );
        std::fs::write(&bed.config, cfg).unwrap();
        record_nvml(&bed);
        let uuids = bed.host.uuids();
        let shell = |bed: &crate::runtime::Bed| {
            bed.edit(|s| {
                s["process"]["args"] = serde_json::json!([
                    "/bin/sh",
                    "-c",
                    format!(
                        "/usr/bin/gpuctk-probe; echo ---smi---; nvidia-smi -L; echo ---dri---; \
                         ls /dev/dri 2>&1 | sort; readlink /dev/dri/by-path/pci-{bus0}-card; true"
                    )
                ]);
            });
        };
        // (request, its compute instance's devices, DRM nodes)
        let cases: [(String, usize, &str); 4] = [
            ("0:1".into(), 1, ""),
            (m[0].0.clone(), 0, ""),
            (format!("MIG-{}/3/1", uuids[0]), 1, ""),
            ("0:2".into(), 2, "by-path\ncard0\nrenderD128\n../card0\n"),
        ];
        for (i, (value, which, dri)) in cases.iter().enumerate() {
            bed.set_env(&[
                &format!("NVIDIA_VISIBLE_DEVICES={value}"),
                "NVIDIA_DRIVER_CAPABILITIES=graphics,utility",
            ]);
            shell(&bed);
            let r = bed.run(&format!("split{i}"));
            r.ok();
            assert_eq!(r.gpus(), [0], "{value}: {}", r.stdout);
            assert_eq!(
                caps_in(&r),
                cap_nodes(&m, &[*which]),
                "{value}: {}",
                r.stdout
            );
            let (smi, listed) = r.smi.split_once("---dri---\n").unwrap();
            assert!(
                smi.contains(&uuids[0]) && smi.contains(&m[*which].0),
                "{value}: {smi}"
            );
            // No /dev/dri at all is no DRM node.
            let listed = if dri.is_empty() && listed.contains("No such file") {
                ""
            } else {
                listed
            };
            assert_eq!(listed, *dri, "{runtime} {value}: {}", r.stdout);
        }
        // Without `graphics` or `display`, no DRM node, as for a whole GPU.
        bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0:2"]);
        shell(&bed);
        let r = bed.run("nographics");
        r.ok();
        assert!(r.smi.contains("No such file"), "{}", r.stdout);
        // The prestart hook (legacy mode): no DRM node for a MIG device.
        let cfg = std::fs::read_to_string(&bed.config).unwrap().replace(
            "[nvidia-container-runtime]\n",
            "[nvidia-container-runtime]\nmode = \"legacy\"\n",
        );
        std::fs::write(&bed.config, cfg).unwrap();
        bed.set_env(&[
            "NVIDIA_VISIBLE_DEVICES=0:2",
            "NVIDIA_DRIVER_CAPABILITIES=graphics,utility",
        ]);
        shell(&bed);
        // The mock driver is not in the kernel's procfs: a tmpfs on /proc/driver stands for
        // the driver's folder, where the hook binds the capability files.
        bed.edit(|s| {
            s["mounts"].as_array_mut().unwrap().push(serde_json::json!({
                "destination": "/proc/driver",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "noexec", "mode=755"]
            }));
        });
        let r = bed.run("legacy");
        r.ok();
        assert_eq!(caps_in(&r), cap_nodes(&m, &[2]), "{}", r.stdout);
        assert!(r.smi.contains("No such file"), "{}", r.stdout);
    }
}

/// `gpuctk install` records NVML's answers where the installed runtime reads them, so that a
/// `MIG-<uuid>` request resolves right after install; uninstall removes the record.
#[test]
fn install_records_nvml_for_mig_uuids() {
    let t = TestDir::new();
    let h = mig_host(&t);
    let m = migs(&h);
    let root = t.join("host");
    std::fs::create_dir_all(root.join("run")).unwrap();
    let hs = root.to_str().unwrap();
    let proc_root = h.proc_root();
    let r = ok(&[
        "install",
        "--host-root",
        hs,
        "--proc-root",
        &proc_root,
        "--runtime",
        "containerd",
        "--restart-mode",
        "none",
    ]);
    let record = root.join("run/gpuctk/nvml-cache.json");
    assert!(
        r.stdout.contains("/run/gpuctk/nvml-cache.json"),
        "{}",
        r.stdout
    );
    let md = std::fs::metadata(&record).unwrap();
    assert_eq!((md.mode() & 0o777, md.uid()), (0o644, 0));
    // The runtime's view of this host, reading the record install wrote.
    let cli = t.join("nvidia-container-cli");
    std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
    let config = t.join("config.toml");
    h.write_cli_config(&config, &format!("nvml-cache = \"{}\"\n", record.display()));
    let out = std::process::Command::new(&cli)
        .args(["list", "--device", &m[2].0])
        .env("GPUCTK_CONFIG", &config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let caps = format!("{}/driver/nvidia/capabilities/gpu0/mig", h.proc_root());
    assert!(
        out.status.success()
            && text.contains(&format!(
                "{caps}/gi{g}/access\n{caps}/gi{g}/ci0/access\n",
                g = m[2].1
            )),
        "{text} {out:?}"
    );
    ok(&["uninstall", "--host-root", hs, "--restart-mode", "none"]);
    assert!(!record.exists() && !root.join("run/gpuctk").exists());
}

/// MIG devices from a generated spec consumed by real Podman (`--device nvidia.com/gpu=0:1`,
/// by UUID, a compute instance of a split GPU instance, a `+gfx` device): each container sees
/// its parent's node, exactly its two capability nodes, its DRM nodes where the profile has
/// graphics, and `nvidia-smi -L` lists exactly its partition.
#[test]
fn podman_runs_mig_devices_from_the_spec() {
    use crate::engines::{listed_nodes, podman_import, podman_with_spec_dir, Bed, LIST_NODES};
    let bed = Bed::with_host_flags(2, &["--mig", "0=2g.20gb*2,1g.24gb+gfx"]);
    let m = migs(&bed.host);
    let uuids = bed.host.uuids();
    let cdi = bed.t.join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    // As root on the host's roots: NVML's UUIDs are in the spec.
    let mut args = vec![
        "cdi".to_string(),
        "generate".into(),
        "--output".into(),
        cdi.join("nvidia.yaml").display().to_string(),
        "--nvidia-cdi-hook-path".into(),
        GPUCTK.into(),
    ];
    args.extend(bed.host.roots());
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    podman_import(&bed);
    let script = format!("{LIST_NODES}; echo ---smi---; nvidia-smi -L");
    let caps = |i: usize| {
        vec![
            format!("/dev/nvidia-caps/nvidia-cap{}", m[i].2),
            format!("/dev/nvidia-caps/nvidia-cap{}", m[i].3),
        ]
    };
    let dri = || vec!["/dev/dri/card0".to_string(), "/dev/dri/renderD128".into()];
    // (device, MIG device, whether DRM nodes come)
    let uuid1 = format!("nvidia.com/gpu={}", m[1].0);
    let cases: [(&str, usize, bool); 4] = [
        ("nvidia.com/gpu=0:1", 1, false),
        (&uuid1, 1, false),
        ("nvidia.com/gpu=0:0", 0, false),
        ("nvidia.com/gpu=0:2", 2, true),
    ];
    for (device, i, graphics) in cases {
        let r = podman_with_spec_dir(&bed, &cdi, &[device], &script);
        assert_eq!(r.code, 0, "{device}: {}\n{}", r.stdout, r.stderr);
        let (nodes, smi) = r.stdout.split_once("---smi---\n").unwrap();
        let got: Vec<String> = listed_nodes(nodes)
            .into_iter()
            .filter(|(p, _)| {
                p.starts_with("/dev/nvidia-caps/")
                    || p.starts_with("/dev/dri/")
                    || p == "/dev/nvidia0"
                    || p == "/dev/nvidia1"
            })
            .map(|(p, _)| p)
            .collect();
        let mut want = caps(i);
        if graphics {
            want.extend(dri());
        }
        want.push("/dev/nvidia0".into());
        want.sort();
        let mut got = got;
        got.sort();
        assert_eq!(got, want, "{device}: {}", r.stdout);
        assert_eq!(
            smi.lines()
                .filter_map(|l| l.split("(UUID: ").nth(1))
                .map(|u| u.trim_end_matches(')'))
                .collect::<Vec<_>>(),
            [uuids[0].as_str(), m[i].0.as_str()],
            "{device}: {smi}"
        );
    }
}
