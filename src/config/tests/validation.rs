//! Validation of a built `Config`, and the limits sized to the fd limit.

use super::*;

#[test]
fn validation_names_the_key() {
    assert_eq!(valid().validate(), Ok(()));

    let mut c = valid();
    c.limits.buffer_size = 4095;
    assert_eq!(invalid_key(&c), "limits.buffer_size");
    c.limits.buffer_size = MAX_BUFFER_SIZE + 1;
    assert_eq!(invalid_key(&c), "limits.buffer_size");
    c.limits.buffer_size = MIN_BUFFER_SIZE;
    assert_eq!(c.validate(), Ok(()));
    c.limits.buffer_size = MAX_BUFFER_SIZE;
    assert_eq!(c.validate(), Ok(()));

    let mut c = valid();
    c.limits.max_head_bytes = 1023;
    assert_eq!(invalid_key(&c), "limits.max_head_bytes");

    let mut c = valid();
    c.limits.resolver_threads = 0;
    assert_eq!(invalid_key(&c), "limits.resolver_threads");
    c.limits.resolver_threads = 65;
    assert_eq!(invalid_key(&c), "limits.resolver_threads");
    c.limits.resolver_threads = 64;
    assert_eq!(c.validate(), Ok(()));

    let mut c = valid();
    c.listeners.clear();
    assert_eq!(invalid_key(&c), "listen");

    let mut c = valid();
    c.timeouts.connect = Duration::ZERO;
    assert_eq!(invalid_key(&c), "timeouts.connect");
    let mut c = valid();
    c.timeouts.idle = Some(Duration::ZERO);
    assert_eq!(invalid_key(&c), "timeouts.idle");

    let mut c = valid();
    c.auth = Some(Credentials {
        username: String::new(),
        password: "x".into(),
    });
    assert_eq!(invalid_key(&c), "auth.username");
    c.auth = Some(Credentials {
        username: "a:b".into(),
        password: "x".into(),
    });
    assert_eq!(invalid_key(&c), "auth.username");
    c.auth = Some(Credentials {
        username: "a".into(),
        password: "x".repeat(256),
    });
    assert_eq!(invalid_key(&c), "auth.password");
}

#[test]
fn session_limits_default_to_what_the_fd_limit_holds() {
    let l = Limits::for_open_files(Some(20_000));
    assert_eq!((l.max_sessions, l.max_sessions_per_client), (9_316, 2_329));
    assert_eq!(
        (
            l.max_pending_handshakes,
            l.max_pending_handshakes_per_client
        ),
        (1_024, 256)
    );
    let small = Limits::for_open_files(Some(2048));
    assert_eq!(
        (small.max_sessions, small.max_sessions_per_client),
        (864, 216)
    );
    assert_eq!(
        (
            small.max_pending_handshakes,
            small.max_pending_handshakes_per_client
        ),
        (864, 216)
    );
    let tiny = Limits::for_open_files(Some(8));
    assert_eq!((tiny.max_sessions, tiny.max_sessions_per_client), (1, 1));
    assert_eq!(tiny.max_pending_handshakes_per_client, 1);
    // An explicit value in the file wins; the others keep their defaults.
    let f = ConfigFile::parse("[limits]\nmax_sessions = 5\n").unwrap();
    assert_eq!(f.limits.max_sessions, 5);
    assert_eq!(
        f.limits.max_sessions_per_client,
        Limits::default().max_sessions_per_client
    );
}

#[test]
fn workers_is_a_count_or_auto() {
    let auto = crate::config::available_workers();
    assert!(auto >= 1);
    for (text, want) in [
        ("", 1),
        ("[limits]\nworkers = 2\n", 2),
        ("[limits]\nworkers = \"3\"\n", 3),
        ("[limits]\nworkers = \"auto\"\n", auto),
        ("[limits]\nworkers = \"AUTO\"\n", auto),
    ] {
        let c = ConfigFile::parse(text).unwrap().compile().unwrap();
        assert_eq!(c.limits.workers, want, "{text}");
    }
    for (text, why) in [
        ("[limits]\nworkers = 0\n", "out of range"),
        ("[limits]\nworkers = -1\n", "expected a number or auto"),
        ("[limits]\nworkers = 257\n", "out of range"),
        (
            "[limits]\nworkers = \"many\"\n",
            "expected a number or auto",
        ),
    ] {
        let e = ConfigFile::parse(text).unwrap_err();
        assert_eq!(e.key_name(), Some("limits.workers"), "{text}");
        let e = e.to_string();
        assert!(e.contains(why) && e.contains("line 2"), "{text}: {e}");
    }
    let mut c = Config::default();
    c.limits.workers = 0;
    assert_eq!(invalid_key(&c), "limits.workers");
}

#[test]
fn the_handshake_budget_parses_defaults_and_refuses_an_empty_bucket() {
    let d = Limits::default();
    assert_eq!(
        (
            d.handshakes_per_client_per_sec,
            d.handshake_burst_per_client
        ),
        (50, 100)
    );
    let text = "[limits]\nhandshakes_per_client_per_sec = 7\nhandshake_burst_per_client = 9\n";
    let f = ConfigFile::parse(text).unwrap();
    assert_eq!(f.limits.handshakes_per_client_per_sec, 7);
    assert_eq!(f.limits.handshake_burst_per_client, 9);

    let mut c = valid();
    c.limits.handshake_burst_per_client = 0;
    assert_eq!(invalid_key(&c), "limits.handshake_burst_per_client");
    // Off: the burst is not read.
    c.limits.handshakes_per_client_per_sec = 0;
    assert_eq!(c.validate(), Ok(()));
    assert!(ConfigFile::parse("[limits]\nhandshakes_per_client_per_sec = -1\n").is_err());
}
