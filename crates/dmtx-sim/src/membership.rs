//! Failure detection by leases: a simulated membership node holding the view.
//!
//! FORD §4.8 and LOTUS §6 assume a membership service that notices a crashed node by
//! its lease running out (never by an oracle) and publishes a new view; recovery then
//! works from that view. This module is that mechanism; what protocols do with a new
//! view is a later issue.
//!
//! # Model
//!
//! - The membership node (`ms`) holds a [`View`]: an epoch and the members. It starts
//!   with every configured member at epoch 1.
//! - Every member renews every [`MembershipConfig::renew_ns`] of **its own clock**
//!   ([`Sim::node_clock`]; exact when none was registered) by a message that crosses the
//!   fabric: one-way latency plus a 64-byte message on the link, scaled by a slow NIC,
//!   plus a `delay node=` on the member or on `ms`, lost when the member crashed or a
//!   link-down or partition cuts it from `ms` at the moment it is sent. The ack takes
//!   the same way back.
//! - `ms` grants a member that is in the view a lease of [`MembershipConfig::lease_ns`]
//!   from the request's arrival (its own clock is virtual time) and acks; it rejects a
//!   member it expelled. A member's lease expiring removes it and bumps the epoch.
//! - The member believes its lease lasts until its own clock reads the *send* time of
//!   the acked request plus `lease_ns` ([`Sim::lease_held`]). With clocks within the
//!   drift bound that is never later than `ms`'s expiry; a clock that runs slow beyond
//!   the bound (OOCC §VII-B) believes it holds a lease `ms` has already revoked: the
//!   stale-lease hazard that protocols must fence against.
//! - A restarted memory node rejoins at once (new epoch); a compute node once expelled
//!   stays out (recovering it is a later issue). A crashed compute node's renewal timer
//!   stops at its next tick (a crashed memory node's goes on, for its restart).
//! - Renewals are periodic events, so while the service runs the event queue never runs
//!   dry: a run ends when its tasks do (the executor drops a crashed compute node's
//!   tasks at the crash, [`SimExecutor`](crate::SimExecutor)) or at its deadline.
//! - `ms` is one node, not a replicated service. A `crash-ms` fault stops it: requests
//!   that reach it are lost (no ack comes back) and no lease expires at it, so members' own leases run out while
//!   the view stands (nobody can be expelled, and nobody holds a lease). A restart keeps
//!   the view (a coordination service's state is durable) and grants every member a
//!   fresh lease from then; a member that died meanwhile is expelled when it runs out.
//!
//! Every view change is kept with its virtual time ([`Sim::view_history`]).

use std::collections::BTreeMap;

use crate::faults::{FaultError, FaultEvent, Node};
use crate::sim::{Event, State};
use crate::Sim;

/// The membership service's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipConfig {
    /// Lease length (ns).
    pub lease_ns: u64,
    /// Renewal interval on each member's clock (ns); `lease_ns / 3` is usual.
    pub renew_ns: u64,
    /// The nodes in the first view.
    pub members: Vec<Node>,
}

impl MembershipConfig {
    /// Leases of `lease_ns` renewed every third of that, for `members`.
    pub fn new(lease_ns: u64, members: Vec<Node>) -> Self {
        Self {
            lease_ns,
            renew_ns: lease_ns / 3,
            members,
        }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        if self.renew_ns == 0 || self.renew_ns >= self.lease_ns {
            return Err(format!(
                "renew interval {} ns must be above 0 and below the lease of {} ns; use e.g. renew = lease / 3",
                self.renew_ns, self.lease_ns
            ));
        }
        if self.members.is_empty() || self.members.contains(&Node::Membership) {
            return Err("`members` must list cnN and mnN nodes (not ms), at least one".into());
        }
        Ok(())
    }
}

/// A membership view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Bumped by every change.
    pub epoch: u64,
    /// The members, sorted.
    pub members: Vec<Node>,
}

impl View {
    /// True when `node` is a member.
    pub fn contains(&self, node: Node) -> bool {
        self.members.contains(&node)
    }
}

/// How a view changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The node's lease expired.
    Expelled,
    /// The node (a restarted memory node) came back.
    Joined,
}

/// One view change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewChange {
    /// Virtual time (ns).
    pub at_ns: u64,
    /// The new epoch.
    pub epoch: u64,
    /// Who.
    pub node: Node,
    /// What.
    pub change: Change,
}

