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
    // `create` reads the whole file; a pass-through call (`state`) reads only what names the
    // runtime and falls back to the defaults, so a broken file cannot strand a container.
    let bundle = t.path().to_str().unwrap().to_string();
    let out = gpuctk(&["runtime", "exec", "--", "create", "--bundle", &bundle, "x"])
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

/// Regression (issue 8): given OCI states whose root was the host's `/`, `/usr/bin` or
/// `/usr/lib/<multiarch>`, the hooks wrote `/etc/ld.so.cache` and `/etc/ld.so.conf.d`, made links
/// in system folders and chmodded system directories; `nvidia-container-cli configure` refused
/// only the literal `/`. Every entry point now refuses such a root with one line.
///
/// The hooks run in a private mount namespace where each of those directories is an overlay
/// with a tmpfs upper layer: whatever a hook would write lands there, never on the machine, and
/// an empty upper layer proves nothing was attempted.
#[test]
fn host_directories_are_refused_as_container_roots() {
    let t = TestDir::new();
    let bin = t.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(GPUCTK, bin.join("nvidia-container-cli")).unwrap();
    std::os::unix::fs::symlink(GPUCTK, bin.join("nvidia-cdi-hook")).unwrap();
    let multiarch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    let mut script = String::from(
        "set -eu\nT=\"$1\"\nmount -t tmpfs tmpfs \"$T/ovl\"\n\
         for d in /etc /usr/bin /usr/sbin \"$MULTIARCH\"; do\n\
           n=$(echo \"$d\" | tr / _)\n\
           mkdir -p \"$T/ovl/$n/u\" \"$T/ovl/$n/w\"\n\
           mount -t overlay overlay -o \"lowerdir=$d,upperdir=$T/ovl/$n/u,workdir=$T/ovl/$n/w\" \"$d\"\n\
         done\nfail=0\n",
    );
    for (i, root) in ["/", "/usr/bin", multiarch.as_str(), "/usr/lib/../bin/.."]
        .iter()
        .enumerate()
    {
        let bundle = t.join(&format!("b{i}"));
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(
            bundle.join("config.json"),
            serde_json::json!({"ociVersion": "1.0.2", "root": {"path": root}}).to_string(),
        )
        .unwrap();
        let spec = bundle.join("config.json");
        let spec = spec.to_str().unwrap();
        for hook in [
            format!("update-ldcache --folder /usr/lib64 --folder {multiarch}"),
            "create-symlinks --link /etc/passwd::/usr/bin/gpuctk-evil --link x::/etc/gpuctk-evil"
                .to_string(),
            "chmod --mode 000 --path /usr/bin --path /etc".to_string(),
            "enable-cuda-compat --host-driver-version 470.1.1 --cuda-compat-container-root /usr/bin"
                .to_string(),
        ] {
            script.push_str(&format!(
                "if \"$T/bin/nvidia-cdi-hook\" {hook} --container-spec {spec} 2>\"$T/err\"; then echo \"ACCEPTED {root}: {hook}\"; fail=1; fi\n\
                 grep -q 'refusing to use it as a container root' \"$T/err\" || {{ echo \"NO MESSAGE {root}: {hook}: $(cat \"$T/err\")\"; fail=1; }}\n\
                 [ $(wc -l < \"$T/err\") = 1 ] || {{ echo \"NOT ONE LINE: $(cat \"$T/err\")\"; fail=1; }}\n"
            ));
        }
        script.push_str(&format!(
            "if \"$T/bin/nvidia-container-cli\" configure --pid=$$ --device=all --compute --utility {root} 2>\"$T/err\"; then echo \"CLI ACCEPTED {root}\"; fail=1; fi\n\
             grep -q 'refusing to use it as a container root' \"$T/err\" || {{ echo \"CLI NO MESSAGE {root}: $(cat \"$T/err\")\"; fail=1; }}\n"
        ));
    }
    script.push_str(
        "left=$(find \"$T\"/ovl/*/u -mindepth 1 | head -20)\n\
         [ -z \"$left\" ] || { echo \"WRITTEN ON THE HOST VIEW: $left\"; fail=1; }\n\
         exit $fail\n",
    );
    std::fs::create_dir_all(t.join("ovl")).unwrap();
    std::fs::write(t.join("empty.toml"), "").unwrap();
    let out = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(t.path())
        .env("MULTIARCH", &multiarch)
        .env("GPUCTK_CONFIG", t.join("empty.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A shim set-up with `/bin/true` as the low-level runtime: only our edits of `config.json`
/// matter to these tests.
fn shim_bed(t: &TestDir, h: &Host, mode: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let bin = t.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let shim = bin.join("nvidia-container-runtime");
    std::os::unix::fs::symlink(GPUCTK, &shim).unwrap();
    let specs = t.join("cdi");
    std::fs::create_dir_all(&specs).unwrap();
    let cfg = t.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[nvidia-container-cli]\nroot = \"{}\"\n\n[nvidia-container-runtime]\nmode = \"{mode}\"\nruntimes = [\"/bin/true\"]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{}\"]\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\n",
            h.driver_root(),
            specs.display(),
            h.dev_root(),
            h.proc_root()
        ),
    )
    .unwrap();
    (shim, cfg)
}

fn shim_create(shim: &std::path::Path, cfg: &std::path::Path, bundle: &std::path::Path) -> Run {
    std::process::Command::new(shim)
        .args(["create", "--bundle", bundle.to_str().unwrap(), "x"])
        .env("GPUCTK_CONFIG", cfg)
        .output()
        .unwrap()
        .into()
}

/// Regression (issue 8): a 96 MB `config.json` took more than 10 s before failing. It is now
/// refused from its size, before it is read.
#[test]
fn huge_config_json_fails_at_once() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let (shim, cfg) = shim_bed(&t, &h, "auto");
    let bundle = t.join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let f = std::fs::File::create(bundle.join("config.json")).unwrap();
    f.set_len(96 << 20).unwrap();
    let r = shim_create(&shim, &cfg, &bundle);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("config.json") && r.stderr.contains("more than the 16777216 allowed"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

/// Regression (issue 8): a 32 MB spec made `cdi list` use 558 MB; deeply nested YAML parsed in
/// quadratic time, and one such file in the spec dir stalled a shim `create` for a CDI name by
/// more than a minute. Now: size and nesting are checked before parsing, each refused file is
/// named, and files that cannot define the requested kind are not parsed at all.
#[test]
fn hostile_spec_files_are_capped_and_do_not_stall_requests() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let (shim, cfg) = shim_bed(&t, &h, "cdi");
    let specs = t.join("cdi");
    ok(&with(
        &[
            "cdi",
            "generate",
            "--output",
            specs.join("nvidia.yaml").to_str().unwrap(),
        ],
        &h.roots(),
    ));
    // 32 MB, sparse: refused from its size.
    std::fs::File::create(specs.join("huge.json"))
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    // 200 KB of nesting, once for another vendor and once claiming ours.
    let mut deep = String::from("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n");
    let mut i = 0;
    while deep.len() < 200 << 10 {
        deep.push_str(&" ".repeat(i % 4000 + 1));
        deep.push_str("- a:\n");
        i += 1;
    }
    std::fs::write(specs.join("deep-nvidia.yaml"), &deep).unwrap();
    std::fs::write(
        specs.join("deep-other.yaml"),
        deep.replace("nvidia.com/gpu", "example.com/x"),
    )
    .unwrap();
    let flow = format!(
        "{{\"cdiVersion\":\"0.5.0\",\"kind\":\"nvidia.com/gpu\",\"devices\":{}",
        "[".repeat(100_000)
    );
    std::fs::write(specs.join("deep-flow.json"), flow).unwrap();

    let r = ok(&["cdi", "list", "--spec-dir", specs.to_str().unwrap()]);
    assert!(r.stdout.contains("nvidia.com/gpu=0"), "{}", r.stdout);
    for (file, why) in [
        ("huge.json", "more than the 4194304 a CDI spec may have"),
        ("deep-nvidia.yaml", "nested more than 64 deep"),
        ("deep-other.yaml", "nested more than 64 deep"),
        ("deep-flow.json", "nested more than 64 deep"),
    ] {
        assert!(
            r.stderr
                .lines()
                .any(|l| l.contains(file) && l.contains(why)),
            "{file}: {}",
            r.stderr
        );
    }

    let bundle = t.join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(
        bundle.join("config.json"),
        serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"], "args": ["true"]},
        })
        .to_string(),
    )
    .unwrap();
    let r = shim_create(&shim, &cfg, &bundle);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The other vendor's file was not even parsed, so not reported.
    assert!(!r.stderr.contains("deep-other.yaml"), "{}", r.stderr);
    let edited = std::fs::read_to_string(bundle.join("config.json")).unwrap();
    assert!(edited.contains("/dev/nvidia1"), "{edited}");
}

