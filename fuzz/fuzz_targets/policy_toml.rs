//! Policy files: parsing any UTF-8 text returns a result, never panics, and
//! a policy that compiles answers for a few fixed targets without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::policy::Target;
use portcullis::Policy;
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::parse_toml(text) else {
        return;
    };
    for (host, port) in [("example.com", 443), ("127.0.0.1", 80), ("::1", 8080)] {
        let Ok(target) = Target::new(host, port) else {
            continue;
        };
        let _ = policy.check_name(&target);
        let addrs: Vec<IpAddr> = ["93.184.216.34", "10.0.0.1", "::1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let _ = policy.check_resolved(&target, &addrs);
    }
});
