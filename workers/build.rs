//! The worker's start-up and task-path functions are linked first
//! (shared/link-order/src/lib.rs; docs/PERFORMANCE.md, "Idle process memory").

fn main() {
    flotilla_link_order::link_listed_functions_first("flotilla-worker");
}