/// Errors said `gpuctk:` when the binary ran as `nvidia-ctk`: scripts grep for the name they
/// called. Usage errors and command errors both carry the name it was invoked as.
#[test]
fn errors_name_the_personality() {
    let t = TestDir::new();
    let ctk = t.join("nvidia-ctk");
    std::os::unix::fs::symlink(GPUCTK, &ctk).unwrap();
    let missing = t.join("no-driver-root");
    let missing = missing.to_str().unwrap();
    for args in [
        &["no-such-command"][..],
        &["cdi", "generate", "--driver-root", missing],
    ] {
        let out = std::process::Command::new(&ctk)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.starts_with("nvidia-ctk: error: "), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// `--help` failed where NVIDIA's prints usage: `nvidia-container-cli --help` (and a command's
/// `--help`) and `nvidia-container-runtime-hook --help` (which said `unknown command ""`). Both
/// print their usage on stdout and exit 0; the shim's `create --help` is runc's (runtime.rs).
#[test]
fn help_works_under_every_personality() {
    let t = TestDir::new();
    for (name, args) in [
        ("nvidia-container-cli", &["--help"][..]),
        ("nvidia-container-cli", &["configure", "--help"]),
        ("nvidia-container-runtime-hook", &["--help"]),
        ("nvidia-container-runtime-hook", &["-help"]),
        ("nvidia-cdi-hook", &["--help"]),
        ("nvidia-ctk", &["--help"]),
    ] {
        let exe = t.join(name);
        if !exe.exists() {
            std::os::unix::fs::symlink(GPUCTK, &exe).unwrap();
        }
        let out = std::process::Command::new(&exe)
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.to_lowercase().contains("usage"),
            "{name} {args:?}: {text}"
        );
    }
}

/// Regression (issue 20): a flag that takes a value, given last (`configure ROOTFS --pid`, a
/// global `-r`), stepped past the end of the arguments and panicked (index out of
/// bounds; SIGABRT in a release build). Now one line naming the flag and exit 1.
#[test]
fn cli_value_flag_given_last_is_an_error_not_a_panic() {
    let t = TestDir::new();
    let exe = t.join("nvidia-container-cli");
    std::os::unix::fs::symlink(GPUCTK, &exe).unwrap();
    let config = t.join("config.toml");
    std::fs::write(&config, "").unwrap();
    for (args, flag) in [
        (&["configure", "/nonexistent-rootfs", "--pid"][..], "--pid"),
        (&["configure", "--compute", "-d"], "-d"),
        (&["-r"], "-r"),
    ] {
        let out = std::process::Command::new(&exe)
            .args(args)
            .env("GPUCTK_CONFIG", &config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("nvidia-container-cli: option '{flag}' requires an argument"),
            "{args:?}"
        );
    }
}

/// Regression (issue 17): the in-root walk resolved the whole prefix from the root again for
/// every component, so an image whose library folder is a chain of symlinks through a directory
/// 1,900 levels deep (each link thousands of `../a` components) made one `create-symlinks` link
/// cost about 40 s and three of them run past any limit. The walk is now linear and capped at
/// 4096 components: the hostile chain is refused at once with one line naming the path, and a
/// chain within the budget resolves where the kernel's resolution leads. `timeout 60` is a hang
/// guard, not a timing assertion: the old code needs minutes here.
#[test]
fn deep_symlink_chain_is_walked_linearly() {
    let t = TestDir::new();
    let bundle = t.join("bundle");
    let rootfs = bundle.join("rootfs");
    let deep = format!("x/{}", vec!["a"; 1900].join("/"));
    std::fs::create_dir_all(rootfs.join(&deep).join("lib")).unwrap();
    std::fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
    // Each link goes up and down again 818 times before it names the next one.
    let hops = "../a/".repeat(818);
    for k in 0..38 {
        let next = if k < 37 {
            format!("L{}", k + 1)
        } else {
            "lib".into()
        };
        std::os::unix::fs::symlink(
            format!("{hops}{next}"),
            rootfs.join(&deep).join(format!("L{k}")),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink(
        format!("/{deep}/L0"),
        rootfs.join("usr/lib/x86_64-linux-gnu"),
    )
    .unwrap();
    std::os::unix::fs::symlink(format!("/{deep}/L37"), rootfs.join("usr/lib/deep")).unwrap();
    std::fs::write(
        bundle.join("config.json"),
        r#"{"ociVersion": "1.0.2", "root": {"path": "rootfs"}}"#,
    )
    .unwrap();
    let spec = bundle.join("config.json");
    let hook = |links: &[&str]| -> Run {
        let mut c = std::process::Command::new("timeout");
        c.args(["60", GPUCTK, "hook", "create-symlinks"]);
        for l in links {
            c.args(["--link", l]);
        }
        c.arg("--container-spec").arg(&spec);
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
            .into()
    };

    let r = hook(&[
        "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
        "libnvidia-ml.so.1::/usr/lib/x86_64-linux-gnu/libnvidia-ml.so",
        "libnvidia-ptxjitcompiler.so.1::/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("/usr/lib/x86_64-linux-gnu")
            && r.stderr.contains("more than 4096 path components"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.trim_end().lines().count(), 1, "{}", r.stderr);

    let r = hook(&["libcuda.so.1::/usr/lib/deep/libcuda.so"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let link = rootfs.join(&deep).join("lib/libcuda.so");
    assert_eq!(
        std::fs::read_link(link).unwrap(),
        std::path::Path::new("libcuda.so.1")
    );
}

/// Regression (issue 17): in an image whose library folder holds more than 8192 entries,
/// update-ldcache skipped the whole folder, the driver libraries just injected into it
/// included, so the cache we wrote lacked `libcuda.so.1` and it did not load. The image's excess
/// is still skipped; the libraries delivered into the folder always go in: those runc mounted
/// there (the hook processes) and those it is about to mount (the shim, before it execs runc).
/// Under real runc, both ways; the container's probe dlopens libcuda, and the real `ldconfig -p`
/// reads it from the cache.
#[test]
fn driver_libraries_go_in_the_cache_of_an_over_full_library_folder() {
    for in_shim in [true, false] {
        let bed = crate::runtime::Bed::new("runc", "debian", 1);
        if !in_shim {
            bed.hooks_as_processes();
        }
        bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0"]);
        let lib_dir = bed.host.manifest["lib_dir"].as_str().unwrap().to_string();
        let r = bed.run_image("full", &|rootfs| {
            let dir = rootfs.join(lib_dir.trim_start_matches('/'));
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..=gpuctk_container::hooks::MAX_DIR_ENTRIES {
                std::fs::File::create(dir.join(format!("libfiller{i}.so.1"))).unwrap();
            }
        });
        r.ok();
        let (_, real) = r.libcuda().unwrap_or_else(|| {
            panic!(
                "libcuda did not load (in shim: {in_shim}): {}\n{}",
                r.stdout, r.stderr
            )
        });
        assert_eq!(real, format!("{lib_dir}/libcuda.so.570.124.06"));
        let cache = bed.bundle.join("rootfs/etc/ld.so.cache");
        let out = std::process::Command::new("ldconfig")
            .arg("-p")
            .arg("-C")
            .arg(&cache)
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&out.stdout);
        let want = format!("=> {lib_dir}/libcuda.so.1");
        assert!(
            listed
                .lines()
                .any(|l| l.trim_start().starts_with("libcuda.so.1 (") && l.ends_with(&want)),
            "in shim: {in_shim}: {listed}"
        );
    }
}
