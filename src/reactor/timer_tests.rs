use super::*;
use std::collections::{BTreeMap, HashMap};

/// xorshift64*: deterministic, no `rand` crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn drain(w: &mut TimerWheel<u64>, now: Instant) -> Vec<u64> {
    let mut out = Vec::new();
    w.expire(now, &mut out);
    out.sort_unstable();
    out
}

/// Latest instant `next_timeout` may point at: the deadline rounded up to
/// the wheel's tick grid.
fn ceil_tick(start: Instant, tick: Duration, d: Instant) -> Instant {
    let ns = d.saturating_duration_since(start).as_nanos();
    let t = tick.as_nanos();
    start + Duration::from_nanos((ns.div_ceil(t) * t) as u64)
}

#[test]
fn empty_wheel_sleeps_forever() {
    let t0 = Instant::now();
    let mut w: TimerWheel<u64> = TimerWheel::new(ms(10), 64, t0);
    assert_eq!(w.next_timeout(t0), None);
    assert!(w.is_empty());
    assert!(drain(&mut w, t0 + ms(1000)).is_empty());
    let id = w.insert(t0 + ms(50), 1);
    assert_eq!(w.len(), 1);
    assert!(w.next_timeout(t0).is_some());
    assert_eq!(w.cancel(id), Some(1));
    assert_eq!(w.next_timeout(t0), None, "cancelled everything: idle");
    assert_eq!(w.len(), 0);
}

#[test]
fn exact_never_early_at_boundaries() {
    let t0 = Instant::now();
    let mut w = TimerWheel::new(ms(10), 8, t0);
    // On a tick boundary, mid-tick, and within the current tick.
    w.insert(t0 + ms(30), 30);
    w.insert(t0 + ms(35), 35);
    w.insert(t0 + Duration::from_micros(1), 0);
    let ns = Duration::from_nanos(1);
    assert!(drain(&mut w, t0).is_empty());
    assert_eq!(drain(&mut w, t0 + Duration::from_micros(1)), vec![0]);
    assert!(drain(&mut w, t0 + ms(30) - ns).is_empty());
    assert_eq!(drain(&mut w, t0 + ms(30)), vec![30]);
    assert!(drain(&mut w, t0 + ms(35) - ns).is_empty());
    assert_eq!(drain(&mut w, t0 + ms(35)), vec![35]);
    assert!(w.is_empty());
}

#[test]
fn past_deadlines_fire_at_next_expire() {
    let t0 = Instant::now() + ms(1000);
    let mut w = TimerWheel::new(ms(10), 16, t0);
    assert!(drain(&mut w, t0 + ms(500)).is_empty());
    w.insert(t0 - ms(200), 1); // before the wheel's start
    w.insert(t0 + ms(100), 2); // behind the wheel's current tick
    w.insert(t0 + ms(500), 3); // exactly now
    assert_eq!(w.next_timeout(t0 + ms(500)), Some(Duration::ZERO));
    assert_eq!(drain(&mut w, t0 + ms(500)), vec![1, 2, 3]);
    assert_eq!(w.next_timeout(t0 + ms(500)), None);
}

