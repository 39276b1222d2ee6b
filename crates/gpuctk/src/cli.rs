//! The command line, as clap definitions only. Flag names follow `nvidia-ctk` so scripts written
//! for it keep working; our additions are marked in `docs/cli.md`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tracing::Level;

/// GPU container toolkit: makes the host's NVIDIA GPUs usable in containers.
#[derive(Debug, Parser)]
#[command(
    name = "gpuctk",
    version,
    disable_version_flag = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Print the version (`-v` as nvidia-ctk has it)
    #[arg(short = 'v', long = "version", action = clap::ArgAction::Version)]
    pub version: Option<bool>,
    /// The toolkit's config.toml that `cdi generate` and `info` take the driver root from
    /// (nvidia-ctk's flag) [default: the one the runtime reads]
    #[arg(long, env = "NVIDIA_CTK_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags accepted before or after any command.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// More log output on stderr (repeat for more; `-v` is --version, as in nvidia-ctk)
    #[arg(long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Debug logging (nvidia-ctk's flag)
    #[arg(short = 'd', long, global = true, env = "NVIDIA_CTK_DEBUG", value_parser = clap::builder::FalseyValueParser::new())]
    pub debug: bool,
    /// Only errors on stderr
    #[arg(long, global = true, env = "NVIDIA_CTK_QUIET", value_parser = clap::builder::FalseyValueParser::new())]
    pub quiet: bool,
}

impl GlobalArgs {
    /// The log level these flags ask for.
    pub fn level(&self) -> Level {
        if self.quiet {
            Level::ERROR
        } else if self.debug || self.verbose >= 2 {
            Level::DEBUG
        } else if self.verbose == 1 {
            Level::INFO
        } else {
            Level::WARN
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate, list and validate CDI specs
    #[command(subcommand)]
    Cdi(CdiCommand),
    /// Show what the host has: driver, GPUs, device nodes, driver files
    Info(InfoArgs),
    /// Check the chain on this host: driver, device nodes, toolkit, engines, an image
    Doctor(Box<DoctorArgs>),
    /// Build a fake GPU host or a container rootfs for tests and demos
    #[cfg(feature = "mock")]
    #[command(subcommand, name = "mock-host")]
    MockHost(MockHostCommand),
    #[cfg_attr(
        feature = "mock",
        doc = "Show the whole chain, host to container, on this machine (or a mock GPU host)"
    )]
    #[cfg_attr(
        not(feature = "mock"),
        doc = "Show the whole chain, host to container, on this machine's driver"
    )]
    Demo(DemoArgs),
    /// The runtime shim (what nvidia-container-runtime runs)
    #[command(subcommand)]
    Runtime(RuntimeCommand),
    /// The OCI hooks of our CDI specs (what nvidia-cdi-hook runs): gpuctk hook NAME --help
    Hook(PassArgs),
    /// Print or edit config.toml (nvidia-ctk config)
    Config(ConfigCmdArgs),
    /// Device nodes and /dev/char links (nvidia-ctk system)
    #[command(subcommand)]
    System(SystemCommand),
    /// Print a shell completion script: gpuctk completion bash > /etc/bash_completion.d/gpuctk
    Completion(CompletionArgs),
    /// Write the man pages, one per command and personality, into DIR (for packagers)
    #[command(hide = true)]
    Man(ManArgs),
    /// Install gpuctk into a host from a container (a DaemonSet): binary, config, CDI spec, runtime registration
    Install(Box<InstallArgs>),
    /// Remove what install put into the host and restore the engine's config
    Uninstall(UninstallArgs),
    /// Ask the driver root's NVML about the GPUs and MIG devices and print the answer as JSON
    /// (the helper a statically linked gpuctk runs, since it cannot dlopen)
    #[command(hide = true)]
    NvmlQuery(NvmlQueryArgs),
}

/// `nvml-query`.
#[derive(Debug, Args)]
pub struct NvmlQueryArgs {
    #[command(flatten)]
    pub roots: RootArgs,
}