#[derive(Debug)]
struct Member {
    in_view: bool,
    /// `ms`'s expiry of the lease (virtual time).
    granted_until: u64,
    /// The member's own belief: its clock reading until which it holds the lease.
    local_until: Option<u64>,
}

/// The membership node's state.
#[derive(Debug)]
pub(crate) struct Membership {
    cfg: MembershipConfig,
    epoch: u64,
    members: BTreeMap<Node, Member>,
    history: Vec<ViewChange>,
}

impl Membership {
    /// A view change: a new epoch, recorded in the history.
    fn change(&mut self, at_ns: u64, node: Node, change: Change) {
        self.epoch += 1;
        self.history.push(ViewChange {
            at_ns,
            epoch: self.epoch,
            node,
            change,
        });
    }
}

/// Membership events on the simulation's queue.
#[derive(Debug)]
pub(crate) enum MsEvent {
    /// A member's renewal timer.
    Renew(Node),
    /// A renewal request reaches `ms`; `sent_local` is the member's clock at sending.
    Request { node: Node, sent_local: u64 },
    /// `ms`'s answer reaches the member.
    Ack { node: Node, sent_local: u64, ok: bool },
    /// A lease may have expired.
    Check(Node),
}

/// Bytes of a lease message on the wire (headers included).
const MSG_BYTES: u64 = 64;

impl Sim {
    /// Start the membership service at the current virtual time.
    pub fn start_membership(&self, cfg: MembershipConfig) -> Result<(), FaultError> {
        cfg.check().map_err(|message| FaultError::Invalid {
            clause: "membership".into(),
            message,
        })?;
        let now = self.now();
        let mut st = self.lock();
        let st = &mut *st;
        let mut members = BTreeMap::new();
        for &node in &cfg.members {
            let clock = self.clock_of(st, node);
            members.insert(
                node,
                Member {
                    in_view: true,
                    granted_until: now + cfg.lease_ns,
                    local_until: Some(dmtx_runtime::Clock::now_ns(&clock) + cfg.lease_ns),
                },
            );
            st.queue
                .push(now + cfg.lease_ns, Event::Fault(FaultEvent::Ms(MsEvent::Check(node))));
            let next = clock.virtual_ns_for(cfg.renew_ns);
            st.queue.push(
                now.saturating_add(next),
                Event::Fault(FaultEvent::Ms(MsEvent::Renew(node))),
            );
        }
        st.faults.membership = Some(Box::new(Membership {
            cfg,
            epoch: 1,
            members,
            history: Vec::new(),
        }));
        Ok(())
    }

    /// The current view (epoch 0 and no members when the service is not running).
    pub fn view(&self) -> View {
        let st = self.lock();
        match &st.faults.membership {
            None => View {
                epoch: 0,
                members: Vec::new(),
            },
            Some(m) => View {
                epoch: m.epoch,
                members: m.members.iter().filter(|(_, x)| x.in_view).map(|(&n, _)| n).collect(),
            },
        }
    }

    /// Every view change so far, in order.
    pub fn view_history(&self) -> Vec<ViewChange> {
        self.lock()
            .faults
            .membership
            .as_ref()
            .map(|m| m.history.clone())
            .unwrap_or_default()
    }

    /// True when `node` itself believes it holds a lease: it is up and its clock reads
    /// less than the expiry it computed from its last acked renewal.
    pub fn lease_held(&self, node: Node) -> bool {
        let mut st = self.lock();
        let st = &mut *st;
        if st.faults.active.as_deref().is_some_and(|f| f.node_down(node)) {
            return false;
        }
        let Some(until) = st
            .faults
            .membership
            .as_ref()
            .and_then(|m| m.members.get(&node))
            .and_then(|x| x.local_until)
        else {
            return false;
        };
        let clock = self.clock_of(st, node);
        dmtx_runtime::Clock::now_ns(&clock) < until
    }

    /// Latency of a lease message between `node` and `ms` now, or `None` when it is lost.
    fn lease_msg_ns(&self, st: &State, node: Node) -> Option<u64> {
        let now = self.now();
        let m = &self.config().nic;
        let base = m.one_way_latency_ns + m.link_ns(MSG_BYTES);
        match st.faults.active.as_deref() {
            None => Some(base),
            Some(fs) => {
                if fs.node_down(node) || fs.cut(node, Node::Membership, now).is_some() {
                    return None;
                }
                let k = fs.slow_factor(node, now).max(fs.slow_factor(Node::Membership, now));
                let delay = fs.node_delay_ns(node, now).max(fs.node_delay_ns(Node::Membership, now));
                Some(base * k + delay)
            }
        }
    }

