//! CPU time of a process and its descendants from /proc, shared by the
//! load generators (`loadgen.rs`, `udp_loadgen.rs`): peers such as dante
//! serve from child processes, so a process's own time is not enough.

/// `pid` and every process descending from it.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(f) = stat_fields(p) {
                if let Some(pp) = f.get(1).and_then(|s| s.parse().ok()) {
                    parents.push((p, pp));
                }
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// Fields of /proc/PID/stat after the command name (field 3, state, is index 0).
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// utime+stime+cutime+cstime in seconds over the process tree of `pid`.
pub fn cpu_seconds(pid: u32) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) }.max(1) as f64;
    process_tree(pid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|f| {
            // utime, stime, cutime, cstime: fields 14-17, indices 11-14 here.
            (11..=14)
                .filter_map(|i| f.get(i).and_then(|v| v.parse::<f64>().ok()))
                .sum::<f64>()
        })
        .sum::<f64>()
        / hz
}