/// `completion SHELL`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell the script is for
    #[arg(value_enum)]
    pub shell: ShellArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShellArg {
    Bash,
    Zsh,
    Fish,
}

/// `man --output DIR`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory the pages go to (created if missing)
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: PathBuf,
}

/// `--restart-mode`: how the engine is told to read its new config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RestartMode {
    /// SIGHUP to the engine's process (found through its socket or --pid-file; needs hostPID)
    Signal,
    /// `systemctl restart UNIT`, run chrooted into the host root
    Systemd,
    /// Leave the engine alone and say what to do
    None,
}

/// Where the host is and how its engine is reloaded: shared by install and uninstall.
#[derive(Debug, Args, Clone)]
pub struct HostArgs {
    /// Where the host's / is mounted in this container (the DaemonSet mounts it at /host); every path below is resolved under it
    #[arg(long, env = "HOST_ROOT", value_name = "DIR")]
    pub host_root: PathBuf,
    /// Where the toolkit goes on the host
    #[arg(
        long,
        env = "TOOLKIT_DIR",
        default_value = "/usr/local/nvidia/toolkit",
        value_name = "DIR"
    )]
    pub toolkit_dir: PathBuf,
    /// How the engine reads its new config: signal (SIGHUP), systemd (systemctl restart) or none [default: signal; systemd for crio]
    #[arg(long, env = "RESTART_MODE", value_enum)]
    pub restart_mode: Option<RestartMode>,
    /// The engine's API socket, whose peer is the process to signal [default: /run/containerd/containerd.sock, /var/run/docker.sock, /var/run/crio/crio.sock]
    #[arg(long, env = "RUNTIME_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// A pid file naming the process to signal (instead of --socket)
    #[arg(long, env = "RUNTIME_PID_FILE", value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// The systemd unit to restart [default: containerd, docker, crio]
    #[arg(long, env = "RUNTIME_SYSTEMD_UNIT", value_name = "UNIT")]
    pub systemd_unit: Option<String>,
    /// The systemctl to run, looked up in the host root
    #[arg(long, default_value = "systemctl", value_name = "PATH")]
    pub systemctl: String,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// The engine to register with
    #[arg(long, env = "RUNTIME", value_enum, default_value = "containerd")]
    pub runtime: EngineArg,
    /// Its config file, as the host sees it [default: /etc/containerd/config.toml, /etc/docker/daemon.json, /etc/crio/crio.conf]
    #[arg(long, env = "RUNTIME_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The drop-in the runtimes go to, as the host sees it [default: /etc/containerd/conf.d/99-nvidia.toml, /etc/crio/crio.conf.d/99-nvidia.toml; docker: none]
    #[arg(long, env = "RUNTIME_DROP_IN_CONFIG", value_name = "FILE")]
    pub drop_in_config: Option<PathBuf>,
    /// The main runtime's name; NAME-cdi and NAME-legacy are registered too
    #[arg(
        long = "nvidia-runtime-name",
        default_value = "nvidia",
        value_name = "NAME"
    )]
    pub runtime_name: String,
    /// Make the main runtime the engine's default
    #[arg(long, env = "RUNTIME_SET_AS_DEFAULT", value_parser = clap::builder::FalseyValueParser::new())]
    pub set_as_default: bool,
    /// Turn on the engine's CDI support (docker, containerd)
    #[arg(long = "cdi.enabled", env = "CDI_ENABLED", value_parser = clap::builder::FalseyValueParser::new())]
    pub enable_cdi: bool,
    /// Root of the driver installation, as the host sees it (/run/nvidia/driver with a containerized driver)
    #[arg(
        long,
        env = "NVIDIA_DRIVER_ROOT",
        default_value = "/",
        value_name = "DIR"
    )]
    pub driver_root: PathBuf,
    /// Root under which /dev/nvidia* are, as the host sees it [default: the driver root]
    #[arg(long, env = "NVIDIA_DEV_ROOT", value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// Where the host's procfs is mounted in this container (hostPID gives the host's at /proc)
    #[arg(
        long,
        env = "GPUCTK_PROC_ROOT",
        default_value = "/proc",
        value_name = "DIR"
    )]
    pub proc_root: PathBuf,
    /// Where the CDI spec goes, as the host sees it
    #[arg(
        long,
        env = "CDI_SPEC_DIR",
        default_value = "/var/run/cdi",
        value_name = "DIR"
    )]
    pub cdi_spec_dir: PathBuf,
    /// After installing, stay running until SIGTERM or SIGINT (a DaemonSet's container), then exit 0
    #[arg(long, env = "INSTALL_WAIT", value_parser = clap::builder::FalseyValueParser::new())]
    pub wait: bool,
    /// With --wait: uninstall when the signal comes (the GPU Operator's cleanup on exit)
    #[arg(long, env = "UNINSTALL_ON_EXIT", value_parser = clap::builder::FalseyValueParser::new())]
    pub uninstall_on_exit: bool,
}

