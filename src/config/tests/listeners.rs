//! Listeners: addresses, protocols, Unix sockets and their mode and group.

use super::*;

#[test]
fn listener_protocol_defaults_to_auto() {
    let f = ConfigFile::parse("[[listen]]\naddress = \"0.0.0.0:8080\"\n").unwrap();
    assert_eq!(
        f.listeners.unwrap(),
        vec![ListenerConfig::new(
            ListenAddr::Tcp("0.0.0.0:8080".parse().unwrap()),
            ListenerProtocol::Auto
        )]
    );
}

#[test]
fn unix_listener() {
    let f = ConfigFile::parse("[[listen]]\naddress = \"unix:/tmp/p.sock\"\n").unwrap();
    let l = f.listeners.unwrap();
    assert_eq!(l[0].addr, ListenAddr::Unix(PathBuf::from("/tmp/p.sock")));
    assert_eq!(l[0].addr.to_string(), "unix:/tmp/p.sock");
}

#[test]
fn listen_addr_parsing() {
    assert_eq!(
        parse_listen_addr("127.0.0.1:3128"),
        Ok(ListenAddr::Tcp("127.0.0.1:3128".parse().unwrap()))
    );
    assert_eq!(
        parse_listen_addr("[::1]:0"),
        Ok(ListenAddr::Tcp("[::1]:0".parse().unwrap()))
    );
    assert_eq!(
        parse_listen_addr("unix:relative.sock"),
        Ok(ListenAddr::Unix(PathBuf::from("relative.sock")))
    );
    assert!(parse_listen_addr("unix:").is_err());
    assert!(parse_listen_addr("127.0.0.1").is_err());
    assert!(parse_listen_addr("::1:3128").is_err());
    assert!(parse_listen_addr("example.com:80").is_err());
}

#[test]
fn protocol_parsing() {
    assert_eq!("auto".parse(), Ok(ListenerProtocol::Auto));
    assert_eq!("HTTP".parse(), Ok(ListenerProtocol::Http));
    assert_eq!("socks5".parse(), Ok(ListenerProtocol::Socks5));
    assert!("socks4".parse::<ListenerProtocol>().is_err());
}

#[test]
fn unix_listener_mode_and_group() {
    let l = |text: &str| ConfigFile::parse(text).map(|f| f.listeners.unwrap().remove(0));
    // Default: 0600, the process's group.
    let d = l("[[listen]]\naddress = \"unix:/tmp/p.sock\"\n").unwrap();
    assert_eq!(d.unix, UnixAccess::default());
    assert_eq!(d.unix.mode, 0o600);
    let g = l("[[listen]]\naddress = \"unix:/tmp/p.sock\"\nmode = \"0660\"\ngroup = 0\n").unwrap();
    assert_eq!(
        (g.unix.mode, &g.unix.group),
        (0o660, &Some(UnixGroup::Gid(0)))
    );
    // Names are resolved when the socket is made, on the machine it runs on.
    let n =
        l("[[listen]]\naddress = \"unix:/p\"\nmode = \"0o640\"\ngroup = \"sandbox\"\n").unwrap();
    let sandbox = UnixGroup::Name("sandbox".into());
    assert_eq!((n.unix.mode, &n.unix.group), (0o640, &Some(sandbox)));
    let digits = l("[[listen]]\naddress = \"unix:/p\"\ngroup = \"100\"\n").unwrap();
    assert_eq!(digits.unix.group, Some(UnixGroup::Gid(100)));
    let root = nix::unistd::Group::from_gid(0.into())
        .unwrap()
        .unwrap()
        .name;
    assert_eq!(UnixGroup::Name(root).gid(), Ok(0));
    let unknown = UnixGroup::Name("no-such-group-here".into()).gid();
    assert!(unknown.unwrap_err().contains("no group named"));
    for (text, key, says) in [
        (
            "address = \"unix:/p\"\nmode = \"0999\"",
            "listen[0].mode",
            "octal",
        ),
        (
            "address = \"unix:/p\"\nmode = \"1777\"",
            "listen[0].mode",
            "octal",
        ),
        (
            "address = \"unix:/p\"\nmode = \"\"",
            "listen[0].mode",
            "octal",
        ),
        (
            "address = \"unix:/p\"\ngroup = \" \"",
            "listen[0].group",
            "empty group name",
        ),
        (
            "address = \"127.0.0.1:1\"\nmode = \"0600\"",
            "listen[0].mode",
            "only a unix: listener",
        ),
        (
            "address = \"127.0.0.1:1\"\ngroup = 0",
            "listen[0].group",
            "only a unix: listener",
        ),
    ] {
        let e = l(&format!("[[listen]]\n{text}\n")).unwrap_err();
        assert_eq!(e.key_name(), Some(key), "{text}: {e}");
        assert!(e.message().contains(says), "{text}: {e}");
    }
    // A decimal number is refused: 600 is not 0600.
    assert!(l("[[listen]]\naddress = \"unix:/p\"\nmode = 600\n").is_err());
    // Validation catches an embedder's impossible mode.
    let mut listener = ListenerConfig::new(ListenAddr::Unix("/p".into()), ListenerProtocol::Auto);
    listener.unix.mode = 0o4755;
    let c = Config {
        listeners: vec![listener],
        ..Config::default()
    };
    assert_eq!(c.validate().unwrap_err().key_name(), Some("listen[0].mode"));
}