    pub(crate) fn membership_event(&self, st: &mut State, e: MsEvent) {
        let now = self.now();
        let Some((lease, renew)) = st.faults.membership.as_ref().map(|m| (m.cfg.lease_ns, m.cfg.renew_ns)) else {
            return;
        };
        let push = |st: &mut State, at: u64, e: MsEvent| st.queue.push(at, Event::Fault(FaultEvent::Ms(e)));
        match e {
            MsEvent::Renew(Node::Cn(cn)) if st.faults.active.as_deref().is_some_and(|f| f.node_down(Node::Cn(cn))) => {
                // A crashed compute node never comes back (`crash-cn` has no restart):
                // its timer stops with it.
            }
            MsEvent::Renew(node) => {
                let clock = self.clock_of(st, node);
                if let Some(lat) = self.lease_msg_ns(st, node) {
                    let sent_local = dmtx_runtime::Clock::now_ns(&clock);
                    push(st, now + lat, MsEvent::Request { node, sent_local });
                }
                let next = clock.virtual_ns_for(renew);
                if next != u64::MAX {
                    push(st, now + next.max(1), MsEvent::Renew(node));
                }
            }
            MsEvent::Request { .. } | MsEvent::Check(_)
                if st
                    .faults
                    .active
                    .as_deref()
                    .is_some_and(|f| f.node_down(Node::Membership)) =>
            {
                // A crashed membership node neither grants nor expires leases.
            }
            MsEvent::Request { node, sent_local } => {
                let ms = st.faults.membership.as_mut().expect("running");
                let Some(m) = ms.members.get_mut(&node) else { return };
                let ok = m.in_view;
                if ok {
                    m.granted_until = m.granted_until.max(now + lease);
                    push(st, now + lease, MsEvent::Check(node));
                }
                if let Some(lat) = self.lease_msg_ns(st, node) {
                    push(st, now + lat, MsEvent::Ack { node, sent_local, ok });
                }
            }
            MsEvent::Ack { node, sent_local, ok } => {
                if st.faults.active.as_deref().is_some_and(|f| f.node_down(node)) {
                    return;
                }
                let ms = st.faults.membership.as_mut().expect("running");
                let Some(m) = ms.members.get_mut(&node) else { return };
                m.local_until = if ok {
                    Some(m.local_until.unwrap_or(0).max(sent_local + lease))
                } else {
                    None
                };
            }
            MsEvent::Check(node) => {
                let ms = st.faults.membership.as_mut().expect("running");
                let Some(m) = ms.members.get_mut(&node) else { return };
                if m.in_view && now >= m.granted_until {
                    m.in_view = false;
                    ms.change(now, node, Change::Expelled);
                }
            }
        }
    }

    /// The membership node restarted: with its view as it was, every member gets a fresh
    /// lease from now, as a coordination service grants on a new leader; members whose
    /// renewals still fail are expelled when it runs out.
    pub(crate) fn membership_restart(&self, st: &mut State) {
        let now = self.now();
        let Some(ms) = st.faults.membership.as_mut() else {
            return;
        };
        let lease = ms.cfg.lease_ns;
        let mut checks = Vec::new();
        for (&node, m) in ms.members.iter_mut().filter(|(_, m)| m.in_view) {
            m.granted_until = m.granted_until.max(now + lease);
            checks.push(node);
        }
        for node in checks {
            st.queue
                .push(now + lease, Event::Fault(FaultEvent::Ms(MsEvent::Check(node))));
        }
    }

    /// `node` came back (a restarted memory node): it rejoins with a fresh lease.
    pub(crate) fn membership_join(&self, st: &mut State, node: Node) {
        let now = self.now();
        let clock = self.clock_of(st, node);
        let Some(ms) = st.faults.membership.as_mut() else {
            return;
        };
        let lease = ms.cfg.lease_ns;
        let Some(m) = ms.members.get_mut(&node) else { return };
        if m.in_view {
            return;
        }
        m.in_view = true;
        m.granted_until = now + lease;
        m.local_until = Some(dmtx_runtime::Clock::now_ns(&clock) + lease);
        ms.change(now, node, Change::Joined);
        st.queue
            .push(now + lease, Event::Fault(FaultEvent::Ms(MsEvent::Check(node))));
    }
}