#[derive(Debug, Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub host: HostArgs,
}

#[derive(Debug, Subcommand)]
pub enum SystemCommand {
    /// Create /dev/char/MAJOR:MINOR links to the NVIDIA device nodes (without them a systemd daemon-reload takes GPUs away from running containers)
    CreateDevCharSymlinks(DevCharArgs),
    /// Create the NVIDIA device nodes the loaded driver implies
    CreateDeviceNodes(DeviceNodesArgs),
}

/// Flags shared by the system commands.
#[derive(Debug, Args)]
pub struct SystemRoots {
    /// Root of the driver installation, where /dev is
    #[arg(
        long,
        visible_alias = "root",
        env = "NVIDIA_DRIVER_ROOT",
        default_value = "/",
        value_name = "DIR"
    )]
    pub driver_root: PathBuf,
    /// Where procfs is mounted (gpuctk's flag)
    #[arg(
        long,
        env = "GPUCTK_PROC_ROOT",
        default_value = "/proc",
        value_name = "DIR"
    )]
    pub proc_root: PathBuf,
    /// Load the NVIDIA kernel modules first (modprobe nvidia, nvidia-uvm, nvidia-modeset)
    #[arg(long, env = "LOAD_KERNEL_MODULES")]
    pub load_kernel_modules: bool,
    /// The modprobe to run
    #[arg(long, default_value = "modprobe", value_name = "PATH")]
    pub modprobe: String,
    /// Say what would be done, do nothing
    #[arg(long, env = "DRY_RUN")]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct DevCharArgs {
    /// Where the links go
    #[arg(
        long,
        env = "DEV_CHAR_PATH",
        default_value = "/dev/char",
        value_name = "DIR"
    )]
    pub dev_char_path: PathBuf,
    /// Link every node the driver implies (GPUs in procfs and the control nodes), present or not
    #[arg(long, env = "CREATE_ALL")]
    pub create_all: bool,
    /// With --create-all: also create the missing control device nodes
    #[arg(long, env = "CREATE_DEVICE_NODES")]
    pub create_device_nodes: bool,
    /// Then keep watching the driver root's /dev and link each new NVIDIA node as it appears, until SIGINT or SIGTERM
    #[arg(long, env = "WATCH")]
    pub watch: bool,
    #[command(flatten)]
    pub roots: SystemRoots,
}

#[derive(Debug, Args)]
pub struct DeviceNodesArgs {
    /// Root under which /dev is [default: the driver root]
    #[arg(long, env = "NVIDIA_DEV_ROOT", value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// The control nodes: nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools
    #[arg(long)]
    pub control_devices: bool,
    /// The GPUs' nodes, /dev/nvidiaN for each GPU procfs lists (gpuctk's flag; with neither flag, both)
    #[arg(long)]
    pub gpu_devices: bool,
    #[command(flatten)]
    pub roots: SystemRoots,
}

