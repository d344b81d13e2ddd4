//! Embedding portcullis: run a proxy inside your own program.
//!
//! Starts a loopback echo server, a proxy on an ephemeral port whose policy
//! allows exactly that server (a rule built in code), with an event callback
//! and the admin endpoint on; tunnels one line through the proxy with a raw
//! HTTP CONNECT, lists the open session, prints the events and the metrics,
//! changes the policy live, and shuts everything down.
//!
//! Run with `cargo run --example embed`.

use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use portcullis::policy::RuleConfig;
use portcullis::{AdminConfig, ListenAddr, ListenerProtocol, Policy, Proxy};

fn main() -> Result<(), Box<dyn Error>> {
    // 1. An echo server on 127.0.0.1:0 that serves one connection.
    let echo = TcpListener::bind("127.0.0.1:0")?;
    let port = echo.local_addr()?.port();
    let echo_thread = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut conn, _) = echo.accept()?;
        let mut line = String::new();
        BufReader::new(conn.try_clone()?).read_line(&mut line)?;
        conn.write_all(line.as_bytes())
    });

    // 2. A proxy allowing only that server. Loopback is a special range, so it
    //    is reachable only because the rule names the exact address. Events
    //    (one per session at its close, one per inspected request) go to a
    //    channel: the callback runs on the proxy's thread and must be quick.
    let rule = RuleConfig::allow("127.0.0.1")
        .name("echo")
        .port(port)
        .build();
    let (events_tx, events) = mpsc::channel();
    let proxy = Proxy::builder()
        .listen(
            ListenAddr::Tcp("127.0.0.1:0".parse()?),
            ListenerProtocol::Auto,
        )
        .policy(Policy::from_rules(&[rule])?)
        .admin(AdminConfig::new(ListenAddr::Tcp("127.0.0.1:0".parse()?)))
        .on_event(move |e| {
            let _ = events_tx.send(e.clone());
        })
        .build()?;
    let running = proxy.spawn()?;
    let proxy_addr = running.tcp_addr().ok_or("no TCP listener")?;
    let admin = running.admin_addr().ok_or("no admin endpoint")?;
    println!("proxy listening on {proxy_addr}, admin on {admin}, echo server on 127.0.0.1:{port}");

    // 3. A client: CONNECT, then talk to the echo server through the tunnel.
    let mut client = TcpStream::connect(proxy_addr)?;
    client.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        client,
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let head = read_head(&mut client)?;
    let status = head.lines().next().unwrap_or_default().to_string();
    println!("proxy answered: {status}");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("CONNECT refused: {status}").into());
    }
    client.write_all(b"hello through portcullis\n")?;
    let mut echoed = String::new();
    BufReader::new(&client).read_line(&mut echoed)?;
    print!("echoed: {echoed}");
    for s in running.sessions()? {
        println!(
            "open session {}: {:?} -> {:?}, {}",
            s.id, s.client, s.target, s.state
        );
    }
    drop(client);
    echo_thread.join().map_err(|_| "echo thread panicked")??;

    // 4. The session's event, the counters, the metrics page.
    let event = events.recv_timeout(Duration::from_secs(10))?;
    println!(
        "event: {} conn={} target={:?} decision={:?} rule={:?} up={:?} down={:?} close={:?}",
        event.kind.as_str(),
        event.conn,
        event.target,
        event.decision.map(|d| d.as_str()),
        event.rule,
        event.bytes_up,
        event.bytes_down,
        event.close
    );
    println!("stats: {}", running.stats());
    if let ListenAddr::Tcp(admin) = admin {
        let mut s = TcpStream::connect(admin)?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\n\r\n")?;
        let mut page = String::new();
        s.read_to_string(&mut page)?;
        for line in page
            .lines()
            .filter(|l| l.starts_with("portcullis_rule_sessions_total"))
        {
            println!("metrics: {line}");
        }
    }

    // 5. A live policy change: the rule goes, new connections are refused.
    running.remove_rule("echo")?;
    println!("rule removed; policy now denies 127.0.0.1:{port}");

    // 6. A clean shutdown.
    running.shutdown();
    running.join()?;
    println!("proxy stopped");
    Ok(())
}

/// Reads an HTTP response head byte by byte, so no tunnel bytes are consumed.
fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
        if head.len() > 16 * 1024 {
            return Err(std::io::Error::other("response head too large"));
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}
