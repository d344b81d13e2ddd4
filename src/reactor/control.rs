//! The reactor's side of the admin endpoint and of control: admin
//! connections driven on their events and deadlines, control commands
//! executed against the sessions and the policy this reactor owns, and the
//! one place a new policy takes effect (reload, replace, add, remove).

use mio::event::Event;

use super::{Reactor, Timer};
use crate::control::{edit, wire, Command, Reply};
use crate::lifecycle::CloseReason;
use crate::policy::Policy;
use crate::session::Session;

impl Reactor {
    /// New admin connections: each is driven at once (its request is
    /// usually queued already).
    pub(super) fn admin_accept(&mut self) {
        let Some(admin) = &mut self.admin else { return };
        let slots = admin.accept(&self.env.registry, self.now);
        for slot in slots {
            self.admin_drive(slot);
        }
    }

    /// A readiness event on an admin connection.
    pub(super) fn admin_event(&mut self, slot: usize, ev: &Event) {
        if let Some(admin) = &mut self.admin {
            admin.absorb(slot, ev);
            self.admin_drive(slot);
        }
    }

    /// An admin connection's deadline passed: it is closed.
    pub(super) fn admin_timer(&mut self, slot: usize, gen: u64) {
        let Some(admin) = &mut self.admin else { return };
        let Some(conn) = admin.conn_mut(slot).filter(|c| c.gen == gen) else {
            return;
        };
        conn.timer = None;
        if conn.deadline.is_some_and(|d| d > self.now) {
            // Moved later since the timer was armed.
            self.sync_admin_timer(slot);
            return;
        }
        log::debug!("admin connection timed out");
        admin.close(slot, &self.env.registry);
    }

    /// Drives an admin connection; its control lines run here.
    pub(super) fn admin_drive(&mut self, slot: usize) {
        // Out of `self` while it runs, so that commands may use the reactor.
        let Some(mut admin) = self.admin.take() else {
            return;
        };
        let now = self.now;
        let finished = admin.drive(slot, now, &mut |line| self.control_line(line));
        if finished {
            if let Some(conn) = admin.close(slot, &self.env.registry) {
                if let Some((id, _)) = conn.timer {
                    self.timers.cancel(id);
                }
            }
        }
        self.admin = Some(admin);
        if !finished {
            self.sync_admin_timer(slot);
        }
    }

    /// Arms, moves or cancels an admin connection's timer to match its deadline.
    fn sync_admin_timer(&mut self, slot: usize) {
        let Some(conn) = self.admin.as_mut().and_then(|a| a.conn_mut(slot)) else {
            return;
        };
        if conn.timer.map(|(_, at)| at) == conn.deadline {
            return;
        }
        if let Some((id, _)) = conn.timer.take() {
            self.timers.cancel(id);
        }
        if let Some(at) = conn.deadline {
            let id = self.timers.insert(
                at,
                Timer::Admin {
                    slot,
                    gen: conn.gen,
                },
            );
            conn.timer = Some((id, at));
        }
    }

    /// One control line in, one answer line out (no newline).
    pub(super) fn control_line(&mut self, line: &str) -> String {
        match wire::parse(line) {
            Ok(cmd) => {
                let name = cmd.name();
                let reply = self.execute(cmd);
                if let Err(e) = &reply {
                    log::info!("control: {name} refused: {e}");
                }
                wire::answer(name, &reply)
            }
            Err(e) => {
                log::info!("control: {e}");
                wire::error_value(wire::command_name(line), &e).to_string()
            }
        }
    }

