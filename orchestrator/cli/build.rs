//! The orchestrator's start-up and dispatch functions are linked first
//! (shared/link-order/src/lib.rs; docs/PERFORMANCE.md, "Idle process memory").

fn main() {
    flotilla_link_order::link_listed_functions_first("flotilla");
}
