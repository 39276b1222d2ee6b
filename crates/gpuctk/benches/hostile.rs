//! `cargo bench -p gpuctk --bench hostile`: what the worst input an image controls adds to a
//! container start (issue 8's target: at most 50 ms). Each hostile image is the benign one plus
//! one attack at (or just under) our cap; both arms run the same code the same way, in process
//! and as a whole `gpuctk hook update-ldcache` process, and the table gives the median of each and
//! the difference. Needs root (the mock host mknods its device nodes).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpuctk_container::hooks::{
    MAX_CACHE, MAX_CANDIDATES, MAX_COMPAT_DIRS, MAX_COMPAT_DIR_ENTRIES, MAX_CONF_FILES,
};
use gpuctk_container::{update_ldcache, Root};
use gpuctk_core::request::{parse_request, Delivery, Policy, MAX_DEVICE_ITEMS};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<F: FnMut()>(iters: usize, mut f: F) -> Duration {
    f();
    median(
        (0..iters)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// A bundle whose rootfs is the mock image with the driver libraries bind-mounted in
/// `/usr/lib64` (copied here: the hook only sees files).
fn benign(dir: &Path, host: &gpuctk_mockhost::MockHost) -> PathBuf {
    let rootfs = dir.join("rootfs");
    gpuctk_mockhost::create_rootfs(&rootfs, &gpuctk_mockhost::RootfsConfig::default())
        .expect("rootfs");
    let lib = rootfs.join("usr/lib64");
    std::fs::create_dir_all(&lib).unwrap();
    for p in host.library_paths() {
        std::fs::copy(&p, lib.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.join("config.json"),
        r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"}}"#,
    )
    .unwrap();
    dir.to_path_buf()
}

fn variant(base: &Path, dir: &Path, attack: impl FnOnce(&Path)) -> PathBuf {
    sh(&format!("cp -a {} {}", base.display(), dir.display()));
    attack(&dir.join("rootfs"));
    dir.to_path_buf()
}

fn main() {
    let exe = env!("CARGO_BIN_EXE_gpuctk");
    let tmp = tempfile::tempdir().expect("temp dir");
    let cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
    let host =
        gpuctk_mockhost::create_host(&tmp.path().join("host"), &cfg).expect("mock host (root)");
    let base = benign(&tmp.path().join("benign"), &host);

    let mut cases: Vec<(String, PathBuf)> = vec![("benign image".into(), base.clone())];
    let mut add = |name: String, attack: Box<dyn FnOnce(&Path)>| {
        let d = tmp.path().join(format!("v{}", cases.len()));
        cases.push((name, variant(&base, &d, attack)));
    };
    add(
        "4 x 1 MB 00-compat-*.conf".into(),
        Box::new(|r| {
            let text: String = (0..80_000).map(|i| format!("/opt/c/d{i}\n")).collect();
            for n in 0..4 {
                std::fs::write(
                    r.join(format!("etc/ld.so.conf.d/00-compat-{n}.conf")),
                    &text,
                )
                .unwrap();
            }
        }),
    );
    add(
        format!("{MAX_COMPAT_DIRS} compat dirs of {MAX_COMPAT_DIR_ENTRIES} lib*.so"),
        Box::new(|r| {
            let mut conf = String::new();
            for d in 0..MAX_COMPAT_DIRS {
                let dir = r.join(format!("opt/c{d}"));
                std::fs::create_dir_all(&dir).unwrap();
                for i in 0..MAX_COMPAT_DIR_ENTRIES {
                    std::fs::write(dir.join(format!("libx{i}.so.1")), b"junk").unwrap();
                }
                conf.push_str(&format!("/opt/c{d}\n"));
            }
            std::fs::write(r.join("etc/ld.so.conf.d/00-compat-x.conf"), conf).unwrap();
        }),
    );
    add(
        format!("{MAX_CONF_FILES}+ conf files"),
        Box::new(|r| {
            for n in 0..(MAX_CONF_FILES + 100) {
                std::fs::write(r.join(format!("etc/ld.so.conf.d/z{n:04}.conf")), "/usr/x\n")
                    .unwrap();
            }
        }),
    );
    add(
        format!("ld.so.cache near the {} KiB cap", MAX_CACHE >> 10),
        Box::new(|r| {
            let mut c = gpuctk_ldcache::Cache::new();
            let mut i = 0;
            while (c.entries.len() as u64 + 1) * 68 < MAX_CACHE {
                c.entries.push(gpuctk_ldcache::Entry::new(
                    format!("libjunk{i}.so.1"),
                    format!("/usr/lib/x86_64-linux-gnu/libjunk{i}.so.1"),
                    gpuctk_ldcache::NATIVE_FLAGS,
                ));
                i += 1;
            }
            let bytes = c.to_bytes();
            assert!((bytes.len() as u64) < MAX_CACHE, "{}", bytes.len());
            std::fs::write(r.join("etc/ld.so.cache"), bytes).unwrap();
        }),
    );
    add(
        format!("{} junk lib*.so.1 in the folder", MAX_CANDIDATES - 100),
        Box::new(|r| {
            let lib = r.join("usr/lib64");
            for i in 0..(MAX_CANDIDATES - 100) {
                std::fs::write(lib.join(format!("libjunk{i}.so.1")), b"not an ELF file").unwrap();
            }
        }),
    );
    add(
        format!("{} lib*.so symlinks in the folder", MAX_CANDIDATES - 100),
        Box::new(|r| {
            let lib = r.join("usr/lib64");
            for i in 0..(MAX_CANDIDATES - 100) {
                std::os::unix::fs::symlink(
                    format!("../../usr/lib64/../lib64/libjunk-target{}.so", i % 7),
                    lib.join(format!("libjunk{i}.so.1")),
                )
                .unwrap();
            }
        }),
    );
    add(
        "100,000 names in the folder (over the cap)".into(),
        Box::new(|r| {
            let lib = r.join("usr/lib64");
            for i in 0..100_000 {
                std::fs::File::create(lib.join(format!("libjunk{i}.so.1"))).unwrap();
            }
        }),
    );
    add(
        "sparse 100 GB lib*.so in the folder".into(),
        Box::new(|r| {
            let f = std::fs::File::create(r.join("usr/lib64/libhuge.so.1")).unwrap();
            f.set_len(100 << 30).unwrap();
        }),
    );

    println!(
        "{:<44} {:>12} {:>10} {:>14} {:>10}",
        "image", "in process", "extra", "hook process", "extra"
    );
    let mut base_in = Duration::ZERO;
    let mut base_proc = Duration::ZERO;
    let mut worst = (0.0f64, String::new());
    for (name, bundle) in &cases {
        let root = Root::open(bundle.join("rootfs")).unwrap();
        let folders = ["/usr/lib64".to_string()];
        let inproc = time(15, || {
            update_ldcache(&root, &folders).expect("update_ldcache");
        });
        let spec = bundle.join("config.json");
        let proc_t = time(15, || {
            let st = Command::new(exe)
                .args(["hook", "update-ldcache", "--folder", "/usr/lib64"])
                .arg("--container-spec")
                .arg(&spec)
                .status()
                .unwrap();
            assert!(st.success());
        });
        if name == "benign image" {
            base_in = inproc;
            base_proc = proc_t;
        }
        let extra = ms(proc_t) - ms(base_proc);
        if extra > worst.0 {
            worst = (extra, name.clone());
        }
        println!(
            "{:<44} {:>9.3} ms {:>+7.3} ms {:>11.3} ms {:>+7.3} ms",
            name,
            ms(inproc),
            ms(inproc) - ms(base_in),
            ms(proc_t),
            extra
        );
    }

    // Requests: config.json env values the image sets.
    let policy = Policy::default();
    let config = |env: Vec<String>| serde_json::json!({"process": {"env": env}});
    let benign_req = config(vec!["NVIDIA_VISIBLE_DEVICES=0,1".into()]);
    let max_list: Vec<String> = (0..MAX_DEVICE_ITEMS).map(|i| i.to_string()).collect();
    let over: Vec<String> = (0..150_000).map(|i| i.to_string()).collect();
    let many_env: Vec<String> = (0..100_000).map(|i| format!("V{}=x", i % 50_000)).collect();
    let reqs = [
        ("benign request", benign_req),
        (
            "4096 distinct indices (accepted)",
            config(vec![format!(
                "NVIDIA_VISIBLE_DEVICES={}",
                max_list.join(",")
            )]),
        ),
        (
            "150,000 indices (refused)",
            config(vec![format!("NVIDIA_VISIBLE_DEVICES={}", over.join(","))]),
        ),
        ("100,000 env entries", config(many_env)),
    ];
    let mut base_req = Duration::ZERO;
    for (i, (name, c)) in reqs.iter().enumerate() {
        let t = time(30, || {
            let _ = std::hint::black_box(parse_request(c, &policy, Delivery::Shim));
        });
        if i == 0 {
            base_req = t;
        }
        println!(
            "{:<44} {:>9.3} ms {:>+7.3} ms",
            name,
            ms(t),
            ms(t) - ms(base_req)
        );
    }
    println!(
        "worst image-controlled input: {} (+{:.3} ms per container start; target 50 ms)",
        worst.1, worst.0
    );
}