    /// Runs a control command against this reactor (and, on worker 0 of
    /// several, the other workers: see `workers`). An error changes nothing.
    pub(super) fn execute(&mut self, cmd: Command) -> Result<Reply, String> {
        match cmd {
            Command::ReplacePolicy(mut policy) => {
                policy.keep_secrets_of(&self.env.policy);
                self.check_users(&policy)?;
                self.put_in_force(policy, "replaced over control");
                Ok(self.policy_reply())
            }
            Command::AddRule(rule) => {
                let policy = edit::add_rule(&self.env.policy, &rule)?;
                self.check_users(&policy)?;
                self.put_in_force(policy, "rule added over control");
                Ok(self.policy_reply())
            }
            Command::RemoveRule(name) => {
                let policy = edit::remove_rule(&self.env.policy, &name)?;
                self.put_in_force(policy, "rule removed over control");
                Ok(self.policy_reply())
            }
            Command::ListSessions => {
                let now = self.now;
                let mut list: Vec<_> = self
                    .sessions
                    .iter()
                    .filter(|(_, s)| !s.session.is_done())
                    .map(|(_, s)| s.session.info(now))
                    .collect();
                list.extend(self.peer_sessions());
                Ok(Reply::Sessions(list))
            }
            Command::CloseSession(id) => {
                if let Some(answer) = self.close_elsewhere(id) {
                    return answer;
                }
                let key = self
                    .sessions
                    .iter()
                    .find(|(_, s)| s.session.id() == id && !s.session.is_done())
                    .map(|(k, _)| k)
                    .ok_or_else(|| format!("no open session {id}"))?;
                log::info!("conn={id} closed by control");
                self.call(key, |s, ctx| s.abort(CloseReason::ClosedByControl, ctx));
                Ok(Reply::Closed(id))
            }
            Command::Stats => Ok(Reply::Stats(
                Box::new(self.env.remote.stats.snapshot()),
                self.env.remote.stats.rules(),
            )),
        }
    }

    /// Applies `policy` here and then on the other workers, returning once
    /// every worker has it in force.
    fn put_in_force(&mut self, policy: Policy, how: &str) {
        if self.peers().is_empty() {
            self.apply_policy(policy, how);
        } else {
            let copy = policy.clone();
            self.apply_policy(policy, how);
            self.share_policy(&copy);
        }
    }

    /// Refuses a policy whose rules name users this proxy does not have
    /// (or any user, with auth off): such a rule could never match.
    pub(super) fn check_users(&self, policy: &Policy) -> Result<(), String> {
        for (_, rule, users) in policy.rule_users() {
            let Some(known) = &self.env.settings.auth else {
                return Err(format!("rule {rule:?} names users but auth is off"));
            };
            if let Some(u) = users.iter().find(|u| !known.contains(u)) {
                return Err(format!(
                    "rule {rule:?} names user {u:?}, who is not defined (users are read at start only)"
                ));
            }
        }
        Ok(())
    }

    fn policy_reply(&self) -> Reply {
        Reply::Policy(
            self.env
                .policy
                .rule_names()
                .iter()
                .map(|n| n.to_string())
                .collect(),
        )
    }

    /// Puts `policy` in force, as a reload does: new sessions use it at
    /// once, open sessions are re-checked. The memory of inspected names'
    /// addresses carries over.
    pub(super) fn apply_policy(&mut self, mut policy: Policy, how: &str) {
        // Interfaces may have changed since the last policy came in.
        crate::policy::this_host::refresh();
        // What DNS said about inspected names stays true.
        policy.set_memory(self.env.policy.memory().clone());
        self.env.policy = policy;
        self.refresh_pins(true);
        // A policy that brings the first terminating rule needs the CA now;
        // if it cannot load, such tunnels fail with a clear reason (and the
        // error is logged here).
        if let Err(e) = self.env.prepare_tls() {
            log::error!("{e}");
        }
        let (rules, open) = (self.env.policy.len(), self.sessions.len());
        log::info!(
            "policy {how} ({rules} rule{}); re-checking {open} open session{}",
            if rules == 1 { "" } else { "s" },
            if open == 1 { "" } else { "s" },
        );
        self.checked_memory = self.env.policy.memory().generation();
        let keys: Vec<usize> = self.sessions.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.call(key, Session::on_reload);
        }
    }
}