/// `config [--set KEY[=VALUE]]... [--in-place | --output FILE]`, or `config default`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ConfigCmdArgs {
    /// The config file to read [default: the one the runtime reads]
    #[arg(
        long = "config-file",
        alias = "config",
        short = 'c',
        value_name = "FILE"
    )]
    pub config_file: Option<PathBuf>,
    /// Set KEY (dotted, e.g. nvidia-container-cli.no-cgroups) to VALUE; a bare KEY means true; lists are separated by ':' (repeatable)
    #[arg(long = "set", value_name = "KEY[=VALUE]")]
    pub set: Vec<String>,
    /// The separator of list values in --set
    #[arg(long, default_value = ":", hide = true)]
    pub set_list_separator: String,
    /// Write the result back to the config file (atomically)
    #[arg(long, short = 'i')]
    pub in_place: bool,
    /// Write the result to FILE instead of stdout
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "in_place")]
    pub output: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<ConfigCommand>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the default config.toml
    Default {
        /// Write it to FILE instead of stdout
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RuntimeCommand {
    /// Run as the runtime shim: gpuctk runtime exec -- RUNC-ARGS...
    Exec(PassArgs),
    /// Register the runtime with docker, containerd or CRI-O (nvidia-ctk runtime configure)
    Configure(ConfigureArgs),
    /// Remove exactly what configure added (gpuctk's)
    Unconfigure(ConfigureArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    Docker,
    Containerd,
    Crio,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConfigSource {
    File,
    Command,
}

#[derive(Debug, Args)]
pub struct ConfigureArgs {
    /// The engine to configure
    #[arg(long, value_enum, default_value = "docker")]
    pub runtime: EngineArg,
    /// Its config file [default: /etc/docker/daemon.json, /etc/containerd/config.toml, /etc/crio/crio.conf]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Put the runtime in this drop-in file instead of the main config (containerd: the main config gets an import of it; CRI-O: instead of crio.conf.d/99-nvidia.toml; not for docker)
    #[arg(long = "drop-in-config", value_name = "FILE")]
    pub drop_in_config: Option<PathBuf>,
    /// The runtime's name in the engine
    #[arg(
        long = "nvidia-runtime-name",
        alias = "runtime-name",
        default_value = "nvidia"
    )]
    pub runtime_name: String,
    /// The nvidia-container-runtime to register [default: the one in PATH, else next to this binary]
    #[arg(
        long = "nvidia-runtime-path",
        alias = "runtime-path",
        value_name = "PATH"
    )]
    pub runtime_path: Option<String>,
    /// Make it the engine's default runtime
    #[arg(long = "set-as-default", alias = "nvidia-set-as-default")]
    pub set_as_default: bool,
    /// Turn on the engine's CDI support: docker's features.cdi, containerd's enable_cdi (not CRI-O, whose CDI is always on)
    #[arg(long = "cdi.enabled", visible_aliases = ["cdi.enable", "enable-cdi"])]
    pub enable_cdi: bool,
    /// The engine's executable that --config-source command runs (`containerd config dump`, `crio status config`) [default: containerd, crio in PATH; ignored for docker]
    #[arg(long, value_name = "PATH")]
    pub executable_path: Option<PathBuf>,
    /// Print a unified diff and write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Machine-readable output: {"changes": [{"file", "action", "diff"}]} (with --dry-run, what would change)
    #[arg(long)]
    pub json: bool,
    /// Read the current config from the file, or from the engine (`containerd config dump`, `crio status config`)
    #[arg(long, value_enum, default_value = "file")]
    pub config_source: ConfigSource,
    /// Register a runtime in the engine's config, or write an OCI hook file (podman's hooks dir) that runs the prestart hook
    #[arg(long, value_enum, default_value = "config-file")]
    pub config_mode: ConfigMode,
    /// The OCI hook file (--config-mode oci-hook)
    #[arg(long, value_name = "FILE", default_value = gpuctk_engines::ocihook::DEFAULT_PATH)]
    pub oci_hook_path: PathBuf,
    /// The prestart hook the OCI hook file runs (--config-mode oci-hook)
    #[arg(long, value_name = "PATH", default_value = gpuctk_engines::ocihook::DEFAULT_HOOK)]
    pub nvidia_runtime_hook_path: String,
}

