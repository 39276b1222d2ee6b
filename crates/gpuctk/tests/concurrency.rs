//! Concurrency: 50 `runtime configure` runs at once on one engine config lose no runtime; 50
//! containers created at once through the shim (just in time and from a static CDI spec, mixed
//! requests) and 50 run at once through the legacy prestart hook each get exactly their GPUs,
//! with every `config.json` whole and nothing left behind (runc's list, mounts); and a CDI spec
//! rewritten over and over by `cdi generate --output` while 50 readers (`cdi list`, the shim
//! resolving a CDI name, plain reads) use it: each sees the old or the new spec, never a part.
//! Parallelism is bounded (8 at a time) to suit a 2-core CI machine; each test runs in well
//! under a minute.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gpuctk_mockhost::ProbeReport;
use serde_json::{json, Value};

use crate::runtime::Bed;
use crate::util::*;

/// How many of our processes run at once.
const WORKERS: usize = 8;

/// How many times each of the 50 spec readers reads.
const READS: usize = 4;

/// `f(0..n)`, `workers` at a time, results in order.
fn par<T: Send>(n: usize, workers: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let slots: Vec<std::sync::Mutex<&mut Option<T>>> =
        out.iter_mut().map(std::sync::Mutex::new).collect();
    std::thread::scope(|s| {
        for _ in 0..workers.min(n) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let v = f(i);
                **slots[i].lock().unwrap() = Some(v);
            });
        }
    });
    drop(slots);
    out.into_iter().map(Option::unwrap).collect()
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engines/tests/data")
        .join(name)
}