#[test]
fn long_sleep_visits_every_elapsed_bucket() {
    let t0 = Instant::now();
    let mut w = TimerWheel::new(ms(10), 64, t0); // rotation = 640 ms
    for (i, d) in [5u64, 100, 630, 641, 1000, 2900, 3001, 5000]
        .iter()
        .enumerate()
    {
        w.insert(t0 + ms(*d), i as u64);
    }
    // The reactor slept 3 s (several rotations) in one poll.
    assert_eq!(drain(&mut w, t0 + ms(3000)), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(w.len(), 2);
    assert!(drain(&mut w, t0 + ms(3000)).is_empty());
    assert_eq!(drain(&mut w, t0 + ms(3001)), vec![6]);
    assert_eq!(drain(&mut w, t0 + ms(9000)), vec![7]);
}

#[test]
fn cancel_before_expiry_never_fires() {
    let t0 = Instant::now();
    let mut w = TimerWheel::new(ms(10), 32, t0);
    let a = w.insert(t0 + ms(50), 1);
    let b = w.insert(t0 + ms(50), 2);
    let c = w.insert(t0 + ms(50), 3);
    // Middle, head and tail of the same bucket list.
    assert_eq!(w.cancel(b), Some(2));
    assert_eq!(w.cancel(c), Some(3));
    assert_eq!(w.cancel(b), None, "double cancel is a no-op");
    assert_eq!(w.len(), 1);
    assert_eq!(drain(&mut w, t0 + ms(1000)), vec![1]);
    assert_eq!(w.cancel(a), None, "already fired");
    assert!(w.is_empty());
}

#[test]
fn stale_id_does_not_touch_reused_slot() {
    let t0 = Instant::now();
    let mut w = TimerWheel::new(ms(10), 32, t0);
    let old = w.insert(t0 + ms(20), 1);
    assert_eq!(drain(&mut w, t0 + ms(20)), vec![1]);
    let new = w.insert(t0 + ms(40), 2);
    assert_eq!(new.key, old.key, "slab slot reused");
    assert_ne!(new, old);
    assert_eq!(w.cancel(old), None);
    assert_eq!(w.len(), 1);
    // Same after a cancel-then-reuse cycle.
    assert_eq!(w.cancel(new), Some(2));
    let newer = w.insert(t0 + ms(40), 3);
    assert_eq!(newer.key, new.key);
    assert_eq!(w.cancel(new), None);
    assert_eq!(drain(&mut w, t0 + ms(40)), vec![3]);
}

#[test]
fn one_hour_idle_timeout_wakes_once() {
    let t0 = Instant::now();
    let mut w = TimerWheel::new(ms(10), 4096, t0); // rotation ~41 s
    let deadline = t0 + Duration::from_secs(3600) + ms(3);
    w.insert(deadline, 7);
    let mut now = t0;
    let mut wakeups = 0;
    let fired = loop {
        let dt = w.next_timeout(now).expect("armed");
        assert!(dt > Duration::ZERO, "zero timeout without anything due");
        now += dt;
        wakeups += 1;
        let out = drain(&mut w, now);
        if !out.is_empty() {
            break out;
        }
        assert!(now < deadline, "overslept and did not fire");
        assert!(wakeups < 100, "too many wakeups");
    };
    assert_eq!(fired, vec![7]);
    assert!(now >= deadline && now < deadline + ms(10));
    assert_eq!(wakeups, 1, "true earliest deadline, not once per rotation");
}

#[test]
fn next_timeout_loop_makes_progress_despite_cancels() {
    let t0 = Instant::now();
    let tick = ms(10);
    let mut w = TimerWheel::new(tick, 64, t0);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut armed = BTreeMap::new();
    let mut cancels = 0;
    for v in 0..2000u64 {
        let d = t0 + Duration::from_micros(rng.below(5_000_000));
        let id = w.insert(d, v);
        // Cancel most, like successful handshakes: stale bucket bounds.
        if rng.below(10) < 8 {
            assert_eq!(w.cancel(id), Some(v));
            cancels += 1;
        } else {
            armed.insert(v, d);
        }
    }
    let mut now = t0;
    let mut iterations = 0;
    while let Some(dt) = w.next_timeout(now) {
        iterations += 1;
        assert!(iterations <= armed.len() + cancels + 2, "no progress");
        assert!(dt > Duration::ZERO || iterations == 1);
        let earliest = *armed.values().min().unwrap();
        assert!(now + dt <= ceil_tick(t0, tick, earliest), "overslept");
        now += dt;
        for v in drain(&mut w, now) {
            let d = armed.remove(&v).unwrap();
            assert!(d <= now, "fired early");
        }
        assert!(armed.values().all(|d| *d > now), "missed a due timer");
    }
    assert!(armed.is_empty());
}

/// Random inserts, cancels and clock steps against a brute-force model.
fn model_check(seed: u64, tick: Duration, slots: usize, span_us: u64) {
    let mut rng = Rng(seed);
    let t0 = Instant::now();
    let mut w = TimerWheel::new(tick, slots, t0);
    let mut model: HashMap<u64, (Instant, TimerId)> = HashMap::new();
    let mut dead: Vec<TimerId> = Vec::new();
    let mut now = t0;
    let mut next_value = 0u64;
    let mut fired_total = 0;
    for _ in 0..3000 {
        for _ in 0..rng.below(8) {
            // Deadlines from slightly in the past to several rotations ahead.
            let off = rng.below(span_us) as i64 - (span_us / 20) as i64;
            let d = if off < 0 {
                now.checked_sub(Duration::from_micros(off.unsigned_abs()))
                    .unwrap_or(t0)
            } else {
                now + Duration::from_micros(off as u64)
            };
            let id = w.insert(d, next_value);
            model.insert(next_value, (d, id));
            next_value += 1;
        }
        if !model.is_empty() && rng.below(3) == 0 {
            let key = *model
                .keys()
                .nth(rng.below(model.len() as u64) as usize)
                .unwrap();
            let (_, id) = model.remove(&key).unwrap();
            assert_eq!(w.cancel(id), Some(key));
            dead.push(id);
        }
        if !dead.is_empty() && rng.below(4) == 0 {
            let id = dead[rng.below(dead.len() as u64) as usize];
            assert_eq!(w.cancel(id), None, "stale id");
        }
        if let (Some(dt), Some(e)) = (w.next_timeout(now), model.values().map(|v| v.0).min()) {
            assert!(now + dt <= ceil_tick(t0, tick, e).max(now), "overslept");
        }
        now += match rng.below(10) {
            0 => Duration::ZERO,
            1 => Duration::from_micros(rng.below(span_us * 2)), // long sleep
            _ => Duration::from_micros(rng.below(span_us / 50 + 1)),
        };
        let mut out = Vec::new();
        w.expire(now, &mut out);
        out.sort_unstable();
        let mut expect: Vec<u64> = model
            .iter()
            .filter(|(_, (d, _))| *d <= now)
            .map(|(v, _)| *v)
            .collect();
        expect.sort_unstable();
        assert_eq!(out, expect, "fired set at {:?}", now - t0);
        for v in &out {
            dead.push(model.remove(v).unwrap().1);
        }
        fired_total += out.len();
        assert_eq!(w.len(), model.len());
        if model.is_empty() {
            assert_eq!(w.next_timeout(now), None);
        } else {
            assert!(w.next_timeout(now).unwrap() > Duration::ZERO);
        }
    }
    assert!(
        fired_total > 1000,
        "test exercised too little: {fired_total}"
    );
}

#[test]
fn random_against_model_small_wheel() {
    // 16 slots x 1 ms: deadlines span ~30 rotations.
    model_check(1, ms(1), 16, 500_000);
}

#[test]
fn random_against_model_odd_tick() {
    model_check(0xdead_beef, Duration::from_micros(1333), 7, 200_000);
}

#[test]
fn random_against_model_reactor_shape() {
    model_check(42, ms(10), 4096, 120_000_000);
}

#[test]
fn hundred_thousand_timers_cancel_and_fire_exactly_once() {
    let t0 = Instant::now();
    let mut w = TimerWheel::new(ms(10), 4096, t0);
    let mut rng = Rng(7);
    let n = 100_000u64;
    let mut ids: Vec<TimerId> = (0..n)
        .map(|v| w.insert(t0 + Duration::from_micros(rng.below(3_600_000_000)), v))
        .collect();
    assert_eq!(w.len(), n as usize);
    // Cancel in shuffled order.
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for id in &ids {
        assert!(w.cancel(*id).is_some());
    }
    assert!(w.is_empty());
    assert_eq!(w.next_timeout(t0), None);
    // Re-arm and let them all fire through the reactor loop with extra polls.
    for v in 0..n {
        w.insert(t0 + Duration::from_micros(rng.below(60_000_000)), v);
    }
    let mut now = t0;
    let mut fired = 0;
    let mut out = Vec::new();
    let mut iterations = 0u64;
    while let Some(dt) = w.next_timeout(now) {
        iterations += 1;
        assert!(iterations <= n + 1, "no progress");
        now += dt;
        w.expire(now, &mut out);
        w.expire(now, &mut out); // a second poll in the same tick: no-op
        fired += out.len();
        out.clear();
    }
    assert_eq!(fired, n as usize);
}

#[test]
fn degenerate_parameters_do_not_panic() {
    let t0 = Instant::now();
    let mut w = TimerWheel::new(Duration::ZERO, 0, t0);
    w.insert(t0 + ms(5), 1);
    assert!(w.next_timeout(t0).unwrap() > Duration::ZERO);
    assert!(drain(&mut w, t0 + ms(4)).is_empty());
    assert_eq!(drain(&mut w, t0 + ms(5)), vec![1]);
}

/// The reactor's wheel (4096 buckets) and one timer per session stay small:
/// 12 bytes a bucket, and an entry is its value, its deadline and four u32s.
#[test]
fn buckets_and_entries_stay_small() {
    use std::mem::size_of;
    assert_eq!(size_of::<Link>(), 4);
    assert_eq!(size_of::<Option<NonZeroU64>>(), 8);
    assert_eq!(
        size_of::<Entry<u64>>(),
        size_of::<u64>() + size_of::<Instant>() + 4 * 4
    );
    let w: TimerWheel<u64> = TimerWheel::new(ms(10), 4096, Instant::now());
    let bucket_bytes = w.heads.capacity() * size_of::<Link>()
        + w.mins.capacity() * size_of::<Option<NonZeroU64>>();
    assert_eq!(bucket_bytes, 4096 * 12);
}
