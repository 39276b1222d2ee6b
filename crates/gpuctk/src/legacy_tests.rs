//! The argv grammars of `nvidia-container-runtime-hook` and `nvidia-container-cli`, as pure
//! functions: no driver, no container, no root.

use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn hook_flags_take_one_or_two_dashes_and_an_inline_or_next_value() {
    let run = |config: Option<&str>, debug, command: Option<&str>| HookArgs::Run {
        config_path: config.map(PathBuf::from),
        debug,
        command: command.map(str::to_string),
    };
    assert_eq!(
        parse_hook_args(&os(&["h", "prestart"])),
        run(None, false, Some("prestart"))
    );
    assert_eq!(
        parse_hook_args(&os(&["h", "-debug", "-config", "/c.toml", "prestart"])),
        run(Some("/c.toml"), true, Some("prestart"))
    );
    assert_eq!(
        parse_hook_args(&os(&["h", "--config=/a=b.toml", "--debug", "poststop"])),
        run(Some("/a=b.toml"), true, Some("poststop"))
    );
    // The first word is the command; later words and unknown flags are ignored, as Go's
    // `flag` package leaves them to the caller.
    assert_eq!(
        parse_hook_args(&os(&["h", "-bogus", "prestart", "poststart"])),
        run(None, false, Some("prestart"))
    );
    // `-config` last: no file, so the default is read.
    assert_eq!(
        parse_hook_args(&os(&["h", "prestart", "-config"])),
        run(None, false, Some("prestart"))
    );
    assert_eq!(parse_hook_args(&os(&["h"])), run(None, false, None));
    assert_eq!(
        parse_hook_args(&os(&["h", "-help", "prestart"])),
        HookArgs::Help
    );
    assert_eq!(parse_hook_args(&os(&["h", "--version"])), HookArgs::Version);
}

#[test]
fn cli_globals_stop_at_the_command() {
    let run = |root: Option<&str>, debug: Option<&str>, command| Globals::Run {
        root: root.map(PathBuf::from),
        debug: debug.map(PathBuf::from),
        command,
    };
    assert_eq!(
        parse_globals(&s(&["configure", "--root=/x"])).unwrap(),
        run(None, None, 0)
    );
    assert_eq!(
        parse_globals(&s(&["--root=/drv", "-d", "/dev/stderr", "list"])).unwrap(),
        run(Some("/drv"), Some("/dev/stderr"), 3)
    );
    // enroot's globals: accepted, nothing done with them.
    assert_eq!(
        parse_globals(&s(&[
            "--user",
            "--no-pivot",
            "-k",
            "--ldcache=/etc/ld.so.cache",
            "-r",
            "/r",
            "configure"
        ]))
        .unwrap(),
        run(Some("/r"), None, 6)
    );
    assert_eq!(
        parse_globals(&s(&["-r", "/r"])).unwrap(),
        run(Some("/r"), None, 2)
    );
    assert_eq!(
        parse_globals(&s(&["-r", "/r", "-?"])).unwrap(),
        Globals::Help
    );
    assert_eq!(
        parse_globals(&s(&["-V", "--bogus"])).unwrap(),
        Globals::Version
    );
    let e = parse_globals(&s(&["--bogus", "info"])).unwrap_err();
    assert_eq!(e.to_string(), "unrecognized option '--bogus'");
    let e = parse_globals(&s(&["-r"])).unwrap_err();
    assert_eq!(e.to_string(), "option '-r' requires an argument");
    let e = parse_globals(&s(&["--debug"])).unwrap_err();
    assert_eq!(e.to_string(), "option '--debug' requires an argument");
}

#[test]
fn configure_takes_libnvidia_containers_flags() {
    let got = parse_configure(&s(&[
        "--pid=42",
        "-d",
        "0\\,1",
        "--compute",
        "-u",
        "--video",
        "--require=cuda>=12.0",
        "-r",
        "arch=x86_64",
        "--no-cgroups",
        "--ldconfig=@/sbin/ldconfig",
        "--cuda-compat-mode",
        "ldconfig",
        "--mig-config=all",
        "--mig-config",
        "all",
        "--mig-monitor=",
        "--imex-channel=1\\,0",
        "--imex-channel",
        "1",
        "--no-persistenced",
        "/run/rootfs",
    ]))
    .unwrap();
    assert_eq!(
        got,
        ConfigureArgs {
            devices: Some("0\\,1".into()),
            caps: vec![Capability::Compute, Capability::Utility, Capability::Video],
            pid: Some(42),
            rootfs: PathBuf::from("/run/rootfs"),
            no_cgroups: true,
            requirements: vec![
                ("--require".into(), "cuda>=12.0".into()),
                ("--require".into(), "arch=x86_64".into()),
            ],
            // Asked twice, given once; an empty value asks nothing.
            mig: vec![("--mig-config".into(), MigCapability::Config)],
            imex: vec![1, 0],
            remarks: Vec::new(),
        }
    );
    // The last ROOTFS and the last --device win.
    let got = parse_configure(&s(&["/a", "--device=all", "-d", "2", "/b"])).unwrap();
    assert_eq!((got.rootfs, got.devices), ("/b".into(), Some("2".into())));
}

#[test]
fn configure_refuses_what_libnvidia_container_refuses() {
    for (args, want) in [
        (
            &["--bogus", "/r"][..],
            "configure: unrecognized option '--bogus'",
        ),
        (&["--compute"], "configure: missing ROOTFS argument"),
        (
            &["rootfs"],
            "configure: ROOTFS rootfs must be an absolute path",
        ),
        (&["--pid", "x", "/r"], "--pid \"x\": expected a process id"),
        // A flag that wants a value, last (this stepped past the end and panicked).
        (&["/r", "--pid"], "option '--pid' requires an argument"),
        (&["/r", "-d"], "option '-d' requires an argument"),
    ] {
        let e = parse_configure(&s(args)).map(|_| ()).unwrap_err();
        assert_eq!(e.to_string(), want, "{args:?}");
    }
    let e = parse_configure(&s(&["--mig-monitor=some", "/r"])).unwrap_err();
    assert!(e.to_string().contains("--mig-monitor"), "{e}");
}

#[test]
fn list_sections_default_to_all_and_flags_pick_some() {
    let all = parse_list(&[]).unwrap();
    assert_eq!(
        all,
        ListArgs {
            device: "all".into(),
            libs: true,
            bins: true,
            ipcs: true,
            fw: true,
            compat32: true,
            mig: Vec::new(),
            imex: Vec::new(),
            remarks: Vec::new(),
        }
    );
    let some = parse_list(&s(&[
        "-l",
        "--ipcs",
        "-d",
        "0,1",
        "--mig-monitor=all",
        "--mig-monitor",
        "all",
        "--imex-channel=2",
        "--no-persistenced",
    ]))
    .unwrap();
    assert_eq!(
        (some.libs, some.bins, some.ipcs, some.fw, some.compat32),
        (true, false, true, false, false)
    );
    assert_eq!(some.device, "0,1");
    assert_eq!(some.mig, vec![MigCapability::Monitor]);
    assert_eq!(some.imex, vec![2]);
    for (args, want) in [
        (&["--pid=1"][..], "list: unrecognized option '--pid=1'"),
        (&["--device"], "option '--device' requires an argument"),
    ] {
        let e = parse_list(&s(args)).map(|_| ()).unwrap_err();
        assert_eq!(e.to_string(), want, "{args:?}");
    }
}
