//! Fault injection (work in progress).

use crate::Sim;

impl Sim {
    /// Control passed the named fault point on compute node `cn`.
    pub(crate) fn fault_point(&self, _cn: u32, _name: &'static str) {}

    /// True when compute node `cn` crashed: its tasks are never polled again.
    pub fn cn_down(&self, _cn: u32) -> bool {
        false
    }
}
