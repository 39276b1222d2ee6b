//! `gpuctk demo`: walks the chain the way the seed document draws it, host first, on the real
//! driver when there is one and on a mock GPU host otherwise, so it always shows something real.
//!
//! The mock GPU host (and the probe image) come with the `mock` cargo feature, on by default; a
//! build without it runs the demo on a real driver only, in a busybox image with the host's glibc
//! where the injected `nvidia-smi -L` must list every GPU.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use gpuctk_cdi::registry::Registry;
use gpuctk_cdi::spec::{write_spec, ContainerEdits, Format};
use gpuctk_core::{build_spec, plan, CapabilitySet, PlanOptions, SpecOptions};
use gpuctk_host::{DiscoverOptions, Roots};

use crate::cli::DemoArgs;

struct Workdir {
    path: PathBuf,
    keep: bool,
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn step(n: u32, title: &str) {
    println!("\n[{n}] {title}");
}

pub fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let driver = Path::new("/proc/driver/nvidia/version").exists();
    #[cfg(feature = "mock")]
    let real = driver && !a.mock;
    #[cfg(not(feature = "mock"))]
    let real = {
        if !driver {
            anyhow::bail!(NO_MOCK_HOST);
        }
        true
    };
    let work = match &a.keep {
        Some(p) => {
            std::fs::create_dir_all(p).with_context(|| format!("--keep {}", p.display()))?;
            Workdir {
                path: p.clone(),
                keep: true,
            }
        }
        None => {
            let p = std::env::temp_dir().join(format!("gpuctk-demo-{}", std::process::id()));
            std::fs::create_dir_all(&p).with_context(|| format!("create {}", p.display()))?;
            Workdir {
                path: p,
                keep: false,
            }
        }
    };

    println!("gpuctk demo: docker run --gpus all <image> nvidia-smi, box by box");
    step(1, "host: NVIDIA driver, device nodes, driver libraries");
    let roots = if real {
        println!("    using this machine's driver (/proc/driver/nvidia/version exists)");
        Roots::default()
    } else {
        mock_host(&work.path, &a)?
    };
    let inv = crate::discover::discover(&roots, &DiscoverOptions::default())?;
    println!(
        "    driver {} (CUDA up to {}), {} GPU(s), libraries via {}",
        inv.driver_version,
        inv.cuda_version
            .map(|c| c.to_string())
            .unwrap_or_else(|| "?".into()),
        inv.gpus.len(),
        inv.library_source
    );
    for g in &inv.gpus {
        println!(
            "      GPU {}: {} {} at {}",
            g.index, g.model, g.uuid, g.bus_id
        );
    }
    println!(
        "      {} driver libraries, {} binaries, {} firmware files, {} control nodes",
        inv.libraries.len(),
        inv.binaries.len(),
        inv.firmware.len(),
        inv.control_nodes.len()
    );

    step(
        2,
        "gpuctk cdi generate: the CDI spec a container engine reads",
    );
    let plan = plan(
        &inv,
        &PlanOptions {
            hook_path: crate::self_exe::self_path(),
            capabilities: CapabilitySet::all(),
        },
    );
    let spec = build_spec(&inv, &plan, &SpecOptions::default())?;
    let spec_dir = work.path.join("cdi");
    std::fs::create_dir_all(&spec_dir)?;
    let spec_file = spec_dir.join("nvidia.yaml");
    write_spec(&spec_file, &spec, Format::Yaml)?;
    println!(
        "    {}: kind {}, cdiVersion {}, devices {}",
        spec_file.display(),
        spec.kind,
        spec.cdi_version,
        spec.devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );

    step(
        3,
        "the container asks for nvidia.com/gpu=all: the edits its config.json gets",
    );
    let reg = Registry::load(std::slice::from_ref(&spec_dir));
    let resolved = reg.resolve(&["nvidia.com/gpu=all"])?;
    let edits = resolved.edits;
    print_edits(&edits);

    step(
        4,
        "the engine's bundle: rootfs (a small image) + config.json asking NVIDIA_VISIBLE_DEVICES=all",
    );
    let bundle = work.path.join("bundle");
    let runc = crate::runc::find_runtime(
        &["runc".to_string(), "crun".to_string()],
        std::env::var_os("PATH").as_deref(),
    )
    .context("the demo runs a real container: install runc (./scripts/setup.sh)")?;
    make_bundle(&bundle, &runc)?;
    println!("    {} ({})", bundle.display(), image::WHAT);

