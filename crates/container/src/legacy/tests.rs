use super::*;

fn mount(options: &str, ty: Option<&str>) -> Mount {
    Mount {
        host_path: "/h".into(),
        container_path: "/c".into(),
        options: options
            .split(',')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        r#type: ty.map(String::from),
    }
}

#[test]
fn mount_options_become_attributes() {
    let f = parse_options(&mount("ro,nosuid,nodev,rbind,rprivate", None)).unwrap();
    assert_eq!(
        f.set,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
    );
    assert_eq!(f.clear, 0);
    assert!(f.recursive);
    assert_eq!(f.propagation, Some(libc::MS_PRIVATE));
    let f = parse_options(&mount("nosuid,nodev,rbind,rprivate,noexec", None)).unwrap();
    assert_eq!(
        f.set,
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
    );
    let f = parse_options(&mount("ro,rw", Some("bind"))).unwrap();
    assert_eq!((f.set, f.clear, f.recursive), (0, MOUNT_ATTR_RDONLY, false));
    let e = parse_options(&mount("ro", None)).unwrap_err().to_string();
    assert!(
        e.contains("only bind mounts") && e.contains("/h -> /c"),
        "{e}"
    );
    assert!(parse_options(&mount("rbind", Some("tmpfs"))).is_err());
    let e = parse_options(&mount("rbind,mode=755", None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("mode=755"), "{e}");
}

fn dn(path: &str) -> DeviceNode {
    DeviceNode {
        path: path.into(),
        r#type: Some("c".into()),
        major: Some(195),
        minor: Some(3),
        file_mode: Some(0o100666),
        ..DeviceNode::default()
    }
}

#[test]
fn device_nodes_are_resolved_before_entering() {
    let n = plan_node(&dn("/dev/nvidia3")).unwrap();
    assert_eq!(
        (n.kind, n.major, n.minor, n.mode, n.access),
        (libc::S_IFCHR, 195, 3, 0o666, 7)
    );
    let rules = node_rules(std::slice::from_ref(&n));
    assert_eq!(rules[0].v1_line(), "c 195:3 rwm");
    let mut d = dn("/dev/nvidia3");
    d.permissions = Some("rw".into());
    assert_eq!(
        node_rules(&[plan_node(&d).unwrap()])[0].v1_line(),
        "c 195:3 rw"
    );
    d.permissions = Some("none".into());
    assert!(node_rules(&[plan_node(&d).unwrap()]).is_empty());
    d.permissions = Some("rx".into());
    assert!(plan_node(&d)
        .unwrap_err()
        .to_string()
        .contains("/dev/nvidia3"));
    assert!(plan_node(&dn("dev/nvidia3")).is_err());
    let mut p = dn("/dev/p");
    p.r#type = Some("p".into());
    assert!(plan_node(&p).is_err());

    // Missing numbers come from the host node: /dev/null is 1:3.
    let from_host = DeviceNode {
        path: "/dev/null".into(),
        ..DeviceNode::default()
    };
    let n = plan_node(&from_host).unwrap();
    assert_eq!((n.kind, n.major, n.minor), (libc::S_IFCHR, 1, 3));
    let missing = DeviceNode {
        path: "/dev/gpuctk-does-not-exist".into(),
        ..DeviceNode::default()
    };
    assert!(plan_node(&missing)
        .unwrap_err()
        .to_string()
        .contains("cannot be read"));
}
