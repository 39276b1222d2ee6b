//! Who may ask for GPUs: on a node whose CRI engine runs pods, an unprivileged container that
//! sets `NVIDIA_VISIBLE_DEVICES` gets the GPUs it names, whatever the device plugin allocated,
//! while `accept-nvidia-visible-devices-envvar-when-unprivileged` is at NVIDIA's default (true).

use super::engines::EngineFacts;
use super::report::Checks;
use crate::config::Config;

pub(super) fn check_policy(cfg: &Config, engines: &EngineFacts, c: &mut Checks) {
    const G: &str = "toolkit";
    const N: &str = "unprivileged-envvar";
    if engines.cri.is_empty() {
        c.ok(
            G,
            N,
            "no CRI engine configured here (not a Kubernetes node): who may set NVIDIA_VISIBLE_DEVICES is the engine users' business",
        );
        return;
    }
    let cri = engines.cri.join(" and ");
    let run = if engines.cri.len() > 1 { "run" } else { "runs" };
    if cfg.policy.accept_envvar_unprivileged {
        c.warn(
            G,
            N,
            format!(
                "accept-nvidia-visible-devices-envvar-when-unprivileged is true (NVIDIA's default) on a node where {cri} {run} pods: any pod that sets NVIDIA_VISIBLE_DEVICES=all gets every GPU of the node, past the device plugin's allocation and the GPU quota"
            ),
            "set accept-nvidia-visible-devices-envvar-when-unprivileged = false and accept-nvidia-visible-devices-as-volume-mounts = true in config.toml (nvidia-ctk config --in-place --set accept-nvidia-visible-devices-envvar-when-unprivileged=false --set accept-nvidia-visible-devices-as-volume-mounts), and run the device plugin with deviceListStrategy volume-mounts (or cdi-annotations)",
        );
    } else {
        c.ok(
            G,
            N,
            format!(
                "accept-nvidia-visible-devices-envvar-when-unprivileged is false: pods of {cri} get GPUs as the device plugin allocates them{}",
                if cfg.policy.accept_volume_mounts {
                    " (volume mounts accepted)"
                } else {
                    " (volume mounts not accepted: the device plugin must use cdi-annotations or CDI devices)"
                }
            ),
        );
    }
}