/// `--config-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConfigMode {
    /// Edit the engine's config file
    ConfigFile,
    /// Write an OCI hook file
    OciHook,
    /// Same as oci-hook (NVIDIA's older name)
    Hook,
}

/// Arguments handed on untouched.
#[derive(Debug, Args)]
pub struct PassArgs {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

/// The three roots discovery reads.
#[derive(Debug, Args, Clone)]
pub struct RootArgs {
    /// Root of the driver installation (/run/nvidia/driver with the GPU Operator) [default: config.toml's [nvidia-container-cli] root, else /]
    #[arg(long, env = "NVIDIA_CTK_DRIVER_ROOT", value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Root under which /dev/nvidia* live [default: the driver root]
    #[arg(long, env = "NVIDIA_CTK_DEV_ROOT", value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// Where procfs is mounted (gpuctk's flag)
    #[arg(
        long,
        env = "GPUCTK_PROC_ROOT",
        default_value = "/proc",
        value_name = "DIR"
    )]
    pub proc_root: PathBuf,
    /// Extra library directory inside the driver root, searched before the defaults (repeatable)
    #[arg(
        long = "library-search-path",
        env = "NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub library_search_paths: Vec<String>,
    /// The toolkit's config.toml the driver root defaults from (the same as `nvidia-ctk --config FILE`) [default: the one the runtime reads]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// That config.toml once read: a command asks for it up to six times (roots, NVML
    /// helper and cache, snapshots).
    #[arg(skip)]
    pub loaded_config: std::sync::OnceLock<crate::config::Config>,
}