/// The runtime names registered in `text`, the file holding them for `engine`.
fn runtime_names(engine: &str, text: &str) -> BTreeSet<String> {
    match engine {
        "docker" => {
            let v: Value = serde_json::from_str(text).unwrap();
            v["runtimes"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        }
        _ => {
            let doc: toml_edit::DocumentMut = text.parse().unwrap();
            let path: &[&str] = if engine == "crio" {
                &["crio", "runtime", "runtimes"]
            } else {
                &[
                    "plugins",
                    "io.containerd.grpc.v1.cri",
                    "containerd",
                    "runtimes",
                ]
            };
            let mut t = doc.as_item();
            for k in path {
                t = &t[k];
            }
            t.as_table()
                .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
                .unwrap_or_default()
        }
    }
}

#[test]
fn fifty_runtime_configures_at_once_lose_nothing() {
    // Regression: 44 of 50 docker, 47 containerd and 49 CRI-O runs exited 0 with their change
    // gone.
    let t = TestDir::new();
    let started = Instant::now();
    let mut runs = 0;
    for (engine, fixture, file) in [
        ("docker", "daemon.json", "daemon.json"),
        ("containerd", "containerd-v2.toml", "config.toml"),
        ("crio", "crio.conf", "crio.conf"),
    ] {
        let dir = t.join(engine);
        fs::create_dir_all(&dir).unwrap();
        let config = dir.join(file);
        let original = fs::read(data(fixture)).unwrap();
        fs::write(&config, &original).unwrap();
        let holder = if engine == "crio" {
            dir.join("crio.conf.d/99-nvidia.toml")
        } else {
            config.clone()
        };
        let before = fs::read_to_string(&holder)
            .map(|s| runtime_names(engine, &s))
            .unwrap_or_default();
        for remove in [false, true] {
            // All 50 at once: each process waits on the lock, none is serialized by us.
            let children: Vec<_> = (0..50)
                .map(|i| {
                    gpuctk(&[
                        "runtime",
                        if remove { "unconfigure" } else { "configure" },
                        &format!("--runtime={engine}"),
                        "--config",
                        config.to_str().unwrap(),
                        "--nvidia-runtime-name",
                        &format!("rt{i}"),
                        "--nvidia-runtime-path",
                        "/usr/bin/nvidia-container-runtime",
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
                })
                .collect();
            for c in children {
                let out = c.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "{engine}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                runs += 1;
            }
            let names = fs::read_to_string(&holder)
                .map(|s| runtime_names(engine, &s))
                .unwrap_or_default();
            let ours: BTreeSet<String> = names.difference(&before).cloned().collect();
            if remove {
                assert!(
                    ours.is_empty(),
                    "{engine}: left after unconfigure: {ours:?}"
                );
            } else {
                let want: BTreeSet<String> = (0..50).map(|i| format!("rt{i}")).collect();
                let lost: Vec<_> = want.difference(&ours).collect();
                assert!(
                    lost.is_empty(),
                    "{engine}: lost {} updates: {lost:?}",
                    lost.len()
                );
            }
        }
        if engine == "crio" {
            // The drop-in was ours from the start: gone once its last runtime is, and never
            // a backup or a temp file inside crio.conf.d.
            assert!(!holder.exists());
            assert!(names_in(&dir.join("crio.conf.d")).is_empty());
            assert_eq!(
                fs::read(&config).unwrap(),
                original,
                "crio.conf is only read"
            );
        } else {
            assert_eq!(
                fs::read(&config).unwrap(),
                original,
                "{engine}: 50 configures and 50 unconfigures give the original bytes back"
            );
            assert_eq!(
                fs::read(dir.join(format!("{file}.bak"))).unwrap(),
                original,
                "{engine}: the .bak is the user's original"
            );
        }
        let temps: Vec<_> = names_in(&dir)
            .into_iter()
            .filter(|n| gpuctk_atomicfile::is_temp_name(std::ffi::OsStr::new(n)))
            .collect();
        assert!(temps.is_empty(), "{engine}: {temps:?}");
    }
    eprintln!(
        "concurrency: {runs} runtime configure/unconfigure runs, 50 at a time, in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// What a container asks for, and the GPU indices it must get (`None`: nothing at all, the
/// spec left untouched).
fn request(i: usize, gpus: usize) -> (String, Option<Vec<usize>>) {
    let a = i % gpus;
    let b = (i + 1) % gpus;
    match i % 6 {
        0 => (
            "NVIDIA_VISIBLE_DEVICES=all".into(),
            Some((0..gpus).collect()),
        ),
        1 => (format!("NVIDIA_VISIBLE_DEVICES={a}"), Some(vec![a])),
        2 => {
            let mut v = vec![a, b];
            v.sort();
            (format!("NVIDIA_VISIBLE_DEVICES={a},{b}"), Some(v))
        }
        3 => ("NVIDIA_VISIBLE_DEVICES=none".into(), Some(vec![])),
        4 => (
            format!("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu={a}"),
            Some(vec![a]),
        ),
        _ => ("NVIDIA_VISIBLE_DEVICES=void".into(), None),
    }
}

/// A bundle of its own for container `i`: a hard-linked copy of the bed's rootfs and the bed's
/// `config.json` with `env` and `edit` applied. Returns the bundle and its config bytes.
fn bundle(bed: &Bed, i: usize, env: &str, edit: impl Fn(&mut Value)) -> (PathBuf, Vec<u8>) {
    let b = bed.t.join(&format!("c{i}"));
    fs::create_dir_all(&b).unwrap();
    let st = Command::new("cp")
        .arg("-al")
        .arg(bed.bundle.join("rootfs"))
        .arg(b.join("rootfs"))
        .status()
        .unwrap();
    assert!(st.success());
    let mut spec: Value =
        serde_json::from_slice(&fs::read(bed.t.join("pristine.json")).unwrap()).unwrap();
    let e = spec["process"]["env"].as_array_mut().unwrap();
    e.retain(|v| !v.as_str().unwrap().starts_with("NVIDIA_"));
    e.push(json!(env));
    spec["root"]["path"] = json!(b.join("rootfs"));
    edit(&mut spec);
    let bytes = serde_json::to_vec_pretty(&spec).unwrap();
    fs::write(b.join("config.json"), &bytes).unwrap();
    (b, bytes)
}

/// The GPU indices a spec gives the container (`/dev/nvidiaN` in `linux.devices`).
fn gpus_in_spec(spec: &Value) -> Vec<usize> {
    let mut v: Vec<usize> = spec["linux"]["devices"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|d| {
                    d["path"]
                        .as_str()?
                        .strip_prefix("/dev/nvidia")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn id(bed: &Bed, what: &str, i: usize) -> String {
    format!(
        "{}-{what}{i}",
        bed.t.path().file_name().unwrap().to_string_lossy()
    )
}

#[test]
fn fifty_containers_created_at_once_through_the_shim() {
    let started = Instant::now();
    let bed = Bed::new("runc", "debian", 4);
    // The static spec the CDI-name requests resolve from.
    let spec = bed.cdi_dir().join("nvidia.yaml");
    bed.host.write_spec(&spec);
    let mounts = mounts_under(bed.t.path());
    let bundles: Vec<_> = (0..50)
        .map(|i| bundle(&bed, i, &request(i, 4).0, |_| {}))
        .collect();
    let results = par(50, WORKERS, |i| {
        let err = bed.t.join(&format!("c{i}.stderr"));
        let st = bed
            .shim_cmd(&[
                "create",
                "--bundle",
                bundles[i].0.to_str().unwrap(),
                &id(&bed, "shim", i),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        (st.success(), fs::read_to_string(&err).unwrap())
    });
    for (i, (ok, stderr)) in results.iter().enumerate() {
        assert!(ok, "container {i} ({}): {stderr}", request(i, 4).0);
    }
    let listed = runtime_list("runc", &bed.state_root);
    assert_eq!(listed.len(), 50, "{listed:?}");
    for (i, (b, before)) in bundles.iter().enumerate() {
        let (req, want) = request(i, 4);
        let bytes = fs::read(b.join("config.json")).unwrap();
        let spec: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("container {i}: config.json corrupted: {e}"));
        match want {
            None => assert_eq!(&bytes, before, "{req}: spec left as it was"),
            Some(want) => {
                assert_eq!(gpus_in_spec(&spec), want, "container {i}: {req}");
                assert!(
                    spec["linux"]["devices"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|d| d["path"] == "/dev/nvidiactl"),
                    "{req}"
                );
            }
        }
    }
    par(50, WORKERS, |i| {
        let st = Command::new("runc")
            .arg("--root")
            .arg(&bed.state_root)
            .args(["delete", "--force", &id(&bed, "shim", i)])
            .status()
            .unwrap();
        assert!(st.success());
    });
    assert!(runtime_list("runc", &bed.state_root).is_empty());
    assert_eq!(mounts_under(bed.t.path()), mounts, "no mount left");
    eprintln!(
        "concurrency: 50 containers created through the shim ({WORKERS} at a time) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn fifty_containers_run_at_once_through_the_prestart_hook() {
    let started = Instant::now();
    let bed = Bed::new("runc", "debian", 4);
    let hook = bed.t.join("bin/nvidia-container-runtime-hook");
    std::os::unix::fs::symlink(GPUCTK, &hook).unwrap();
    let mounts = mounts_under(bed.t.path());
    let bundles: Vec<_> = (0..50)
        .map(|i| {
            // The legacy hook reads no CDI names: those requests become plain indices.
            let (req, _) = request(i, 4);
            let req = req.replace("nvidia.com/gpu=", "");
            bundle(&bed, i, &req, |s| {
                s["process"]["args"] = json!(["/usr/bin/gpuctk-probe"]);
                s["hooks"] = json!({"prestart": [{
                    "path": hook,
                    "args": ["nvidia-container-runtime-hook", "-config", bed.config, "prestart"],
                }]});
            })
        })
        .collect();
    let results = par(50, WORKERS, |i| {
        Command::new("runc")
            .arg("--root")
            .arg(&bed.state_root)
            .args(["run", "--bundle"])
            .arg(&bundles[i].0)
            .arg(id(&bed, "hook", i))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    });
    for (i, out) in results.iter().enumerate() {
        let (req, want) = request(i, 4);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "container {i} ({req}): {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let probe = ProbeReport::parse(&stdout);
        let mut got = Vec::new();
        for (path, result) in &probe.devices {
            if let Some(n) = path
                .strip_prefix("/dev/nvidia")
                .and_then(|n| n.parse::<usize>().ok())
            {
                assert_eq!(
                    result, "ENXIO",
                    "container {i}: {path} not allowed: {stdout}"
                );
                got.push(n);
            }
        }
        got.sort();
        assert_eq!(
            got,
            want.unwrap_or_default(),
            "container {i} ({req}): {stdout}"
        );
        // The hook works in the live container; the bundle's spec is never rewritten.
        assert_eq!(
            fs::read(bundles[i].0.join("config.json")).unwrap(),
            bundles[i].1,
            "container {i}: config.json changed"
        );
    }
    assert!(runtime_list("runc", &bed.state_root).is_empty());
    assert_eq!(mounts_under(bed.t.path()), mounts, "no mount left");
    eprintln!(
        "concurrency: 50 containers run through the prestart hook ({WORKERS} at a time) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn readers_see_the_old_or_the_new_spec_while_it_is_rewritten() {
    let started = Instant::now();
    let bed = Bed::new("runc", "debian", 4);
    let small = mock_host(&bed.t, "host2", 2, "570.124.06", "debian");
    let dir = bed.cdi_dir();
    let spec = dir.join("nvidia.yaml");
    let generate = |host: &Host| {
        host.write_spec(&spec);
    };
    // The shim resolving a CDI name in a bundle of its own, runc replaced by `true`.
    let cfg = fs::read_to_string(&bed.config)
        .unwrap()
        .replace("runtimes = [\"runc\"]", "runtimes = [\"/bin/true\"]");
    fs::write(&bed.config, cfg).unwrap();
    let resolve = |i: usize| -> (bool, Vec<u8>, String) {
        let b = bed.t.join(&format!("r{i}"));
        fs::create_dir_all(&b).unwrap();
        let mut s: Value =
            serde_json::from_slice(&fs::read(bed.t.join("pristine.json")).unwrap()).unwrap();
        s["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"));
        s["root"]["path"] = json!(bed.bundle.join("rootfs"));
        fs::write(b.join("config.json"), serde_json::to_vec(&s).unwrap()).unwrap();
        let out = bed
            .shim_cmd(&["create", "--bundle", b.to_str().unwrap(), &format!("r{i}")])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            fs::read(b.join("config.json")).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let list = || {
        let r = run(&["cdi", "list", "--spec-dir", dir.to_str().unwrap()]);
        (r.code, r.stdout)
    };
    // What each reader sees of each version.
    let mut versions = Vec::new();
    for host in [&small, &bed.host] {
        generate(host);
        let (okay, config, stderr) = resolve(1000 + versions.len());
        assert!(okay, "{stderr}");
        versions.push((fs::read(&spec).unwrap(), list(), config));
    }
    assert_ne!(versions[0].0, versions[1].0);
    assert_ne!(versions[0].1, versions[1].1);

    let done = AtomicBool::new(false);
    let rewrites = AtomicUsize::new(0);
    let plain_reads = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                generate(if n % 2 == 0 { &small } else { &bed.host });
                n += 1;
                rewrites.store(n, Ordering::Relaxed);
            }
        });
        // A loader's plain open-and-read, as fast as it goes.
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let b = fs::read(&spec).unwrap();
                assert!(
                    versions.iter().any(|v| v.0 == b),
                    "a reader saw {} bytes that are neither spec",
                    b.len()
                );
                plain_reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        let results = par(50, WORKERS - 2, |i| {
            // Wait for the writer to be going.
            while rewrites.load(Ordering::Relaxed) == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut bad = Vec::new();
            for round in 0..READS {
                if i % 2 == 0 {
                    let got = list();
                    if !versions.iter().any(|v| v.1 == got) {
                        bad.push(format!("round {round}: {got:?}"));
                    }
                } else {
                    let (okay, config, stderr) = resolve(i * READS + round);
                    if !(okay && versions.iter().any(|v| v.2 == config)) {
                        bad.push(format!("round {round}: {stderr}"));
                    }
                }
            }
            (i, bad)
        });
        done.store(true, Ordering::Relaxed);
        for (i, bad) in results {
            assert!(
                bad.is_empty(),
                "reader {i} saw a spec that is neither version: {bad:?}"
            );
        }
    });
    let n = rewrites.load(Ordering::Relaxed);
    assert!(n >= 5, "only {n} rewrites happened while the readers ran");
    let temps: Vec<_> = names_in(&dir)
        .into_iter()
        .filter(|n| n != "nvidia.yaml")
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
    eprintln!(
        "concurrency: 50 readers (25 `cdi list`, 25 shim resolutions) reading {READS} times each, and {} plain reads, during {n} rewrites of the spec, in {:.1}s",
        plain_reads.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}