    step(
        5,
        &format!(
            "nvidia-container-runtime run: edit config.json, then exec {}",
            runc.display()
        ),
    );
    let config = work.path.join("config.toml");
    let roots_toml = format!(
        "[nvidia-container-cli]\nroot = \"{}\"\n\n[nvidia-container-runtime]\nruntimes = [\"{}\"]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{}\"]\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\nhook-path = \"{}\"\n",
        roots.driver_root.display(),
        runc.display(),
        spec_dir.display(),
        roots.dev_root.display(),
        roots.proc_root.display(),
        crate::self_exe::self_path()
    );
    gpuctk_atomicfile::write(&config, roots_toml.as_bytes(), Some(0o644))?;
    let bin = work.path.join("bin");
    std::fs::create_dir_all(&bin)?;
    let shim = bin.join("nvidia-container-runtime");
    let _ = std::fs::remove_file(&shim);
    std::os::unix::fs::symlink(crate::self_exe::self_path(), &shim)?;
    let id = format!("gpuctk-demo-{}", std::process::id());
    let out = std::process::Command::new(&shim)
        .env("GPUCTK_CONFIG", &config)
        .arg("--root")
        .arg(work.path.join("runc-state"))
        .args(["run", "--bundle"])
        .arg(&bundle)
        .arg(&id)
        .output()
        .context("running nvidia-container-runtime")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let injected =
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(bundle.join("config.json"))?)?;
    println!(
        "    config.json now has {} devices, {} mounts, {} createContainer hooks",
        injected
            .pointer("/linux/devices")
            .and_then(|v| v.as_array())
            .map_or(0, |a| a.len()),
        injected
            .pointer("/mounts")
            .and_then(|v| v.as_array())
            .map_or(0, |a| a.len()),
        injected
            .pointer("/hooks/createContainer")
            .and_then(|v| v.as_array())
            .map_or(0, |a| a.len()),
    );

    step(6, image::INSIDE);
    for line in stdout.lines() {
        println!("    | {line}");
    }
    if !out.status.success() {
        for line in stderr.lines() {
            println!("    ! {line}");
        }
        anyhow::bail!("the container failed ({})", out.status);
    }
    let (summary, held) = image::judge(&stdout, inv.gpus.len());
    println!("\nthe chain holds: {summary}");
    if work.keep {
        println!("kept: {}", work.path.display());
    }
    if !held {
        anyhow::bail!("the container did not see the host's GPUs");
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds the mock GPU host under `work`.
#[cfg(feature = "mock")]
fn mock_host(work: &Path, a: &DemoArgs) -> anyhow::Result<Roots> {
    let dir = work.join("host");
    let mut cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
    cfg.gpus = a.gpus;
    let host = gpuctk_mockhost::create_host(&dir, &cfg).context("building the mock GPU host")?;
    println!(
        "    no NVIDIA driver here: built a mock GPU host in {} (real device nodes, real ELF libraries, real ld.so.cache)",
        dir.display()
    );
    Ok(Roots {
        driver_root: host.driver_root,
        dev_root: host.dev_root,
        proc_root: host.proc_root,
    })
}

/// What a build without the mock host says, in one line, where there is no driver.
#[cfg(not(feature = "mock"))]
const NO_MOCK_HOST: &str = "no NVIDIA driver here (/proc/driver/nvidia/version is missing) and \
    this build has no mock host: build gpuctk with the `mock` cargo feature (on by default, as in \
    `cargo run --release -p gpuctk -- demo`) to run the demo on a mock GPU host";

#[cfg(not(feature = "mock"))]
fn mock_host(_work: &Path, _a: &DemoArgs) -> anyhow::Result<Roots> {
    anyhow::bail!(NO_MOCK_HOST)
}

/// A bundle as an engine would lay it out: the mock image as rootfs and `runc spec`'s config
/// with the GPU request in the env.
fn make_bundle(bundle: &Path, runc: &Path) -> anyhow::Result<()> {
    image::create(&bundle.join("rootfs")).context("building the container rootfs")?;
    let st = std::process::Command::new(runc)
        .arg("spec")
        .arg("--bundle")
        .arg(bundle)
        .status()
        .with_context(|| format!("{} spec", runc.display()))?;
    if !st.success() {
        anyhow::bail!("{} spec failed", runc.display());
    }
    let path = bundle.join("config.json");
    let mut spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    spec["process"]["terminal"] = serde_json::json!(false);
    spec["process"]["args"] = serde_json::json!(["/bin/sh", "-c", image::COMMAND]);
    if let Some(env) = spec["process"]["env"].as_array_mut() {
        env.push(serde_json::json!("NVIDIA_VISIBLE_DEVICES=all"));
    }
    gpuctk_atomicfile::write(&path, &serde_json::to_vec_pretty(&spec)?, Some(0o644))?;
    Ok(())
}

fn print_edits(e: &ContainerEdits) {
    println!("    device nodes:");
    for n in &e.device_nodes {
        println!(
            "      {} ({}:{})",
            n.path,
            n.major.unwrap_or(0),
            n.minor.unwrap_or(0)
        );
    }
    println!("    mounts (read-only binds from the driver root):");
    for m in &e.mounts {
        println!("      {}", m.container_path);
    }
    println!("    createContainer hooks:");
    for h in &e.hooks {
        let args: Vec<&str> = h.args.iter().skip(1).map(String::as_str).collect();
        let shown = if args.len() > 5 {
            format!("{} ... ({} args)", args[..3].join(" "), args.len())
        } else {
            args.join(" ")
        };
        println!("      {shown}");
    }
    println!("    env: {}", e.env.join(" "));
}

/// The image with the mock host's probe: a small Debian-like rootfs whose
/// `/usr/bin/gpuctk-probe` opens every `/dev/nvidia*` and dlopens `libcuda.so.1`.
#[cfg(feature = "mock")]
mod image {
    use std::path::Path;

    pub const WHAT: &str = "rootfs with busybox, glibc and /usr/bin/gpuctk-probe";
    pub const INSIDE: &str = "inside the container: nvidia-smi -L (the injected driver) and the probe (open /dev/nvidia*, dlopen libcuda.so.1)";
    pub const COMMAND: &str = "nvidia-smi -L; /usr/bin/gpuctk-probe";

    pub fn create(rootfs: &Path) -> anyhow::Result<()> {
        gpuctk_mockhost::create_rootfs(rootfs, &gpuctk_mockhost::RootfsConfig::default())?;
        Ok(())
    }

    /// The summary line, and whether every GPU was usable and libcuda.so.1 loaded.
    pub fn judge(stdout: &str, gpus: usize) -> (String, bool) {
        let probe = gpuctk_mockhost::ProbeReport::parse(stdout);
        let seen = probe
            .devices
            .iter()
            .filter(|(p, r)| {
                p.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok()
                    && (r == "ENXIO" || r == "ok")
            })
            .count();
        let libcuda = matches!(
            probe.libcuda,
            Some(gpuctk_mockhost::LibraryLoad::Loaded { .. })
        );
        (
            format!(
                "{gpus} GPU(s) on the host, {seen} usable in the container, libcuda.so.1 {}",
                if libcuda { "loaded" } else { "NOT loaded" }
            ),
            seen != 0 && seen == gpus && libcuda,
        )
    }
}

/// The image of a build without the mock host: a static busybox and the host's glibc, enough
/// for the injected `nvidia-smi` to run.
#[cfg(not(feature = "mock"))]
mod image {
    use std::path::{Path, PathBuf};

    use anyhow::Context;

    pub const WHAT: &str = "rootfs with a static busybox and the host's glibc";
    pub const INSIDE: &str =
        "inside the container: nvidia-smi -L and ls /dev/nvidia* (the injected driver)";
    pub const COMMAND: &str = "nvidia-smi -L; ls /dev/nvidia*";

    const BUSYBOX: &str = "/bin/busybox";
    const APPLETS: &[&str] = &["sh", "ls", "cat", "echo", "env"];
    /// What nvidia-smi needs from glibc; ones a host does not have are left out.
    const GLIBC: &[&str] = &[
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
    ];

    fn loader_and_dirs() -> (&'static str, [&'static str; 4]) {
        if cfg!(target_arch = "aarch64") {
            (
                "/lib/ld-linux-aarch64.so.1",
                [
                    "/lib/aarch64-linux-gnu",
                    "/usr/lib/aarch64-linux-gnu",
                    "/lib64",
                    "/usr/lib64",
                ],
            )
        } else {
            (
                "/lib64/ld-linux-x86-64.so.2",
                [
                    "/lib/x86_64-linux-gnu",
                    "/usr/lib/x86_64-linux-gnu",
                    "/lib64",
                    "/usr/lib64",
                ],
            )
        }
    }

    pub fn create(rootfs: &Path) -> anyhow::Result<()> {
        for d in ["bin", "dev", "proc", "sys", "etc", "tmp", "root", "usr/bin"] {
            std::fs::create_dir_all(rootfs.join(d))
                .with_context(|| format!("create {}", rootfs.join(d).display()))?;
        }
        std::fs::copy(BUSYBOX, rootfs.join("bin/busybox")).with_context(|| {
            format!("{BUSYBOX}: the demo image needs a static busybox (./scripts/setup.sh)")
        })?;
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))?;
        }
        let (loader, dirs) = loader_and_dirs();
        copy_host_file(rootfs, Path::new(loader))?;
        for name in GLIBC {
            if let Some(p) = dirs
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| p.exists())
            {
                copy_host_file(rootfs, &p)?;
            }
        }
        Ok(())
    }

    /// Copies host file `logical` to its real path in `rootfs` and, where `logical` went through
    /// a link, links it there too, so the host's loader finds it where it looks on the host.
    fn copy_host_file(rootfs: &Path, logical: &Path) -> anyhow::Result<()> {
        let real = std::fs::canonicalize(logical).with_context(|| {
            format!(
                "{}: the demo image takes the host's glibc",
                logical.display()
            )
        })?;
        let inside = |p: &Path| -> PathBuf { rootfs.join(p.strip_prefix("/").unwrap_or(p)) };
        let dest = inside(&real);
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(&real, &dest).with_context(|| format!("copy {}", real.display()))?;
        let link = inside(logical);
        if link != dest && std::fs::symlink_metadata(&link).is_err() {
            if let Some(dir) = link.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::os::unix::fs::symlink(&real, &link)?;
        }
        Ok(())
    }

    /// The summary line, and whether `nvidia-smi -L` listed every GPU.
    pub fn judge(stdout: &str, gpus: usize) -> (String, bool) {
        let listed = stdout.lines().filter(|l| l.starts_with("GPU ")).count();
        (
            format!("{gpus} GPU(s) on the host, {listed} listed by nvidia-smi -L in the container"),
            listed != 0 && listed == gpus,
        )
    }
}