#[derive(Debug, Subcommand)]
pub enum CdiCommand {
    /// Write a CDI spec for the GPUs of this host
    Generate(Box<GenerateArgs>),
    /// Rewrite a spec: cdi transform root --from DIR --to DIR
    #[command(subcommand)]
    Transform(TransformCommand),
    /// List the CDI device names found in the spec dirs
    List(ListArgs),
    /// Check CDI spec files: schema and meaning; each error names file, device and field
    Validate(ValidateArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecFormat {
    Yaml,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Strategy {
    Index,
    Uuid,
    TypeIndex,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub roots: RootArgs,
    /// Write the spec here (atomically); stdout when absent or "-"
    #[arg(
        long,
        short = 'o',
        env = "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH",
        value_name = "FILE"
    )]
    pub output: Option<PathBuf>,
    /// Output format [default: from the file extension, else yaml]
    #[arg(long, env = "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT", value_enum)]
    pub format: Option<SpecFormat>,
    /// How to name devices (repeatable)
    #[arg(long = "device-name-strategy", env = "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES", value_enum, value_delimiter = ',', default_values = ["index", "uuid"])]
    pub strategies: Vec<Strategy>,
    /// Do not add the "all" device
    #[arg(long, env = "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_all_device: bool,
    /// Only these GPUs: all, an index or a UUID (repeatable); none: one device `none` with no GPU, for the driver alone, and no "all" device
    #[arg(
        long = "device-id",
        visible_alias = "devices",
        alias = "device-ids",
        alias = "device",
        env = "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS",
        value_delimiter = ',',
        value_name = "ID"
    )]
    pub device_ids: Vec<String>,
    /// CDI vendor
    #[arg(
        long,
        visible_alias = "cdi-vendor",
        env = "NVIDIA_CTK_CDI_GENERATE_VENDOR",
        default_value = "nvidia.com"
    )]
    pub vendor: String,
    /// CDI class
    #[arg(
        long,
        visible_alias = "cdi-class",
        env = "NVIDIA_CTK_CDI_GENERATE_CLASS",
        default_value = "gpu"
    )]
    pub class: String,
    /// Also record the driver version as the annotation gpuctk/driver-version (needs cdiVersion 0.6.0)
    #[arg(long)]
    pub driver_version_annotation: bool,
    /// Put the group of each device node that is not open to all (the DRM card nodes' video) in additionalGids, so non-root container users can open it (needs cdiVersion 0.7.0, which Podman before 5 refuses)
    #[arg(long)]
    pub additional_gids: bool,
    /// Write the spec even when the driver root holds no libcuda of the running driver (no container could use CUDA with it)
    #[arg(long)]
    pub allow_missing_libcuda: bool,
    /// The hook binary written into the spec's hooks [default: nvidia-cdi-hook in PATH, else /usr/bin/nvidia-cdi-hook]
    #[arg(
        long = "nvidia-cdi-hook-path",
        visible_alias = "nvidia-ctk-path",
        env = "NVIDIA_CTK_CDI_HOOK_PATH",
        value_name = "PATH"
    )]
    pub hook_path: Option<String>,
    /// Discovery mode: auto or nvml (gpuctk reads procfs for both), management (one `all` device with every NVIDIA device node, for monitoring agents), csv (Jetson: the CSV files' entries; auto picks it on a Jetson), or wsl (WSL2: /dev/dxg and the driver store; auto picks it on WSL2); NVIDIA's imex, gds, mofed, gdrcopy and nvswitch are refused with a message
    #[arg(
        long,
        visible_alias = "discovery-mode",
        env = "NVIDIA_CTK_CDI_GENERATE_MODE",
        default_value = "auto",
        value_name = "MODE"
    )]
    pub mode: String,
    /// Leave out a hook: create-symlinks, enable-cuda-compat, update-ldcache, or all (repeatable or comma list; NVIDIA's other hook names are accepted, gpuctk does not write them)
    #[arg(
        long = "disable-hook",
        visible_alias = "disable-hooks",
        env = "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub disable_hooks: Vec<String>,
    /// Write an optional hook: gpuctk's hooks are all written by default, so only a name it does not write (a warning) changes anything
    #[arg(
        long = "enable-hook",
        visible_alias = "enable-hooks",
        env = "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub enable_hooks: Vec<String>,
    /// NVIDIA's nvcdi feature flags: accepted, none applies to gpuctk's spec (a warning names each)
    #[arg(
        long = "feature-flag",
        visible_alias = "feature-flags",
        env = "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS",
        value_delimiter = ',',
        value_name = "FLAG"
    )]
    pub feature_flags: Vec<String>,
    /// Where to look for the loaders' vendor files (EGL, Vulkan, OpenCL ICDs) inside the driver root, instead of /etc, /usr/local/share, /usr/share
    #[arg(
        long = "config-search-path",
        env = "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub config_search_paths: Vec<String>,
    /// The ldconfig NVIDIA's update-ldcache hook runs: accepted, unused (the cache is written natively)
    #[arg(
        long,
        env = "NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH",
        value_name = "PATH"
    )]
    pub ldconfig_path: Option<String>,
    /// CSV mode's files (Jetson) [default: devices.csv, drivers.csv, l4t.csv in /etc/nvidia-container-runtime/host-files-for-container.d]
    #[arg(
        long = "csv.file",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_FILES",
        value_delimiter = ',',
        value_name = "FILE"
    )]
    pub csv_files: Vec<String>,
    /// CSV mode's ignore patterns (Jetson): `sym` entries whose path matches (`**/NAME` matches the file name) are left out
    #[arg(
        long = "csv.ignore-pattern",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS",
        value_delimiter = ',',
        value_name = "PATTERN"
    )]
    pub csv_ignore_patterns: Vec<String>,
    /// CSV mode's compat root (Jetson): accepted, ignored (NVIDIA's compat hook there needs NVML)
    #[arg(long = "csv.compat-container-root", value_name = "DIR")]
    pub csv_compat_container_root: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum TransformCommand {
    /// Move the spec's paths from one root to another, on whole path components
    Root(TransformRootArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RelativeTo {
    /// Host paths: mount and device-node host paths, host hooks
    Host,
    /// Container paths: mount and device-node paths, the arguments of container hooks
    Container,
}

#[derive(Debug, Args)]
pub struct TransformRootArgs {
    /// The root to replace
    #[arg(long, value_name = "DIR")]
    pub from: String,
    /// The root to put instead
    #[arg(long, value_name = "DIR")]
    pub to: String,
    /// The spec to read (- for stdin)
    #[arg(long, default_value = "-", value_name = "FILE")]
    pub input: String,
    /// Where to write it [default: stdout]
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Which paths move
    #[arg(long, value_enum, default_value = "host")]
    pub relative_to: RelativeTo,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// A CDI spec directory (repeatable; later ones take priority)
    #[arg(long = "spec-dir", env = "NVIDIA_CTK_CDI_SPEC_DIRS", value_delimiter = ',', default_values = gpuctk_cdi::DEFAULT_SPEC_DIRS, value_name = "DIR")]
    pub spec_dirs: Vec<PathBuf>,
    /// Machine-readable output: {"devices": [...], "errors": [{"file", "error"}]}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Spec files (.yaml, .yml or .json)
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Machine-readable output: one object per file with "valid" and "issues"
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub roots: RootArgs,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Root of the driver installation [default: the config's [nvidia-container-cli] root, else /]
    #[arg(long, env = "NVIDIA_CTK_DRIVER_ROOT", value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Root under which /dev/nvidia* live [default: the config's, else the driver root]
    #[arg(long, env = "NVIDIA_CTK_DEV_ROOT", value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// Where procfs is mounted [default: the config's, else /proc]
    #[arg(long, env = "GPUCTK_PROC_ROOT", value_name = "DIR")]
    pub proc_root: Option<PathBuf>,
    /// The toolkit's config.toml [default: the one the runtime reads]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A CDI spec directory (repeatable) [default: the config's spec-dirs]
    #[arg(long = "spec-dir", value_name = "DIR")]
    pub spec_dirs: Vec<PathBuf>,
    /// docker's config
    #[arg(long, value_name = "FILE", default_value = "/etc/docker/daemon.json")]
    pub docker_config: PathBuf,
    /// containerd's config
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/containerd/config.toml"
    )]
    pub containerd_config: PathBuf,
    /// CRI-O's config (its drop-ins are read from crio.conf.d next to it)
    #[arg(long, value_name = "FILE", default_value = "/etc/crio/crio.conf")]
    pub crio_config: PathBuf,
    /// Also judge this container root filesystem: its CUDA, compat libraries, the verdict
    #[arg(long, value_name = "DIR", conflicts_with = "bundle")]
    pub rootfs: Option<PathBuf>,
    /// Also judge this OCI bundle (config.json's root.path and process.env)
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// The image's environment, KEY=VALUE lines (with --rootfs, or alone)
    #[arg(long, value_name = "FILE", conflicts_with = "bundle")]
    pub image_env: Option<PathBuf>,
    /// The host's root: where the udev rules, the systemd units and /run/systemd are looked for
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// The systemctl asked about the CDI refresh units (only where systemd runs under --host-root)
    #[arg(long, value_name = "PATH", default_value = "systemctl")]
    pub systemctl: PathBuf,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[cfg(feature = "mock")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    Debian,
    Rhel,
    DriverContainer,
    /// A Jetson: nvhost/nvmap nodes, L4T's libraries and CSV files, no NVIDIA procfs
    Tegra,
    /// A WSL2 host: /dev/dxg, /usr/lib/wsl/lib and the NVIDIA driver store, no NVIDIA procfs
    Wsl,
}

#[cfg(feature = "mock")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ArchArg {
    #[value(alias = "x86_64")]
    Amd64,
    #[value(alias = "aarch64")]
    Arm64,
}

#[cfg(feature = "mock")]
#[derive(Debug, Subcommand)]
pub enum MockHostCommand {
    /// Build a fake GPU host in DIR: device nodes, procfs files, driver libraries, ld.so.cache
    Create(MockCreateArgs),
    /// Build a small Debian-like container rootfs in DIR with a GPU probe
    Rootfs(MockRootfsArgs),
}

#[cfg(feature = "mock")]
#[derive(Debug, Args)]
pub struct MockCreateArgs {
    /// Directory to create (absent or empty)
    pub dir: PathBuf,
    /// Number of GPUs (1-64)
    #[arg(long, default_value_t = 2)]
    pub gpus: u32,
    /// Driver version, e.g. 570.124.06
    #[arg(long, default_value = "570.124.06")]
    pub driver_version: String,
    /// Where the driver files go
    #[arg(long, value_enum, default_value = "debian")]
    pub layout: LayoutArg,
    /// GPU model name
    #[arg(long, default_value = "NVIDIA A100-SXM4-80GB")]
    pub model: String,
    /// The ldconfig used to build the host's ld.so.cache
    #[arg(long, default_value = "ldconfig")]
    pub ldconfig: PathBuf,
    /// Architecture of the driver files and layout (default: this build's)
    #[arg(long, value_enum)]
    pub arch: Option<ArchArg>,
    /// Run --ldconfig through this program: qemu-aarch64 for an aarch64 ldconfig (glibc's
    /// ldconfig takes only its own architecture's libraries)
    #[arg(long, value_name = "PROGRAM")]
    pub ldconfig_via: Option<PathBuf>,
    /// IMEX channel nodes to make, /dev/nvidia-caps-imex-channels/channel0 up (0-2048)
    #[arg(long, default_value_t = 0)]
    pub imex_channels: u32,
    /// Make GPUDirect Storage's /dev/nvidia-fs0..15, /etc/cufile.json and /run/udev
    #[arg(long)]
    pub gds: bool,
    /// Make the Mellanox OFED nodes /dev/infiniband/uverbs0, uverbs1 and rdma_cm
    #[arg(long)]
    pub mofed: bool,
    /// Make GDRCopy's /dev/gdrdrv
    #[arg(long)]
    pub gdrcopy: bool,
    /// NVSwitch nodes to make, /dev/nvidia-nvswitch0 up, with /dev/nvidia-nvswitchctl (0-64)
    #[arg(long, default_value_t = 0)]
    pub nvswitches: u32,
    /// Put GPU INDEX in MIG mode with these GPU instances, e.g.
    /// `--mig 0=1g.10gb,2g.20gb*2,1g.24gb+gfx` (`*K`: K compute instances, else one;
    /// `+gfx`: a graphics profile); repeat for more GPUs
    #[arg(long, value_name = "INDEX=PROFILE[+gfx][*K][,...]")]
    pub mig: Vec<String>,
}

#[cfg(feature = "mock")]
#[derive(Debug, Args)]
pub struct MockRootfsArgs {
    /// Directory to create
    pub dir: PathBuf,
    /// A static busybox to copy in
    #[arg(long, default_value = "/bin/busybox")]
    pub busybox: PathBuf,
    /// The ldconfig used to build the image's ld.so.cache
    #[arg(long, default_value = "ldconfig")]
    pub ldconfig: PathBuf,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// GPUs of the mock host (when there is no real driver)
    #[cfg(feature = "mock")]
    #[arg(long, default_value_t = 2)]
    pub gpus: u32,
    /// Keep the demo's files (host, spec, bundle) in this directory instead of a temp dir
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Use the mock host even when a real driver is present
    #[cfg(feature = "mock")]
    #[arg(long)]
    pub mock: bool,
}
