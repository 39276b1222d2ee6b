//! The device nodes under the dev root, their `/dev/char` links and the persistence daemon.

use gpuctk_host::checks::{self, CharLink, NodeState};
use gpuctk_host::Roots;

use super::report::Checks;

/// One node to check: name under /dev, the (major, minor) it must have.
pub(super) fn check_node(
    c: &mut Checks,
    roots: &Roots,
    name: &str,
    expected: (u32, u32),
    what: &str,
    create: &str,
    good: &mut Vec<(String, u32, u32)>,
) {
    const G: &str = "devices";
    let (host, state) = checks::char_node(&roots.dev_root, name);
    let (maj, min) = expected;
    let mknod = format!("mknod -m 666 {} c {maj} {min}", host.display());
    match state {
        NodeState::Char { major, minor } if (major, minor) == expected => {
            c.ok(G, name, format!("{} is {major}:{minor} ({what})", host.display()));
            good.push((name.to_string(), major, minor));
        }
        NodeState::Char { major, minor } => c.fail(
            G,
            name,
            format!(
                "{} is {major}:{minor}, but {what} is {maj}:{min} (per {}): a stale node, containers get the wrong device",
                host.display(),
                roots.proc_root.join("devices").display()
            ),
            format!("recreate it: rm {} && {mknod}", host.display()),
        ),
        NodeState::NotCharDevice => c.fail(
            G,
            name,
            format!("{} is not a character device ({what})", host.display()),
            format!("replace it: rm -rf {} && {mknod}", host.display()),
        ),
        NodeState::Missing(e) => c.fail(
            G,
            name,
            format!("{}: {e} ({what})", host.display()),
            format!("{create}, or by hand: {mknod}"),
        ),
    }
}

pub(super) fn check_devices(roots: &Roots, c: &mut Checks) {
    const G: &str = "devices";
    let majors = match checks::char_majors(&roots.proc_root) {
        Ok(m) => m,
        Err(e) => {
            c.fail(
                G,
                "proc-devices",
                format!("{}: {e}", roots.proc_root.join("devices").display()),
                "check --proc-root",
            );
            Vec::new()
        }
    };
    let nvidia_major = gpuctk_host::procfs::nvidia_major(&majors);
    let uvm_major = gpuctk_host::procfs::uvm_major(&majors);
    let mut good = Vec::new();

    match checks::gpu_informations(&roots.proc_root) {
        Err(e) => c.fail(
            G,
            "gpus",
            format!(
                "{}: {e}: the driver reports no GPUs",
                roots.proc_root.join("driver/nvidia/gpus").display()
            ),
            "check that the GPUs are bound to the nvidia driver (lspci -k) and that the module loaded without errors (dmesg)",
        ),
        Ok(infos) => {
            let mut index = 0;
            for info in infos {
                match info {
                    Err(e) => c.fail(
                        G,
                        "gpus",
                        e.to_string(),
                        "this file is not the NVIDIA module's: check --proc-root",
                    ),
                    Ok(info) => {
                        let what = format!("GPU {index}, {} at {}", info.uuid, info.bus_id);
                        check_node(
                            c,
                            roots,
                            &format!("nvidia{}", info.minor),
                            (nvidia_major, info.minor),
                            &what,
                            &format!("create it: nvidia-modprobe -c {}", info.minor),
                            &mut good,
                        );
                        index += 1;
                    }
                }
            }
        }
    }
    check_node(
        c,
        roots,
        "nvidiactl",
        (nvidia_major, 255),
        "the control node",
        "create it: nvidia-modprobe",
        &mut good,
    );
    if !matches!(
        checks::char_node(&roots.dev_root, "nvidia-modeset").1,
        NodeState::Missing(_)
    ) {
        check_node(
            c,
            roots,
            "nvidia-modeset",
            (nvidia_major, 254),
            "the modeset node",
            "create it: nvidia-modprobe -m",
            &mut good,
        );
    }
    match uvm_major {
        None => c.fail(
            G,
            "nvidia-uvm",
            format!(
                "no nvidia-uvm in {}: the nvidia-uvm module is not loaded, and CUDA needs it",
                roots.proc_root.join("devices").display()
            ),
            "load it: modprobe nvidia-uvm (or nvidia-modprobe -u -c 0)",
        ),
        Some(m) => {
            check_node(
                c,
                roots,
                "nvidia-uvm",
                (m, 0),
                "the nvidia-uvm node",
                "create it: nvidia-modprobe -u -c 0",
                &mut good,
            );
            if !matches!(
                checks::char_node(&roots.dev_root, "nvidia-uvm-tools").1,
                NodeState::Missing(_)
            ) {
                check_node(
                    c,
                    roots,
                    "nvidia-uvm-tools",
                    (m, 1),
                    "the nvidia-uvm-tools node",
                    "create it: nvidia-modprobe -u -c 0",
                    &mut good,
                );
            }
        }
    }

    // /dev/char links, for the nodes that are right.
    let mut bad = Vec::new();
    let mut fixes = Vec::new();
    for (name, major, minor) in &good {
        let (host, state) = checks::dev_char_link(&roots.dev_root, *major, *minor);
        match state {
            CharLink::Ok { .. } => {}
            CharLink::Missing => {
                bad.push(format!("{} missing", host.display()));
                fixes.push(format!("ln -s ../{name} {}", host.display()));
            }
            CharLink::Wrong(why) => {
                bad.push(format!("{} {why}", host.display()));
                fixes.push(format!("ln -sfn ../{name} {}", host.display()));
            }
        }
    }
    if good.is_empty() {
        // Nothing to link; the node checks said why.
    } else if bad.is_empty() {
        c.ok(
            G,
            "char-links",
            format!("{} /dev/char/M:m links lead to their nodes", good.len()),
        );
    } else {
        c.fail(
            G,
            "char-links",
            format!(
                "{}: without them a systemd daemon-reload takes the GPUs away from running containers (systemd finds devices by /dev/char/M:m to re-apply cgroup rules)",
                bad.join(", ")
            ),
            format!(
                "for now: mkdir -p {dir} && {}; to keep them across reboots and driver reloads, install a udev rule, e.g. /lib/udev/rules.d/71-nvidia-dev-char.rules with ACTION==\"add\", DEVPATH==\"/bus/pci/drivers/nvidia\", RUN+=\"/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all\" (gpuctk answers to nvidia-ctk; `gpuctk system create-dev-char-symlinks` makes them now)",
                fixes.join(" && "),
                dir = roots.dev_root.join("dev/char").display()
            ),
        );
    }

    let socket = [
        "run/nvidia-persistenced/socket",
        "var/run/nvidia-persistenced/socket",
    ]
    .iter()
    .map(|p| roots.driver_root.join(p))
    .find(|p| {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
    });
    match socket {
        Some(p) => c.ok(G, "persistenced", format!("{} is a socket", p.display())),
        None => c.warn(
            G,
            "persistenced",
            format!(
                "no socket at {}: nvidia-persistenced is not running",
                roots
                    .driver_root
                    .join("run/nvidia-persistenced/socket")
                    .display()
            ),
            "start it (systemctl enable --now nvidia-persistenced): without it the driver tears GPU state down when the last client exits, so every container start pays the initialisation again",
        ),
    }
}
