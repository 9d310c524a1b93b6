//! Models that must compile: the accepted forms of `#[derive(Claimable)]`, one module each under
//! `tests/derive_pass/`. Their compile-fail counterparts are trybuild cases (`tests/ui.rs`).
//!
//! These are an ordinary test target rather than trybuild `pass` cases: a single `pass` case
//! makes trybuild build (not check) every compile-fail case too, one `cargo build` per case, with
//! a second copy of the dependency tree compiled to machine code. Here they compile with the rest
//! of the suite, and nothing in them runs: what they check is that they compile.

// The cases use `SqliteConnection`.
#![cfg(feature = "sqlite")]
// Models and functions that only need to compile, written as an application's crate writes
// them (public models, not all of them `Debug`).
#![allow(dead_code, unreachable_pub, missing_debug_implementations)]

#[path = "derive_pass/bool_state.rs"]
mod bool_state;
#[path = "derive_pass/column_name_renames.rs"]
mod column_name_renames;
#[path = "derive_pass/composite_key_claim_if_null.rs"]
mod composite_key_claim_if_null;
#[path = "derive_pass/control_table.rs"]
mod control_table;
#[path = "derive_pass/insert_once_without_returning.rs"]
mod insert_once_without_returning;
#[path = "derive_pass/null_state.rs"]
mod null_state;
#[path = "derive_pass/order_by_desc.rs"]
mod order_by_desc;
#[path = "derive_pass/own_methods_do_not_collide.rs"]
mod own_methods_do_not_collide;
#[path = "derive_pass/several_derives_on_one_model.rs"]
mod several_derives_on_one_model;
