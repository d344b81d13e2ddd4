//! Attacks on the sans-IO core from outside: what a hostile client or
//! upstream can do with bytes and time alone.

use std::time::Duration;

use super::exchange_runs::api_rules;
use super::sim::{Options, Session, ORIGIN};
use crate::protocol::http1::exchange::MAX_RECORDS;

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n")
}

/// A client that keeps sending refused requests, a batch each second, is
/// busy, not idle: the yield that lets the shell take the batch's records
/// must not leave the idle clock where it was.
#[test]
fn a_steady_stream_of_refused_requests_is_not_idle() {
    let mut s = Session::new(Options {
        idle: Some(Duration::from_secs(5)),
        rules: Some(api_rules()),
        ..Options::tunnel()
    });
    let batch = get("/v1/admin/x").repeat(MAX_RECORDS / 2);
    for second in 0..10 {
        s.client_sends(&batch);
        s.drive();
        assert!(s.stop.is_none(), "closed {:?} after {second} s", s.reason());
        s.elapse(Duration::from_secs(1));
    }
    assert!(s.stop.is_none(), "closed {:?}", s.reason());
    assert_eq!(s.records.len(), 10 * MAX_RECORDS / 2);
}
