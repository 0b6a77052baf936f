//! The worker's start-up and task-path functions are linked first
//! (shared/link-order/src/lib.rs; docs/PERFORMANCE.md, "Idle process memory").

fn main() {
    let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("link/symbol-order.txt");
    flotilla_link_order::link_listed_functions_first("flotilla-worker", &list);
}
